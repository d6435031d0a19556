package proxy

// LlamaAnswer is a llama.cpp /v1/completions answer of n tokens, each
// with its log-prob, for the benchmarks outside the package.
func LlamaAnswer(n int) []byte { return llamaAnswer(routeCompletion, n) }
