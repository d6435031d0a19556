// Package dataset exports a run's history as datasets people load in one
// line: Parquet tables, a Hugging Face datasets layout, ATIF trajectories
// and chat-messages JSONL (docs/design.md §14.7, docs/analysts.md).
//
// # Source of truth
//
// [Build] folds the run's facts with the projection rules, in the one pass
// every replay makes ([replay.Fold]), and takes the batches, their samples
// and the judgement of each turn from the decisions the fold concludes,
// not from the record: an export is what the ledger's rules say about the
// facts read, and names the fact tree's head after the last of them, so a
// dataset can be checked against the ledger's recorded heads.
//
// # Determinism
//
// The same history gives the same bytes: rows are in log order (attempts
// by their attempt.started, batches and samples by seq), JSON is encoded
// from structs and sorted maps, and the Parquet writer's properties are
// fixed and carry no clock (parquet.go).
package dataset
