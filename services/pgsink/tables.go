package pgsink

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// tableID names one table the sink writes; the order of the constants is
// the order rows are inserted in a transaction, parents before children.
type tableID int

const (
	tRuns tableID = iota
	tTasks
	tTaskGates
	tGroups
	tGroupClosures
	tAttempts
	tAttemptOutcomes
	tAttemptFailures
	tTurns
	tToolCalls
	tCompactions
	tRewards
	tPolicyVersions
	tGradientSteps
	tGradientGaps
	tVocabularyChunks
	tAdmissions
	tBatches
	tBatchGroups
	tBatchAttempts
	tBatchTurns
	tBatchDrops
	tAuditFindings
	tAuditCheckpoints
	tSkipped
	numTables
)

// factCols are the leading columns of every fact table.
var factCols = []string{"event_id", "run", "producer", "at", "log_partition", "log_offset"}

// decisionCols are the trailing columns of every decision table.
var decisionCols = []string{"rule_version", "fact_seq", "fact_partition", "fact_offset", "log_partition", "log_offset"}

// table describes how rows reach one table: COPY into a temporary staging
// table of the same shape, then INSERT ... SELECT ... ON CONFLICT DO NOTHING
// into the real one, so rows whose key is already stored (a fact delivered
// twice, a decision re-emitted) are dropped instead of failing the copy.
type table struct {
	name string
	cols []string
	// order, for a table of records, sorts the staged rows into log order
	// so that of two records with one key the first wins, as in the
	// projections.
	order string
	// parent, for a table whose rows belong to another table's row from
	// the same record (a task's gates, a batch's members), names that
	// table and join its key: a child row is inserted only when its parent
	// row was stored from the same record, so a conflicting duplicate
	// (same id, other content) cannot graft its children onto the first.
	// The staging table then carries the record's log position.
	parent string
	join   string
}

var tables = [numTables]table{
	tRuns: {name: "runs", order: "log_partition, log_offset", cols: cols(factCols,
		"model", "harness", "notes", "group_size", "batch_groups", "min_group", "max_staleness",
		"pass_band_low", "pass_band_high", "min_probes", "enforce_admission", "partial_credit_cap",
		"efficiency_weight", "advantage", "config")},
	tTasks:     {name: "tasks", order: "log_partition, log_offset", cols: cols(factCols, "task", "source", "kind", "tier", "prompt", "prompt_cut")},
	tTaskGates: {name: "task_gates", cols: []string{"event_id", "ordinal", "name", "passed"}, parent: "tasks", join: "p.event_id = c.event_id"},
	tGroups:    {name: "groups", order: "log_partition, log_offset", cols: cols(factCols, "group_id", "task", "size", "purpose")},
	tGroupClosures: {name: "group_closures", order: "log_partition, log_offset",
		cols: cols(factCols, "group_id", "reason")},
	tAttempts: {name: "attempts", order: "log_partition, log_offset",
		cols: cols(factCols, "attempt", "group_id", "task", "engine", "vm", "fork_ms", "retry_of")},
	tAttemptOutcomes: {name: "attempt_outcomes", order: "log_partition, log_offset", cols: cols(factCols, "attempt", "outcome")},
	tAttemptFailures: {name: "attempt_failures", order: "log_partition, log_offset", cols: cols(factCols, "attempt", "reason")},
	tTurns: {name: "turns", order: "log_partition, log_offset", cols: cols(cols(factCols,
		"attempt", "turn", "policy_version", "prompt_tokens", "completion_tokens", "cached_tokens",
		"observation_tokens", "inline_tokens", "finish", "latency_ms", "segment_starts", "segment_versions", "text", "text_cut"),
		turnV3Cols...)},
	tToolCalls: {name: "tool_calls", order: "log_partition, log_offset", cols: cols(cols(factCols,
		"attempt", "turn", "call", "tool", "exit_code", "duration_ms", "output_bytes", "to_file", "background", "timed_out",
		"input", "input_cut", "output", "output_cut"), toolV3Cols...)},
	tCompactions: {name: "compactions", order: "log_partition, log_offset",
		cols: cols(factCols, "attempt", "turn", "tokens_before", "tokens_after")},
	tRewards: {name: "rewards", order: "log_partition, log_offset",
		cols: cols(factCols, "attempt", "passed", "tests_passed", "tests_total", "verifier")},
	tPolicyVersions: {name: "policy_versions", order: "log_partition, log_offset",
		cols: cols(factCols, "version", "checkpoint", "digest", "precision")},
	tGradientSteps: {name: "gradient_steps", order: "log_partition, log_offset", cols: cols(factCols,
		"step", "batch", "batch_digest", "from_version", "to_version", "loss", "trained_tokens", "truncated_fraction", "grad_norm")},
	tGradientGaps: {name: "gradient_logprob_gaps", cols: []string{"event_id", "staleness", "gap"},
		parent: "gradient_steps", join: "p.event_id = c.event_id"},
	tVocabularyChunks: {name: "vocabulary_chunks", order: "log_partition, log_offset", cols: cols(factCols, vocabularyCols...)},
	tAdmissions: {name: "admissions", order: "log_partition, log_offset", cols: cols([]string{
		"decision_id", "run", "decision", "task", "probes", "passes", "pass_rate"}, decisionCols...)},
	tBatches: {name: "batches", order: "log_partition, log_offset", cols: []string{
		"run", "seq", "decision_id", "trainer_version", "rule_version", "watermark_partition", "watermark_offset",
		"tree_size", "tree_root", "digest", "groups", "attempts", "turns", "trained_turns",
		"fact_seq", "fact_partition", "fact_offset", "log_partition", "log_offset"}},
	tBatchGroups: {name: "batch_groups", cols: []string{
		"run", "batch", "group_id", "ordinal", "task", "completed_partition", "completed_offset"},
		parent: "batches", join: "p.run = c.run AND p.seq = c.batch"},
	tBatchAttempts: {name: "batch_attempts", cols: []string{
		"run", "batch", "group_id", "attempt", "score", "bonus", "reward", "advantage", "completion_tokens",
		"turns", "trained_turns", "in_flight", "in_queue"},
		parent: "batches", join: "p.run = c.run AND p.seq = c.batch"},
	tBatchTurns: {name: "batch_turns", cols: []string{
		"run", "batch", "attempt", "turn", "policy_version", "staleness", "trained", "turn_partition", "turn_offset"},
		parent: "batches", join: "p.run = c.run AND p.seq = c.batch"},
	tBatchDrops: {name: "batch_drops", cols: []string{"run", "batch", "ordinal", "group_id", "task", "reason"},
		parent: "batches", join: "p.run = c.run AND p.seq = c.batch"},
	tAuditFindings: {name: "audit_findings", order: "log_partition, log_offset", cols: cols([]string{
		"decision_id", "run", "kind", "detail", "event_id", "fact_type", "task", "group_id", "attempt",
		"turns", "batch", "want", "got"}, decisionCols...)},
	tAuditCheckpoints: {name: "audit_checkpoints", order: "log_partition, log_offset", cols: cols([]string{
		"decision_id", "run", "tree_size", "tree_root", "decisions"}, decisionCols...)},
	tSkipped: {name: "skipped_records", cols: []string{"topic", "partition", "offset", "reason"}},
}

func cols(head []string, tail ...string) []string {
	return append(append([]string(nil), head...), tail...)
}

// stageName is the temporary table rows of t are copied into.
func (t *table) stageName() string { return "stage_" + t.name }

// stageCols are the columns copied into the staging table: the table's
// own, and for a child the position of the record it came from.
func (t *table) stageCols() []string {
	if t.parent == "" {
		return t.cols
	}
	return cols(t.cols, "log_partition", "log_offset")
}

// createStage is the DDL of t's staging table in the session's temporary
// schema. ON COMMIT DELETE ROWS leaves it empty after every transaction,
// committed or not.
func (t *table) createStage(schema string) string {
	extra := ""
	if t.parent != "" {
		extra = ", log_partition integer, log_offset bigint"
	}
	return fmt.Sprintf("CREATE TEMPORARY TABLE IF NOT EXISTS %s (LIKE %s%s) ON COMMIT DELETE ROWS",
		pgx.Identifier{t.stageName()}.Sanitize(), pgx.Identifier{schema, t.name}.Sanitize(), extra)
}

// insert is the statement that moves t's staged rows into the table.
func (t *table) insert(schema string) string {
	quoted := make([]string, len(t.cols))
	for i, c := range t.cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	list := strings.Join(quoted, ", ")
	target := pgx.Identifier{schema, t.name}.Sanitize()
	stage := "pg_temp." + pgx.Identifier{t.stageName()}.Sanitize()
	if t.parent == "" {
		order := ""
		if t.order != "" {
			order = " ORDER BY " + t.order
		}
		return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s%s ON CONFLICT DO NOTHING", target, list, list, stage, order)
	}
	sel := make([]string, len(quoted))
	for i, q := range quoted {
		sel[i] = "c." + q
	}
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s c JOIN %s p ON %s AND p.log_partition = c.log_partition AND p.log_offset = c.log_offset ON CONFLICT DO NOTHING",
		target, list, strings.Join(sel, ", "), stage, pgx.Identifier{schema, t.parent}.Sanitize(), t.join)
}

// TableNames lists the tables the sink writes, parents first, and then
// its own bookkeeping table.
func TableNames() []string {
	out := make([]string, 0, numTables+1)
	for i := range tables {
		out = append(out, tables[i].name)
	}
	return append(out, "consumed_offsets")
}
