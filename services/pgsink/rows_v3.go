package pgsink

import (
	"slices"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/rolloutledger/rolloutledger/events"
)

// What catalogue v3 added (docs/design.md §18.9, §18.10; migration 00007).
// A version 1 or 2 fact has none of it: NULLs, false and an empty tags
// array.

// appendTurnV3 appends the v3 columns of a turn to row, in the order of
// tables[tTurns].
func appendTurnV3(row []any, d *events.TurnGenerated) []any {
	var parent, divTurn, divAt any
	if d.Parent != nil {
		parent = int64(*d.Parent)
	}
	var prefix any
	if d.Parent != nil || d.PrefixTokens != 0 {
		prefix = d.PrefixTokens
	}
	if d.Diverged != nil {
		divTurn, divAt = int64(d.Diverged.Turn), d.Diverged.At
	}
	s := d.Sampling
	if s == nil {
		s = &events.Sampling{}
	}
	var engine, version any
	if d.Engine != nil {
		engine, version = d.Engine.Name, nullable(d.Engine.Version)
	}
	tags := d.Tags
	if tags == nil {
		tags = []string{}
	}
	var known any
	for _, seg := range d.VersionSegments {
		if seg.Known != "" {
			k := make([]pgtype.Text, len(d.VersionSegments))
			for i, seg := range d.VersionSegments {
				k[i] = pgtype.Text{String: seg.Known, Valid: seg.Known != ""}
			}
			known = k
			break
		}
	}
	return append(row, parent, prefix, divTurn, divAt, nullable(d.PromptIDsFrom), nullable(d.IDsFrom),
		orNil(s.Temperature), orNil(s.TopP), orNil(s.TopK), orNil(s.MinP), orNil(s.MaxTokens), orNil(s.Seed),
		orNil(s.PresencePenalty), orNil(s.FrequencyPenalty), orNil(s.RepetitionPenalty), nullable(s.LogprobsMode),
		engine, version, tags, d.HasTag(events.TagRefused), known)
}

// turnV3Cols are the columns of turnV3.
var turnV3Cols = []string{"parent", "prefix_tokens", "diverged_turn", "diverged_at", "prompt_ids_from", "ids_from",
	"temperature", "top_p", "top_k", "min_p", "max_tokens", "seed",
	"presence_penalty", "frequency_penalty", "repetition_penalty", "logprobs_mode",
	"engine_name", "engine_version", "tags", "refused", "segment_known"}

// toolV3 is the v3 columns of a tool call, in the order of toolV3Cols.
func toolV3(d *events.ToolCalled) []any {
	return []any{nullable(d.CallID), d.Unanswered, d.ExitUnknown}
}

var toolV3Cols = []string{"call_id", "unanswered", "exit_unknown"}

// vocabularyRow is the columns of a vocabulary chunk after the fact's own.
// Its offsets are copied out of the decoder's memory (rowSet.dec).
func vocabularyRow(d *events.VocabularyRegistered) []any {
	var pieces, offsets any
	if d.Pieces != nil {
		pieces = d.Pieces
	}
	if d.Offsets != nil {
		offsets = slices.Clone(d.Offsets)
	}
	return []any{d.Engine, d.Model, d.Size, int32(d.Chunk), int32(d.Chunks), d.First, int32(len(d.Offsets)), pieces, offsets}
}

var vocabularyCols = []string{"engine", "model", "size", "chunk", "chunks", "first_token", "tokens", "pieces", "offsets"}

// orNil is *p, or NULL.
func orNil[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
