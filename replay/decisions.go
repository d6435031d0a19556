package replay

import (
	"bytes"
	"fmt"

	"github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// decisionInfo is what replay reads of a recorded decision's envelope.
type decisionInfo struct {
	ID          string
	Type        events.Type
	RuleVersion int
	Fact        projections.FactPosition
	// Seq is known from the value for batches (data.seq) and checkpoints
	// (their fact); 0 for other kinds.
	Seq uint64
	// Head is the tree head a batch or checkpoint carries.
	Head *projections.TreeHead
	// Config is the effective configuration a batch recorded.
	Config *events.Config
}

// parseRecorded reads a decision's envelope. A batch's record holds its
// whole manifest (megabytes at a large batch): it is read once, its data
// left in place (segmentio's decoder, DontCopyRawMessage), and only a
// batch's or checkpoint's data is read again, for its seq, head and config.
func parseRecorded(r Recorded) (decisionInfo, error) {
	var env struct {
		ID          string                   `json:"id"`
		Type        events.Type              `json:"type"`
		RuleVersion int                      `json:"rule_version"`
		Fact        projections.FactPosition `json:"fact"`
		Data        json.RawMessage          `json:"data"`
	}
	rest, err := json.Parse(r.Value, &env, json.DontCopyRawMessage)
	if err == nil && len(bytes.TrimSpace(rest)) > 0 {
		err = fmt.Errorf("%d bytes after the decision's value", len(rest))
	}
	if err != nil {
		return decisionInfo{}, fmt.Errorf("decision at %d/%d: %w", r.Partition, r.Offset, err)
	}
	if env.ID == "" || env.Type == "" {
		return decisionInfo{}, fmt.Errorf("decision at %d/%d has no id or type", r.Partition, r.Offset)
	}
	d := decisionInfo{ID: env.ID, Type: env.Type, RuleVersion: env.RuleVersion, Fact: env.Fact}
	switch env.Type {
	case projections.KindBatchSealed, projections.KindAuditCheckpoint:
		var data struct {
			Seq    uint64                `json:"seq"`
			Tree   *projections.TreeHead `json:"tree"`
			Config *events.Config        `json:"config"`
		}
		if err := json.Unmarshal(env.Data, &data); err != nil {
			return d, fmt.Errorf("decision %s: %w", env.ID, err)
		}
		d.Seq, d.Head, d.Config = data.Seq, data.Tree, data.Config
		if env.Type == projections.KindAuditCheckpoint {
			d.Seq = env.Fact.Seq / projections.CheckpointInterval
		}
	}
	return d, nil
}
