package dataset

import (
	"cmp"
	"encoding/binary"
	"iter"
	"math"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// The columns of each table, documented in docs/analysts.md ("Exports").
// A value the history does not give — the score of an attempt no batch
// used, the staleness of a turn no batch judged — is null, never 0.

var taskColumns = []column[*Task]{
	dictionary(strCol("run", func(r *row[*Task]) string { return r.run.Run })),
	u64Col("fact_seq", func(r *row[*Task]) uint64 { return r.r.Seq }),
	strCol("task", func(r *row[*Task]) string { return r.r.Task }),
	dictionary(strCol("source", func(r *row[*Task]) string { return r.r.Source })),
	dictionary(strCol("kind", func(r *row[*Task]) string { return r.r.Kind })),
	dictionary(i64Col("tier", func(r *row[*Task]) int64 { return int64(r.r.Tier) })),
	optStrCol("prompt", func(r *row[*Task]) string { return r.r.Prompt }),
	i64Col("prompt_cut", func(r *row[*Task]) int64 { return r.r.PromptCut }),
	dictionary(optStrCol("admission", func(r *row[*Task]) string { return r.r.Admission })),
	optI64Col("probes", func(r *row[*Task]) (int64, bool) { return r.r.Probes, r.r.Admission != "" }),
	optI64Col("probe_passes", func(r *row[*Task]) (int64, bool) { return r.r.Passes, r.r.Admission != "" }),
	optF64Col("probe_pass_rate", func(r *row[*Task]) (float64, bool) { return r.r.PassRate, r.r.Admission != "" }),
}

var attemptColumns = []column[*Attempt]{
	dictionary(strCol("run", func(r *row[*Attempt]) string { return r.run.Run })),
	u64Col("fact_seq", func(r *row[*Attempt]) uint64 { return r.r.Seq }),
	dictionary(strCol("task", func(r *row[*Attempt]) string { return r.r.Task })),
	dictionary(strCol("group", func(r *row[*Attempt]) string { return r.r.Group })),
	strCol("attempt", func(r *row[*Attempt]) string { return r.r.Attempt }),
	dictionary(optStrCol("purpose", func(r *row[*Attempt]) string { return r.r.Purpose })),
	dictionary(strCol("engine", func(r *row[*Attempt]) string { return r.r.Engine })),
	optStrCol("retry_of", func(r *row[*Attempt]) string { return r.r.RetryOf }),
	dictionary(optStrCol("outcome", func(r *row[*Attempt]) string { return r.r.Outcome })),
	dictionary(optStrCol("failure_reason", func(r *row[*Attempt]) string { return r.r.FailureReason })),
	optBoolCol("passed", func(r *row[*Attempt]) (bool, bool) { return r.r.Passed, r.r.Rewarded }),
	optI64Col("tests_passed", func(r *row[*Attempt]) (int64, bool) { return int64(r.r.TestsPassed), r.r.Rewarded }),
	dictionary(optI64Col("tests_total", func(r *row[*Attempt]) (int64, bool) { return int64(r.r.TestsTotal), r.r.Rewarded })),
	optF64Col("score", func(r *row[*Attempt]) (float64, bool) { return r.r.Score, r.r.Batch > 0 }),
	optF64Col("bonus", func(r *row[*Attempt]) (float64, bool) { return r.r.Bonus, r.r.Batch > 0 }),
	optF64Col("reward", func(r *row[*Attempt]) (float64, bool) { return r.r.Reward, r.r.Batch > 0 }),
	optF64Col("advantage", func(r *row[*Attempt]) (float64, bool) { return r.r.Advantage, r.r.Batch > 0 }),
	i64Col("completion_tokens", func(r *row[*Attempt]) int64 { return r.r.CompletionTokens }),
	i64Col("prompt_tokens", func(r *row[*Attempt]) int64 { return r.r.PromptTokens }),
	i64Col("cached_tokens", func(r *row[*Attempt]) int64 { return r.r.CachedTokens }),
	i64Col("turns", func(r *row[*Attempt]) int64 { return int64(r.r.Turns) }),
	optI64Col("batch_seq", func(r *row[*Attempt]) (int64, bool) { return int64(r.r.Batch), r.r.Batch > 0 }),
	optF64Col("trained_share", func(r *row[*Attempt]) (float64, bool) { return r.r.TrainedShare, r.r.Batch > 0 }),
	dictionary(optStrCol("drop_reason", func(r *row[*Attempt]) string { return r.r.DropReason })),
}

var turnColumns = []column[*Turn]{
	dictionary(strCol("run", func(r *row[*Turn]) string { return r.run.Run })),
	u64Col("fact_seq", func(r *row[*Turn]) uint64 { return r.r.Seq }),
	i64Col("log_partition", func(r *row[*Turn]) int64 { return int64(r.r.Partition) }),
	i64Col("log_offset", func(r *row[*Turn]) int64 { return r.r.Offset }),
	dictionary(strCol("attempt", func(r *row[*Turn]) string { return r.r.Attempt })),
	dictionary(i64Col("turn", func(r *row[*Turn]) int64 { return int64(r.r.Turn) })),
	dictionary(i64Col("policy_version", func(r *row[*Turn]) int64 { return first(r.r.SegmentVersions) })),
	listI64Col("segment_starts", func(r *row[*Turn]) []int64 { return r.r.SegmentStarts }),
	listI64Col("segment_versions", func(r *row[*Turn]) []int64 { return r.r.SegmentVersions }),
	dictionary(optI64Col("batch_seq", func(r *row[*Turn]) (int64, bool) { return int64(r.r.Batch), r.r.Batch > 0 })),
	dictionary(optI64Col("staleness", func(r *row[*Turn]) (int64, bool) { return r.r.Staleness, r.r.Batch > 0 })),
	optBoolCol("trained", func(r *row[*Turn]) (bool, bool) { return r.r.Trained, r.r.Batch > 0 }),
	optListI64Col("segment_staleness", func(r *row[*Turn]) ([]int64, bool) { return r.r.SegmentStaleness, r.r.Batch > 0 }),
	optListBoolCol("segment_trained", func(r *row[*Turn]) ([]bool, bool) { return r.r.SegmentTrained, r.r.Batch > 0 }),
	i64Col("prompt_tokens", func(r *row[*Turn]) int64 { return r.r.PromptTokens }),
	i64Col("completion_tokens", func(r *row[*Turn]) int64 { return r.r.CompletionTokens }),
	i64Col("cached_tokens", func(r *row[*Turn]) int64 { return r.r.Cached }),
	i64Col("observation_tokens", func(r *row[*Turn]) int64 { return r.r.ObservationTokens }),
	i64Col("inline_tokens", func(r *row[*Turn]) int64 { return r.r.InlineTokens }),
	dictionary(strCol("finish", func(r *row[*Turn]) string { return r.r.Finish })),
	i64Col("latency_ms", func(r *row[*Turn]) int64 { return r.r.LatencyMS }),
	optStrCol("text", func(r *row[*Turn]) string { return r.run.TextOf(r.r) }),
	i64Col("text_cut", func(r *row[*Turn]) int64 { return r.r.TextCut }),
}

var toolCallColumns = []column[*ToolCall]{
	dictionary(strCol("run", func(r *row[*ToolCall]) string { return r.run.Run })),
	u64Col("fact_seq", func(r *row[*ToolCall]) uint64 { return r.r.Seq }),
	dictionary(strCol("attempt", func(r *row[*ToolCall]) string { return r.r.Attempt })),
	dictionary(i64Col("turn", func(r *row[*ToolCall]) int64 { return int64(r.r.Turn) })),
	i64Col("call", func(r *row[*ToolCall]) int64 { return int64(r.r.Call) }),
	dictionary(strCol("tool", func(r *row[*ToolCall]) string { return r.r.Tool })),
	dictionary(i64Col("exit_code", func(r *row[*ToolCall]) int64 { return int64(r.r.ExitCode) })),
	i64Col("duration_ms", func(r *row[*ToolCall]) int64 { return r.r.DurationMS }),
	i64Col("output_bytes", func(r *row[*ToolCall]) int64 { return r.r.OutputBytes }),
	boolCol("to_file", func(r *row[*ToolCall]) bool { return r.r.ToFile }),
	boolCol("background", func(r *row[*ToolCall]) bool { return r.r.Background }),
	boolCol("timed_out", func(r *row[*ToolCall]) bool { return r.r.TimedOut }),
	optStrCol("input", func(r *row[*ToolCall]) string { return r.run.InputOf(r.r) }),
	i64Col("input_cut", func(r *row[*ToolCall]) int64 { return r.r.InputCut }),
	optStrCol("output", func(r *row[*ToolCall]) string { return r.run.OutputOf(r.r) }),
	i64Col("output_cut", func(r *row[*ToolCall]) int64 { return r.r.OutputCut }),
}

var batchColumns = []column[*Batch]{
	dictionary(strCol("run", func(r *row[*Batch]) string { return r.run.Run })),
	u64Col("seq", func(r *row[*Batch]) uint64 { return r.r.Manifest.Seq }),
	u64Col("trainer_version", func(r *row[*Batch]) uint64 { return r.r.Manifest.TrainerVersion }),
	dictionary(i64Col("rule_version", func(r *row[*Batch]) int64 { return int64(r.r.Manifest.RuleVersion) })),
	u64Col("fact_seq", func(r *row[*Batch]) uint64 { return r.r.Fact.Seq }),
	i64Col("watermark_partition", func(r *row[*Batch]) int64 { return int64(r.r.Manifest.Watermark.Partition) }),
	i64Col("watermark_offset", func(r *row[*Batch]) int64 { return r.r.Manifest.Watermark.Offset }),
	u64Col("tree_size", func(r *row[*Batch]) uint64 { return r.r.Manifest.Tree.Size }),
	strCol("tree_root", func(r *row[*Batch]) string { return r.r.Manifest.Tree.Root }),
	strCol("digest", func(r *row[*Batch]) string { return r.r.Manifest.Digest }),
	i64Col("groups", func(r *row[*Batch]) int64 { return int64(r.r.Manifest.Stats.Groups) }),
	i64Col("dropped_groups", func(r *row[*Batch]) int64 { return int64(len(r.r.Manifest.Dropped)) }),
	i64Col("attempts", func(r *row[*Batch]) int64 { return int64(r.r.Manifest.Stats.Attempts) }),
	i64Col("turns", func(r *row[*Batch]) int64 { return int64(r.r.Manifest.Stats.Turns) }),
	i64Col("trained_turns", func(r *row[*Batch]) int64 { return int64(r.r.Manifest.Stats.TrainedTurns) }),
	i64Col("trained_tokens", func(r *row[*Batch]) int64 { return r.r.Manifest.Stats.TrainedTokens }),
	i64Col("masked_tokens", func(r *row[*Batch]) int64 { return r.r.Manifest.Stats.MaskedTokens }),
	histogramCol("segment_staleness_histogram", func(r *row[*Batch]) map[string]int { return r.r.Manifest.Stats.StalenessHistogram }),
	histogramCol("in_flight", func(r *row[*Batch]) map[string]int { return r.r.Manifest.Stats.InFlight }),
	histogramCol("in_queue", func(r *row[*Batch]) map[string]int { return r.r.Manifest.Stats.InQueue }),
	optI64Col("gradient_step", func(r *row[*Batch]) (int64, bool) {
		return stepOf(r.r, func(s *events.GradientApplied) int64 { return s.Step })
	}),
	optF64Col("loss", func(r *row[*Batch]) (float64, bool) {
		return stepOf(r.r, func(s *events.GradientApplied) float64 { return s.Loss })
	}),
	optI64Col("reported_trained_tokens", func(r *row[*Batch]) (int64, bool) {
		return stepOf(r.r, func(s *events.GradientApplied) int64 { return s.TrainedTokens })
	}),
	optF64Col("truncated_fraction", func(r *row[*Batch]) (float64, bool) {
		return stepOf(r.r, func(s *events.GradientApplied) float64 { return s.TruncatedFraction })
	}),
	optF64Col("grad_norm", func(r *row[*Batch]) (float64, bool) {
		return stepOf(r.r, func(s *events.GradientApplied) float64 { return s.GradNorm })
	}),
	optBoolCol("digest_matches", func(r *row[*Batch]) (bool, bool) {
		return r.r.Step != nil && r.r.Step.BatchDigest == r.r.Manifest.Digest, r.r.Step != nil
	}),
}

// sampleRow is one sample of a batch, read in place from its canonical form.
type sampleRow struct {
	batch uint64
	index int64
	v     *projections.SampleView
}

func samplesOf(runs []*Run) iter.Seq2[*row[*sampleRow], error] {
	return func(yield func(*row[*sampleRow], error) bool) {
		var buf []byte
		for _, run := range runs {
			for _, b := range run.Batches {
				// One window of a batch's samples in memory at a time:
				// each row read from buf is copied into the table's
				// builders before the next window overwrites it.
				var i int64
				stopped := false
				var err error
				buf, err = run.EachSample(b, buf, func(v *projections.SampleView) bool {
					stopped = !yield(&row[*sampleRow]{run: run, r: &sampleRow{batch: b.Manifest.Seq, index: i, v: v}}, nil)
					i++
					return !stopped
				})
				if err != nil {
					yield(nil, err)
				}
				if err != nil || stopped {
					return
				}
			}
		}
	}
}

var sampleColumns = []column[*sampleRow]{
	dictionary(strCol("run", func(r *row[*sampleRow]) string { return r.run.Run })),
	dictionary(u64Col("batch_seq", func(r *row[*sampleRow]) uint64 { return r.r.batch })),
	i64Col("sample", func(r *row[*sampleRow]) int64 { return r.r.index }),
	dictionary(strCol("group", func(r *row[*sampleRow]) string { return string(r.r.v.Group) })),
	dictionary(strCol("attempt", func(r *row[*sampleRow]) string { return string(r.r.v.Attempt) })),
	{field: arrow.Field{Name: "segment", Type: arrow.PrimitiveTypes.Int32}, add: func(b array.Builder, r *row[*sampleRow]) {
		b.(*array.Int32Builder).Append(int32(r.r.v.Segment))
	}},
	f64Col("advantage", func(r *row[*sampleRow]) float64 { return r.r.v.Advantage }),
	i64Col("tokens", func(r *row[*sampleRow]) int64 { return int64(r.r.v.Len) }),
	{field: arrow.Field{Name: "token_ids", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)}, add: func(b array.Builder, r *row[*sampleRow]) {
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		vb := lb.ValueBuilder().(*array.Int32Builder)
		ids := r.r.v.TokenIDs
		vb.Reserve(r.r.v.Len)
		for i := 0; i < len(ids); i += 4 {
			vb.UnsafeAppend(int32(binary.LittleEndian.Uint32(ids[i:])))
		}
	}},
	{field: arrow.Field{Name: "loss_mask", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Uint8)}, add: func(b array.Builder, r *row[*sampleRow]) {
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Uint8Builder).AppendValues(r.r.v.LossMask, nil)
	}},
	{field: arrow.Field{Name: "rollout_logprobs", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float32)}, add: func(b array.Builder, r *row[*sampleRow]) {
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		vb := lb.ValueBuilder().(*array.Float32Builder)
		lps := r.r.v.Logprobs
		vb.Reserve(r.r.v.Len)
		for i := 0; i < len(lps); i += 4 {
			vb.UnsafeAppend(math.Float32frombits(binary.LittleEndian.Uint32(lps[i:])))
		}
	}},
	{field: arrow.Field{Name: "policy_versions", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int64)}, add: func(b array.Builder, r *row[*sampleRow]) {
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		vb := lb.ValueBuilder().(*array.Int64Builder)
		vs := r.r.v.PolicyVersions
		vb.Reserve(r.r.v.Len)
		for i := 0; i < len(vs); i += 8 {
			vb.UnsafeAppend(int64(binary.LittleEndian.Uint64(vs[i:])))
		}
	}},
	{field: arrow.Field{Name: "temperatures", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float32)}, add: func(b array.Builder, r *row[*sampleRow]) {
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		vb := lb.ValueBuilder().(*array.Float32Builder)
		vb.Reserve(r.r.v.Len)
		for i := range r.r.v.Len {
			vb.UnsafeAppend(r.r.v.Temperature(i))
		}
	}},
}

// stepOf reads a value of the gradient step that consumed b; ok is false
// when no step reported it.
func stepOf[T any](b *Batch, get func(*events.GradientApplied) T) (T, bool) {
	if b.Step == nil {
		var zero T
		return zero, false
	}
	return get(b.Step), true
}

func first(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// histogramType is a histogram's Arrow type: a list of {value, count}
// by ascending value. Hugging Face datasets has no map type; a list of
// structs loads as itself everywhere.
var histogramType = arrow.ListOfNonNullable(arrow.StructOf(
	arrow.Field{Name: "value", Type: arrow.PrimitiveTypes.Int64},
	arrow.Field{Name: "count", Type: arrow.PrimitiveTypes.Int64},
))

// histogramCol is a column of a manifest's histogram, whose keys are
// integers written in decimal (projections.BatchStats).
func histogramCol[R any](name string, get func(*row[R]) map[string]int) column[R] {
	return column[R]{field: field(name, histogramType, false), add: func(b array.Builder, r *row[R]) {
		type bin struct{ value, count int64 }
		var bins []bin
		for k, n := range get(r) {
			v, err := strconv.ParseInt(k, 10, 64)
			if err != nil {
				continue // not written by the rules; no value to place it at
			}
			bins = append(bins, bin{v, int64(n)})
		}
		slices.SortFunc(bins, func(x, y bin) int { return cmp.Compare(x.value, y.value) })
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		sb := lb.ValueBuilder().(*array.StructBuilder)
		vb, cb := sb.FieldBuilder(0).(*array.Int64Builder), sb.FieldBuilder(1).(*array.Int64Builder)
		for _, x := range bins {
			sb.Append(true)
			vb.Append(x.value)
			cb.Append(x.count)
		}
	}}
}

func field(name string, t arrow.DataType, nullable bool) arrow.Field {
	return arrow.Field{Name: name, Type: t, Nullable: nullable}
}

// scalar is a column of one value of type T a row, appended by the
// builder B; get's false appends a null (nullable columns only).
func scalar[R, T any, B interface{ Append(T) }](name string, t arrow.DataType, nullable bool, get func(*row[R]) (T, bool)) column[R] {
	return column[R]{field: field(name, t, nullable), add: func(b array.Builder, r *row[R]) {
		if v, ok := get(r); ok {
			b.(B).Append(v)
		} else {
			b.AppendNull()
		}
	}}
}

// always is get for a column that is never null.
func always[R, T any](get func(*row[R]) T) func(*row[R]) (T, bool) {
	return func(r *row[R]) (T, bool) { return get(r), true }
}

func strCol[R any](name string, get func(*row[R]) string) column[R] {
	return scalar[R, string, *array.StringBuilder](name, arrow.BinaryTypes.String, false, always(get))
}

// optStrCol is null for the empty string: text the fact did not carry.
func optStrCol[R any](name string, get func(*row[R]) string) column[R] {
	return scalar[R, string, *array.StringBuilder](name, arrow.BinaryTypes.String, true, func(r *row[R]) (string, bool) {
		s := get(r)
		return s, s != ""
	})
}

func i64Col[R any](name string, get func(*row[R]) int64) column[R] {
	return scalar[R, int64, *array.Int64Builder](name, arrow.PrimitiveTypes.Int64, false, always(get))
}

func u64Col[R any](name string, get func(*row[R]) uint64) column[R] {
	return i64Col(name, func(r *row[R]) int64 { return int64(get(r)) })
}

func optI64Col[R any](name string, get func(*row[R]) (int64, bool)) column[R] {
	return scalar[R, int64, *array.Int64Builder](name, arrow.PrimitiveTypes.Int64, true, get)
}

func f64Col[R any](name string, get func(*row[R]) float64) column[R] {
	return scalar[R, float64, *array.Float64Builder](name, arrow.PrimitiveTypes.Float64, false, always(get))
}

func optF64Col[R any](name string, get func(*row[R]) (float64, bool)) column[R] {
	return scalar[R, float64, *array.Float64Builder](name, arrow.PrimitiveTypes.Float64, true, get)
}

func boolCol[R any](name string, get func(*row[R]) bool) column[R] {
	return scalar[R, bool, *array.BooleanBuilder](name, arrow.FixedWidthTypes.Boolean, false, always(get))
}

func optBoolCol[R any](name string, get func(*row[R]) (bool, bool)) column[R] {
	return scalar[R, bool, *array.BooleanBuilder](name, arrow.FixedWidthTypes.Boolean, true, get)
}

func listI64Col[R any](name string, get func(*row[R]) []int64) column[R] {
	return optListI64Col(name, func(r *row[R]) ([]int64, bool) { return get(r), true })
}

func optListI64Col[R any](name string, get func(*row[R]) ([]int64, bool)) column[R] {
	return column[R]{field: field(name, arrow.ListOf(arrow.PrimitiveTypes.Int64), true), add: func(b array.Builder, r *row[R]) {
		v, ok := get(r)
		if !ok {
			b.AppendNull()
			return
		}
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Int64Builder).AppendValues(v, nil)
	}}
}

func optListBoolCol[R any](name string, get func(*row[R]) ([]bool, bool)) column[R] {
	return column[R]{field: field(name, arrow.ListOf(arrow.FixedWidthTypes.Boolean), true), add: func(b array.Builder, r *row[R]) {
		v, ok := get(r)
		if !ok {
			b.AppendNull()
			return
		}
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.BooleanBuilder).AppendValues(v, nil)
	}}
}
