// Package replay reads a run back — from Kafka or from an exported archive —
// re-folds it with the projections, and checks what was recorded against
// what the facts imply (docs/design.md §9, §10, §14).
//
// # Sources
//
// A [Source] gives a run's facts in log order, numbered from 1 as the fold
// numbers them, and the decisions recorded about them. [OpenKafka] reads the
// run's partition of the facts and decisions topics up to the offsets that
// were their ends when it opened, and folds what the projector folds: the
// records that decode to an event of the run. [OpenArchive] reads an archive
// written by [Export] (format in archive.go), verifying it as it opens. Both
// pass one test suite.
//
// # Verify
//
// [Verify] re-folds every fact under the run's recorded rule version and
// compares every decision it concludes, byte for byte, with the decision
// recorded under the same id: a batch's manifest (whose digest covers its
// samples), an admission, a finding, a checkpoint. It also compares the fact
// tree with every head a batch or checkpoint recorded. The [Report] names
// the first divergent decision — kind, seq, the first field that differs,
// recorded and recomputed — and, when the facts themselves changed, the
// first fact position changed, dropped, inserted or moved (history.go).
// For an archive it also recomputes the leaf of every fact and compares it
// with the archive's leaf index, leaf for leaf, and the heads its manifest
// lists with the recorded ones: an index or a manifest that says other
// than the facts is reported even when every head matches, since proofs
// and readers take them from the file. A recorded decision is kept as a
// digest, not a value, so memory does not grow with the manifests.
//
// An archive refuses, on open, a record whose Kafka position cannot be
// one (a partition outside 0..2^31-1, a negative offset), naming the byte
// of its frame.
//
// # As of a step, what if
//
// [AsOfStep] folds up to the fact that sealed batch K and reads the fold's
// state there (projections.ViewState): the queue, the groups in flight, the
// admissions, the versions published. [WhatIf] folds the facts again with
// other settings of the run's configuration (projections.FoldOptions) and
// sets the batches it would have sealed against the recorded ones.
//
// # Proofs
//
// [ProveInclusion] and [ProveConsistency] make the RFC 6962 proofs of the
// run's fact tree against recorded heads; [CheckProof] checks one with
// nothing but the heads the checker trusts.
//
// # Cost
//
// A pass holds the fold's state in a projections.MemStore: per event id a
// 32-byte digest (the dedup index), per task, group and attempt a small
// record, and the tokens of turns not yet in a sealed batch — about 150
// bytes per fact for a run without inline tokens. Proofs and the history
// check keep O(log n) hashes.
package replay
