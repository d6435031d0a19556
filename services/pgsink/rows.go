package pgsink

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	segjson "github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// kindAuditCheckpoint is the decision committing to a run's history every
// 10,000 facts (docs/design.md §7.8).
const kindAuditCheckpoint = "audit.checkpoint"

// rowSet is rows of some records, per table, in record order.
type rowSet struct {
	// dec decodes the facts. A fact's token arrays are carved from its
	// memory and overwritten by the next fact's: rows hold their counts,
	// and copy whatever binary values they store (a vocabulary's offsets).
	dec  events.Decoder
	rows [numTables][][]any
	// enc holds each table's rows as binary COPY tuples, when the window
	// was prepared with a plan (copybin.go); encFailed marks a table
	// whose rows did not all encode.
	enc       [numTables][]byte
	encFailed [numTables]bool
}

func (rs *rowSet) add(t tableID, row ...any) {
	rs.rows[t] = append(rs.rows[t], row)
}

// addRecord turns one record of the facts or decisions topic into rows. A
// record that cannot be stored becomes a skipped_records row, so that it
// is accounted for and the offsets still move past it.
func (rs *rowSet) addRecord(m kafkalog.Message, facts bool) {
	var reason string
	if facts {
		reason = rs.addFact(m)
	} else {
		reason = rs.addDecision(m)
	}
	if reason != "" {
		rs.add(tSkipped, m.Topic, int32(m.Partition), m.Offset, reason)
	}
}

func eventUUID(id string) (pgtype.UUID, bool) {
	u, err := uuid.Parse(id)
	if err != nil {
		return pgtype.UUID{}, false
	}
	return pgtype.UUID{Bytes: u, Valid: true}, true
}

// addFact adds the rows of one fact, or says why it has none.
func (rs *rowSet) addFact(m kafkalog.Message) string {
	ev, err := rs.dec.Decode(m.Value)
	if err != nil {
		return "undecodable fact: " + err.Error()
	}
	id, ok := eventUUID(ev.ID)
	if !ok {
		return "fact id is not a UUID"
	}
	part, off := int32(m.Partition), m.Offset
	// head is a row of width columns with the fact's own filled in.
	head := func(width int) []any {
		return append(make([]any, 0, width), id, ev.Run, ev.Source, ev.At, part, off)
	}
	common := func(tail ...any) []any { return append(head(len(factCols)+len(tail)), tail...) }
	switch d := ev.Data.(type) {
	case *events.RunStarted:
		c := d.Config.Resolve()
		declared, err := json.Marshal(d.Config)
		if err != nil {
			return "run config: " + err.Error()
		}
		rs.add(tRuns, common(d.Model, d.Harness, d.Notes, int32(c.GroupSize), int32(c.BatchGroups), int32(c.MinGroup),
			int32(c.MaxStaleness), c.PassBand[0], c.PassBand[1], int32(c.MinProbes), c.EnforceAdmission,
			c.PartialCreditCap, c.EfficiencyWeight, c.Advantage, string(declared))...)
	case *events.TaskRegistered:
		rs.add(tTasks, common(d.Task, d.Source, d.Kind, int64(d.Tier), nullable(d.Prompt), d.PromptCut)...)
		for i, g := range d.Gates {
			rs.add(tTaskGates, id, int32(i), g.Name, g.Passed, part, off)
		}
	case *events.GroupStarted:
		rs.add(tGroups, common(d.Group, d.Task, int64(d.Size), d.Purpose)...)
	case *events.GroupClosed:
		rs.add(tGroupClosures, common(d.Group, d.Reason)...)
	case *events.AttemptStarted:
		var retryOf any
		if d.RetryOf != "" {
			retryOf = d.RetryOf
		}
		rs.add(tAttempts, common(d.Attempt, d.Group, d.Task, d.Engine, d.VM, d.ForkMS, retryOf)...)
	case *events.AttemptFinished:
		rs.add(tAttemptOutcomes, common(d.Attempt, d.Outcome)...)
	case *events.AttemptFailed:
		rs.add(tAttemptFailures, common(d.Attempt, d.Reason)...)
	case *events.TurnGenerated:
		starts, versions := make([]int64, len(d.VersionSegments)), make([]int64, len(d.VersionSegments))
		for i, s := range d.VersionSegments {
			starts[i], versions[i] = s.Start, s.PolicyVersion
		}
		row := append(head(len(tables[tTurns].cols)),
			d.Attempt, int64(d.Turn), d.PolicyVersion(), d.PromptTokens, d.CompletionTokens,
			d.CachedTokens, int64(len(d.ObservationTokenIDs)), int64(len(d.TokenIDs)), d.Finish, d.LatencyMS,
			starts, versions, nullable(d.Text), d.TextCut)
		rs.add(tTurns, appendTurnV3(row, d)...)
	case *events.ToolCalled:
		row := []any{d.Attempt, int64(d.Turn), int64(d.Call), d.Tool, int64(d.ExitCode), d.DurationMS,
			d.OutputBytes, d.ToFile, d.Background, d.TimedOut, nullable(d.Input), d.InputCut, nullable(d.Output), d.OutputCut}
		rs.add(tToolCalls, common(append(row, toolV3(d)...)...)...)
	case *events.ContextCompacted:
		rs.add(tCompactions, common(d.Attempt, int64(d.Turn), d.TokensBefore, d.TokensAfter)...)
	case *events.RewardComputed:
		rs.add(tRewards, common(d.Attempt, d.Passed, int64(d.TestsPassed), int64(d.TestsTotal), d.Verifier)...)
	case *events.PolicyPublished:
		rs.add(tPolicyVersions, common(d.Version, d.Checkpoint, d.Digest, d.Precision)...)
	case *events.GradientApplied:
		rs.add(tGradientSteps, common(d.Step, d.Batch, d.BatchDigest, d.FromVersion, d.ToVersion, d.Loss,
			d.TrainedTokens, d.TruncatedFraction, d.GradNorm)...)
		for k, gap := range d.LogprobGap {
			// Keys were checked by the decoder: non-negative integers.
			s, err := strconv.ParseInt(k, 10, 64)
			if err != nil {
				return fmt.Sprintf("logprob_gap key %q", k)
			}
			rs.add(tGradientGaps, id, s, gap, part, off)
		}
	case *events.VocabularyRegistered:
		rs.add(tVocabularyChunks, common(vocabularyRow(d)...)...)
	default:
		return fmt.Sprintf("no table for fact type %s", ev.Type)
	}
	return ""
}

// addDecision adds the rows of one decision, or says why it has none.
func (rs *rowSet) addDecision(m kafkalog.Message) string {
	// Decisions are read with segmentio's decoder, which reads
	// encoding/json's documents into the same values, faster.
	var env projections.Envelope
	if err := segjson.Unmarshal(m.Value, &env); err != nil {
		return "undecodable decision: " + err.Error()
	}
	id, ok := eventUUID(env.ID)
	if !ok {
		return "decision id is not a UUID"
	}
	part, off := int32(m.Partition), m.Offset
	tail := []any{int32(env.RuleVersion), int64(env.Fact.Seq), env.Fact.Partition, env.Fact.Offset, part, off}
	switch env.Type {
	case projections.KindTaskAdmitted, projections.KindTaskRejected:
		var a projections.Admission
		if err := segjson.Unmarshal(env.Data, &a); err != nil {
			return fmt.Sprintf("%s data: %v", env.Type, err)
		}
		decision := "admitted"
		if env.Type == projections.KindTaskRejected {
			decision = "rejected"
		}
		rs.add(tAdmissions, append([]any{id, env.Run, decision, a.Task, a.Probes, a.Passes, a.PassRate}, tail...)...)
	case projections.KindAuditFinding:
		var f projections.Finding
		if err := segjson.Unmarshal(env.Data, &f); err != nil {
			return fmt.Sprintf("%s data: %v", env.Type, err)
		}
		var turns any
		if f.Turns != nil {
			turns = f.Turns
		}
		var batch any
		if f.Batch != 0 {
			batch = int64(f.Batch)
		}
		rs.add(tAuditFindings, append([]any{id, env.Run, f.Kind, f.Detail, nullable(f.Event), nullable(string(f.Type)),
			nullable(f.Task), nullable(f.Group), nullable(f.Attempt), turns, batch, nullable(f.Want), nullable(f.Got)}, tail...)...)
	case projections.KindBatchSealed:
		var b projections.Manifest
		if err := segjson.Unmarshal(env.Data, &b); err != nil {
			return fmt.Sprintf("%s data: %v", env.Type, err)
		}
		rs.addBatch(env, id, &b, part, off)
	case kindAuditCheckpoint:
		var cp struct {
			Tree      projections.TreeHead `json:"tree"`
			Decisions json.RawMessage      `json:"decisions"`
		}
		if err := segjson.Unmarshal(env.Data, &cp); err != nil {
			return fmt.Sprintf("%s data: %v", env.Type, err)
		}
		if len(cp.Decisions) == 0 {
			cp.Decisions = json.RawMessage("{}")
		}
		rs.add(tAuditCheckpoints, append([]any{id, env.Run, int64(cp.Tree.Size), cp.Tree.Root, string(cp.Decisions)}, tail...)...)
	default:
		return fmt.Sprintf("no table for decision type %s", env.Type)
	}
	return ""
}

func (rs *rowSet) addBatch(env projections.Envelope, id pgtype.UUID, b *projections.Manifest, part int32, off int64) {
	k := int64(b.Seq)
	rs.add(tBatches, env.Run, k, id, int64(b.TrainerVersion), int32(b.RuleVersion), b.Watermark.Partition, b.Watermark.Offset,
		int64(b.Tree.Size), b.Tree.Root, b.Digest, int64(b.Stats.Groups), int64(b.Stats.Attempts), int64(b.Stats.Turns),
		int64(b.Stats.TrainedTurns), int64(env.Fact.Seq), env.Fact.Partition, env.Fact.Offset, part, off)
	for gi, g := range b.Groups {
		rs.add(tBatchGroups, env.Run, k, g.Group, int32(gi), g.Task, g.Completed.Partition, g.Completed.Offset, part, off)
		for _, a := range g.Attempts {
			trained := int64(0)
			for _, t := range a.Turns {
				if t.Trained {
					trained++
				}
				rs.add(tBatchTurns, env.Run, k, a.Attempt, t.Turn, t.PolicyVersion, t.Staleness, t.Trained, t.Partition, t.Offset, part, off)
			}
			// The batch's staleness split (docs/design.md §6.7), per attempt.
			var inFlight, inQueue any
			if n := len(a.Turns); n > 0 {
				first, last := a.Turns[0].PolicyVersion, a.Turns[n-1].PolicyVersion
				inFlight, inQueue = last-first, (k-1)-last
			}
			rs.add(tBatchAttempts, env.Run, k, g.Group, a.Attempt, a.Score, a.Bonus, a.Reward, a.Advantage,
				a.CompletionTokens, int64(len(a.Turns)), trained, inFlight, inQueue, part, off)
		}
	}
	for di, d := range b.Dropped {
		rs.add(tBatchDrops, env.Run, k, int32(di), d.Group, d.Task, d.Reason, part, off)
	}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
