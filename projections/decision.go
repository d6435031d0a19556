package projections

import (
	"encoding/json"
	"fmt"

	"github.com/rolloutledger/rolloutledger/events"
)

// RuleVersion is the version of the projection rules (docs/design.md §6) this
// package implements. Every decision records it; changing what a rule
// concludes from the same facts is a new version, never an edit of this one.
//
// Version 2: staleness, masks and stats per version segment of a turn
// (partly trained turns, trained_tokens and masked_tokens), and the batch
// digest over the samples' canonical binary form.
//
// Version 3: RLOO's mean of the others is an ordered sum (§6.5); a
// group.closed completes its group at the close's own position with the
// slots complete there, never waiting for an owed verdict, and a slot two
// attempts complete is held by the one that completed first (§6.1); inline
// tokens of a turn whose attempt has not started are not kept, and are an
// unstarted_tokens finding (§6.1, §8.2); every batch.sealed records the
// run's effective configuration (§7.3), and the defaults are pinned per
// version (testdata/golden/ruleset-vN.json); a record read from a
// partition its run does not map to is not folded but a misrouted finding
// (misrouted.go).
//
// Version 4: whole sequences for trainers (§6.8, §6.9). A version 3
// turn.generated (one a recording proxy writes) starts a new training
// segment when it has no parent and is not its attempt's first turn, or
// when it does not extend the previous turn's whole sequence (a branch, or
// a divergence); the segment's sample begins with the parent chain's
// shared prefix, loss-masked. Every turn of an attempt with a refused turn
// is masked (masked "refused"). Samples carry each token's sampling
// temperature, which changes their canonical binary form and so the
// batch digest.
const RuleVersion = 4

// MinRuleVersion is the oldest rule version this build still folds, for
// replays of runs sealed under it (FoldOptions.RuleVersion).
const MinRuleVersion = 3

// SupportsRuleVersion reports whether this build can fold a run under
// rule version v.
func SupportsRuleVersion(v int) bool { return v >= MinRuleVersion && v <= RuleVersion }

// The decision kinds the fold concludes.
const (
	KindBatchSealed  = events.Type("batch.sealed")
	KindTaskAdmitted = events.Type("task.admitted")
	KindTaskRejected = events.Type("task.rejected")
	KindAuditFinding = events.Type("audit.finding")
	// KindAuditCheckpoint commits to the run's history every
	// CheckpointInterval facts (tree.go).
	KindAuditCheckpoint = events.Type("audit.checkpoint")
)

// DecisionSource is the envelope source of every decision.
const DecisionSource = "projector"

// DecisionSchemaVersion is the envelope "v" of decisions.
const DecisionSchemaVersion = 1

// Decision is one conclusion of the fold, written to the decisions topic.
type Decision struct {
	ID    string      // events.DecisionID(run, kind, seq)
	Run   string      // the run the decision is about
	Kind  events.Type // "batch.sealed", "task.admitted", "task.rejected", "audit.finding"
	Seq   uint64      // 1-based, per run and kind
	Value []byte      // canonical JSON record value (an [Envelope])
	// Samples is the canonical binary samples of a batch.sealed (nil
	// otherwise; samples.go); the digest in Value covers them.
	Samples []byte
	// Data is Value's data, a slice of it, and Manifest a batch.sealed's
	// manifest as Data holds it (nil otherwise): what the fold's readers
	// in the same process take instead of decoding Value again, megabytes
	// at a large batch. Neither is recorded; a decision read back from
	// the log has neither.
	Data     []byte
	Manifest *Manifest
	// Fact is the position of the fact that caused it, as in Value.
	Fact FactPosition
}

// Envelope is the record value of a decision. It carries no clock, so a
// decision re-emitted after a crash is byte-identical to the first.
type Envelope struct {
	ID          string      `json:"id"`
	Run         string      `json:"run"`
	Type        events.Type `json:"type"`
	V           int         `json:"v"`
	Source      string      `json:"source"`
	RuleVersion int         `json:"rule_version"`
	// Fact is the position of the fact that caused the decision.
	Fact FactPosition `json:"fact"`
	// Data is a [Manifest], an [Admission] or a [Finding], by Type.
	Data json.RawMessage `json:"data"`
}

// FactPosition places a fact in the run: its 1-based sequence number among
// the run's records (duplicates included; the Merkle leaf index plus one)
// and its Kafka partition and offset.
type FactPosition struct {
	Seq       uint64 `json:"seq"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// LogPosition is a fact's Kafka partition and offset.
type LogPosition struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// Admission is the data of task.admitted and task.rejected.
type Admission struct {
	Task     string  `json:"task"`
	Probes   int64   `json:"probes"`
	Passes   int64   `json:"passes"`
	PassRate float64 `json:"pass_rate"`
}

// Finding kinds (docs/design.md §8). Those marked (§8.1) are the audit
// findings; the others (§8.2) are the fold's own account of facts it set aside.
const (
	FindingConflictingDuplicate = "conflicting_duplicate" // (§8.1) same event id, different bytes; the later ignored
	FindingDuplicateRunStarted  = "duplicate_run_started" // a second run.started; ignored
	FindingDuplicateEntity      = "duplicate_entity"      // a second declaration of one entity (group, attempt, task, turn, reward, close); ignored
	FindingInvalidConfig        = "invalid_config"        // run.started whose config fails validation; defaults kept
	FindingUndecodable          = "undecodable_fact"      // a record that does not decode; counted, otherwise ignored
	FindingUnknownEntity        = "unknown_entity"        // (§8.1) at group completion: a task never registered, a retry of an unknown attempt
	FindingLateReward           = "late_reward"           // (§8.1) a reward for an attempt whose group already completed
	FindingLateFact             = "late_fact"             // a turn, compaction or attempt.started after its group completed
	FindingNegativeStaleness    = "negative_staleness"    // (§8.1) turns generated by a version the batch's step has not reached
	FindingTurnGap              = "turn_gap"              // (§8.1) missing turn indices in an attempt at group completion
	FindingVersionJump          = "version_jump"          // (§8.1) a turn with a lower policy version than an earlier turn
	FindingBatchDigestMismatch  = "batch_digest_mismatch" // (§8.1) gradient.applied naming a digest other than the sealed one
	FindingUnknownBatch         = "unknown_batch"         // gradient.applied for a batch that was never sealed
	FindingUnstartedTokens      = "unstarted_tokens"      // inline tokens of a turn whose attempt has not started; not kept
	// FindingMisrouted (misrouted.go): (§8.1) a record read from a partition its run does not map to; not folded
)

// Finding is the data of an audit.finding. Kind and Detail are always set;
// the other fields name what the finding is about, when they apply.
type Finding struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	// Event is the id of the fact the finding is about, Type its type.
	Event   string      `json:"event,omitempty"`
	Type    events.Type `json:"type,omitempty"`
	Task    string      `json:"task,omitempty"`
	Group   string      `json:"group,omitempty"`
	Attempt string      `json:"attempt,omitempty"`
	// Turns are turn indices, ascending.
	Turns []int64 `json:"turns,omitempty"`
	Batch uint64  `json:"batch,omitempty"`
	// Want and Got are the sealed and the reported batch digest.
	Want string `json:"want,omitempty"`
	Got  string `json:"got,omitempty"`
}

// envelopeOfKind decodes a decision value and checks its kind.
func envelopeOfKind(value []byte, kind events.Type) (Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(value, &env); err != nil {
		return Envelope{}, fmt.Errorf("projections: decision: %w", err)
	}
	if env.Type != kind {
		return Envelope{}, fmt.Errorf("projections: a %s decision is not a %s", env.Type, kind)
	}
	return env, nil
}

func unmarshalData(env Envelope, v any) error {
	if err := json.Unmarshal(env.Data, v); err != nil {
		return fmt.Errorf("projections: %s data: %w", env.Type, err)
	}
	return nil
}
