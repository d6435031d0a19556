package projections

import (
	"fmt"

	"github.com/rolloutledger/rolloutledger/events"
)

// Misrouted facts (docs/design.md §8.1, §11.2).
//
// A run's facts are totally ordered only within the one partition its id
// maps to. A record naming the run read from another partition — a producer
// with another partitioner, or a topic whose partition count changed — has
// no place in that order: folding it would race the run's own partition and
// make the decisions depend on which partition was read first, and replay,
// which reads the run's partition, would never see it. Such a record is not
// folded. The reader that finds it (the projector, or replay) reports it
// with [Misrouted]: a finding named by the record's position, not numbered
// by any fold, so the same record gives the same decision whoever reads it
// and whenever.

// FindingMisrouted is the kind of the finding about a misrouted record.
const FindingMisrouted = "misrouted"

// Misrouted is the audit.finding about record r of ev.Run, read from
// partition r.Partition of a facts topic of partitions partitions, while the
// run maps to partition want. Its id is [events.MisroutedID] of the record's
// position and its fact is {seq 0, partition, offset}: the record has no
// place in the run's sequence.
func Misrouted(ev events.Event, r Record, want, partitions int) (Decision, error) {
	f := Finding{Kind: FindingMisrouted, Event: ev.ID, Type: ev.Type,
		Detail: fmt.Sprintf("a fact of run %s was read from partition %d of %d; the run maps to partition %d, so the fact is not folded",
			ev.Run, r.Partition, partitions, want)}
	data, err := events.CanonicalJSON(f)
	if err != nil {
		return Decision{}, err
	}
	id := events.MisroutedID(ev.Run, r.Partition, r.Offset)
	v, err := events.CanonicalJSON(Envelope{
		ID: id, Run: ev.Run, Type: KindAuditFinding, V: DecisionSchemaVersion, Source: DecisionSource,
		RuleVersion: RuleVersion, Fact: FactPosition{Partition: r.Partition, Offset: r.Offset}, Data: data,
	})
	if err != nil {
		return Decision{}, err
	}
	return Decision{ID: id, Run: ev.Run, Kind: KindAuditFinding, Value: v}, nil
}

// IsMisrouted says whether a decision value is a misrouted finding: the one
// kind of decision no fold numbers.
func IsMisrouted(env Envelope) bool {
	return env.Type == KindAuditFinding && env.Fact.Seq == 0 && env.ID == events.MisroutedID(env.Run, env.Fact.Partition, env.Fact.Offset)
}
