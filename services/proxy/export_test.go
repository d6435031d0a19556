package proxy

// LlamaAnswer is a llama.cpp /v1/completions answer of n tokens, each
// with its log-prob, for the benchmarks outside the package.
func LlamaAnswer(n int) []byte { return llamaAnswer(routeCompletion, n) }

// ExpireIdle runs the pass the proxy makes every minute over the attempts
// past their retention.
func (s *Server) ExpireIdle() { s.expire() }
