// Package proxy is the recording proxy (docs/design.md §19): it sits between
// an agent harness and its inference engine (vLLM, SGLang or llama.cpp),
// answers as the engine does, and records each turn exactly as the engine
// saw it.
//
// # What it guarantees
//
//   - Token truth: token ids come from the engine — in its answer, from its
//     native routes, or from its own tokenize and template routes — never
//     from re-tokenizing text in Go. Every turn is checked (ids, log-probs
//     and usage agree); a turn that fails is tagged, or refused with --strict.
//   - Turns as prefixes: a turn records its parent (the earlier turn whose
//     prompt and completion are the longest prefix of its prompt) and only
//     its new prompt tokens; a turn without a parent carries its whole
//     prompt, so samples hold every token from the first prompt token.
//   - Durability: a turn's facts are committed to the spool (a Pebble
//     database, synced; concurrent commits share one fsync) before the last
//     byte of the answer reaches the harness. The sender delivers them to
//     the ledger's ingest afterwards, retrying the same bytes under ids that
//     are a pure function of run, attempt and turn, so a retry or a replay
//     of the spool after a crash is a duplicate the ledger drops.
//   - Nothing of the proxy's own goes upstream: the ledger token is sent to
//     the ledger only, and the identity headers are removed before the
//     request reaches the engine.
//
// # Where things are
//
// [Server] routes and identity (identity.go); engine adapters (engine.go,
// llamacpp.go, vllm.go, sglang.go) edit requests and read answers into a
// [capture]; turn.go builds facts from a capture and the attempt's state
// (prefix.go relates a prompt to earlier turns); spool.go and sender.go
// hold and deliver the facts; weights.go follows policy versions;
// vocabulary.go registers the engine's vocabulary once per run.
package proxy
