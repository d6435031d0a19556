// Package projections folds one run's facts into the decisions the ledger
// publishes: sealed training batches with their samples, task admissions,
// and audit findings (docs/design.md §6–§8). It does no I/O and has no clock,
// no randomness and no goroutines.
//
// # The fold
//
// A [Fold] is applied to every record of one run, in log order, with
// [Fold.Apply]. Apply is a pure function of the record and the state it is
// given:
//
//	state', decisions = Apply(state, record)
//
// Apply must be deterministic. The same records in the same order, from the
// same state, give byte-identical decisions and state on any machine and
// with any build of this package that carries the same [RuleVersion]. To
// keep that true the package never reads a clock (not even an event's
// `at`), never draws random numbers, never lets Go map iteration order reach
// an output, sums floats in a fixed order (a group's attempts ordered by
// attempt id, bytewise) and encodes JSON with events.CanonicalJSON (struct
// field order, map keys sorted, no HTML escaping, no trailing newline),
// the encoding of the facts themselves. A change to what
// the rules conclude is a new RuleVersion, never an edit of the old one.
//
// # State
//
// All state lives in a [Store]; a Fold holds nothing but its run id between
// calls. What the state holds, all of it a function of the records applied
// so far:
//
//   - a header: the run's fact sequence number, the sequence numbers of the
//     decisions issued per kind, and the open batch's cursor;
//   - the right edge of the run's fact tree: at most 64 subtree roots
//     ([Tree], tree.go);
//   - the run's resolved config once run.started was applied;
//   - the dedup index: for every event id, the SHA-256 of its first record;
//   - per task, group and attempt, what rules 1–6 still need of it; a
//     completed group and its attempts shrink to markers that make later
//     facts about them late;
//   - the inline tokens of turns, until the batch that trains them is
//     sealed (or their group is dropped or not a train group), then deleted;
//   - the manifest entries of the open batch and the groups dropped since the
//     last batch, until the next seal;
//   - the digest of every sealed batch, for gradient.applied.
//
// The key layout is listed in state.go; values are small versioned binary
// records, and JSON for the open batch.
//
// So Go memory stays bounded by one group or one batch however long a run
// grows, and a projector that persists the Store atomically with the offset
// of the last record it applied (one Pebble batch holding both) can crash at
// any point and resume: it reopens the state at that offset, applies the
// next record, and re-emits the decisions it may have lost, byte-identical
// and under the same ids. There are no separate snapshots: the Store at an
// offset is the snapshot of the fold at that offset, and [MemStore.Clone]
// is how tests take one.
//
// An error from Apply (from the Store, or a record of another run) leaves
// the Store partly written; the caller discards those writes.
//
// # Positions
//
// Every record of the run counts, duplicates and undecodable ones
// included: the n-th record applied has fact sequence number n, which is
// also its leaf index plus one in the run's fact tree, an RFC 6962 Merkle
// tree whose leaf is SHA-256(0x00 || record value). A decision names the
// record that caused it in its envelope's `fact` {seq, partition, offset};
// a sealed batch carries the tree's head {size, root} at its watermark, and
// every [CheckpointInterval]-th record causes an audit.checkpoint carrying
// the head there, so each commits to the run's whole history before it.
//
// # Decisions
//
// A [Decision] of kind [KindBatchSealed], [KindTaskAdmitted],
// [KindTaskRejected], [KindAuditFinding] or [KindAuditCheckpoint] is
// numbered per run and kind from 1 and identified by
// events.DecisionID(run, kind, seq). Its value is an [Envelope] whose data
// is a [Manifest], an [Admission], a [Finding] or a [Checkpoint]; a sealed
// batch also carries its samples in their canonical binary form (samples.go:
// [AppendSample], [SampleReader]), which the manifest's digest covers, and
// which [WriteNDJSON] renders for people.
//
// [NewFoldWith] folds a run under an adjusted configuration (what-if
// replays); [ViewState] reads a fold's state back for people; [Audit] is
// the audit projection, a second pure fold over the facts and the
// decisions that measures what docs/design.md §14.8 lists.
//
// # Rules
//
// The rules are docs/design.md §4–§6, one file each: dedup and config in fold.go,
// group completion in group.go, rewards in reward.go, admission in
// admission.go, batches and staleness in batch.go, samples and compaction
// segments in samples.go, the trainer and turn audits in audit.go. Where
// the design leaves a choice, the file that implements the rule says which
// reading it takes, and the reading is part of the [RuleVersion]. Each rule's
// cases are transcripts under testdata/rules/ (facts in, decisions out; the
// language is described in testdata/rules/README.md), so a rule change reads
// as a diff of a transcript.
package projections
