package pgsink_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/migrations"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
)

// An analyst's login role granted rolloutledger_reader reads every table
// and view, and can change nothing.
func TestReaderRoleOnlyReads(t *testing.T) {
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	if _, err := pgsink.Migrate(context.Background(), url, schema, nil); err != nil {
		t.Fatal(err)
	}
	admin := connect(t, url)
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	role, password := "rl_analyst_"+hex.EncodeToString(b[:]), "pw-"+hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, password)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = admin.Exec(context.Background(), "DROP ROLE "+role)
	})
	if _, err := admin.Exec(ctx, "GRANT rolloutledger_reader TO "+role); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = role, password
	analyst, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer analyst.Close(ctx)

	// Every table and view can be read.
	rows, err := admin.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 30 {
		t.Fatalf("only %d tables and views in %s: %v", len(names), schema, names)
	}
	for _, n := range names {
		if _, err := analyst.Exec(ctx, "SELECT * FROM "+pgx.Identifier{schema, n}.Sanitize()+" LIMIT 1"); err != nil {
			t.Errorf("the reader cannot read %s: %v", n, err)
		}
	}
	q := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	for _, stmt := range []string{
		"INSERT INTO " + q("prices") + " (run, prompt_per_mtok, cached_per_mtok, completion_per_mtok) VALUES ('r', 1, 1, 1)",
		"UPDATE " + q("prices") + " SET prompt_per_mtok = 0",
		"DELETE FROM " + q("prices"),
		"DELETE FROM " + q("consumed_offsets"),
		"TRUNCATE " + q("turns"),
		"INSERT INTO " + q("runs") + " SELECT * FROM " + q("runs"),
		"CREATE TABLE " + q("mine") + " (x int)",
		"CREATE VIEW " + q("mine") + " AS SELECT 1",
		"CREATE TABLE public.mine (x int)",
		"CREATE SCHEMA mine",
		"DROP TABLE " + q("turns"),
		"ALTER TABLE " + q("turns") + " ADD COLUMN x int",
	} {
		_, err := analyst.Exec(ctx, stmt)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("%s: got %v, want permission denied (42501)", stmt, err)
		}
	}
	// A table a later migration adds is readable too (default privileges).
	if _, err := admin.Exec(ctx, "CREATE TABLE "+q("later")+" (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := analyst.Exec(ctx, "SELECT * FROM "+q("later")); err != nil {
		t.Errorf("a table created later is not readable: %v", err)
	}
}

// Migrating twice changes nothing; the schema names no schema of its own.
func TestMigrateIsIdempotent(t *testing.T) {
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	first, err := pgsink.Migrate(context.Background(), url, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := pgsink.Migrate(context.Background(), url, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Applied) == 0 || len(again.Applied) != 0 || again.Version != first.Version {
		t.Errorf("first %+v, again %+v: want everything applied once", first, again)
	}
	if _, err := pgsink.Migrate(context.Background(), url, "Robert'); DROP", nil); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Errorf("a hostile schema name: got %v, want refused", err)
	}
}

// A rebuild swaps a fresh schema in under a running sink: analysts' prices
// survive, the old schema goes, and the running sink notices the new
// offsets and goes on writing the new schema.
func TestRebuildSwapsUnderARunningSink(t *testing.T) {
	kc, _ := testenv.EmbeddedKafka(t, "")
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	s := startLedger(t, kc, url, schema)
	o := small("before-rebuild", 5)
	o.URL, o.Tasks, o.Steps, o.Trainer = s.URL(), 12, 1, false
	if _, err := simulate.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	waitProjected(t, s, kc)
	waitStored(t, url, schema, kc)
	conn := connect(t, url)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "prices"}.Sanitize()+
		" VALUES ('before-rebuild', 1, 0.1, 4, 'negotiated')"); err != nil {
		t.Fatal(err)
	}
	var progress []int64
	res, err := pgsink.Rebuild(ctx, pgsink.RebuildOptions{Kafka: kc, DatabaseURL: url, Schema: schema,
		Progress: func(done, total int64) { progress = append(progress, done, total) }})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Swapped || res.Old != "" || len(progress) < 4 || progress[len(progress)-2] != progress[len(progress)-1] {
		t.Errorf("rebuild: %+v, progress %v", res, progress)
	}
	var schemas int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1", schema+"%").Scan(&schemas); err != nil || schemas != 1 {
		t.Errorf("%d schemas named %s* after the rebuild (%v), want 1", schemas, schema, err)
	}
	var note string
	if err := conn.QueryRow(ctx, "SELECT note FROM "+pgx.Identifier{schema, "prices"}.Sanitize()+" WHERE run = 'before-rebuild'").Scan(&note); err != nil || note != "negotiated" {
		t.Errorf("the run's prices after the rebuild: %q, %v", note, err)
	}

	// Move the offsets under the running sink, as a second writer would:
	// its next transaction is abandoned, and it resumes from where the
	// offsets now say — the start — storing nothing twice.
	if _, err := conn.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "consumed_offsets"}.Sanitize()+" SET next_offset = 0"); err != nil {
		t.Fatal(err)
	}
	o.Run, o.Seed = "after-rebuild", 6
	if _, err := simulate.Run(ctx, o); err != nil {
		t.Fatal(err)
	}
	waitProjected(t, s, kc)
	waitStored(t, url, schema, kc)
	checkCounts(t, conn, schema, readLog(t, kc))
	if s.Sink().Stats().Failures == 0 {
		t.Errorf("the running sink never noticed its offsets moved")
	}
}

// A schema that meets another log under the same topic names — the
// development broker re-created — reads that log from its start instead of
// skipping what lies below the stored offsets.
func TestAnotherLogUnderTheSameTopics(t *testing.T) {
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	prefix := testenv.UniquePrefix(t)
	var total int64
	for i, seed := range []uint64{8, 9} {
		kc, _ := testenv.EmbeddedKafka(t, "")
		kc.TopicPrefix = prefix
		s, stop := startLedgerStop(t, kc, url, schema)
		o := small(fmt.Sprintf("log-%d", i), seed)
		o.URL, o.Tasks, o.Steps, o.Trainer = s.URL(), 12, 1, false
		res, err := simulate.Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		total += int64(res.Events)
		waitProjected(t, s, kc)
		// The second log's offsets may look caught up by the first log's
		// stored ones: ask the sink that reads it.
		ends, err := pgsink.EndOffsets(context.Background(), kc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = s.Sink().WaitStored(ctx, ends)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		stop()
	}
	conn := connect(t, url)
	var facts int64
	for _, table := range factTables {
		facts += count(t, conn, schema, table)
	}
	if facts != total {
		t.Errorf("%d facts stored from two logs of %d facts in all", facts, total)
	}
}

// The catalogue v2 migration gives the turns stored before it their one
// segment, at their policy version, and no text.
// migratedTo makes a fresh schema migrated up to version, and a
// connection whose search path is that schema.
func migratedTo(t *testing.T, url string, version int64) (string, *sql.DB) {
	t.Helper()
	schema := testenv.Schema(t, url)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(schema+".goose_db_version"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(context.Background(), version); err != nil {
		t.Fatal(err)
	}
	return schema, db
}

func TestCatalogueV2MigrationBackfills(t *testing.T) {
	url := testenv.Postgres(t)
	ctx := context.Background()
	schema, db := migratedTo(t, url, 3)
	for i, v := range []int64{0, 7} {
		if _, err := db.ExecContext(ctx, `INSERT INTO turns (event_id, run, producer, at, log_partition, log_offset, attempt, turn,
			policy_version, prompt_tokens, completion_tokens, cached_tokens, observation_tokens, inline_tokens, finish, latency_ms)
			VALUES (gen_random_uuid(), 'r', 'e', now(), 0, $1, 'a', $1, $2, 1, 1, 0, 0, 0, 'stop', 1)`, i, v); err != nil {
			t.Fatal(err)
		}
	}
	res, err := pgsink.Migrate(ctx, url, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Applied, 4) {
		t.Fatalf("applied %v, want 4 among them", res.Applied)
	}
	conn := connect(t, url)
	rows, err := conn.Query(ctx, "SELECT policy_version, segment_starts, segment_versions, text IS NULL, text_cut FROM "+
		pgx.Identifier{schema, "turns"}.Sanitize()+" ORDER BY log_offset")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var v, cut int64
		var starts, versions []int64
		var noText bool
		if err := rows.Scan(&v, &starts, &versions, &noText, &cut); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(starts, []int64{0}) || !slices.Equal(versions, []int64{v}) || !noText || cut != 0 {
			t.Errorf("turn at version %d: got segments %v %v, no text %v, cut %d", v, starts, versions, noText, cut)
		}
		n++
	}
	if rows.Err() != nil || n != 2 {
		t.Fatalf("%d turns read: %v", n, rows.Err())
	}
}

// Migration 00006's attempt_summary holds, for each attempt, its first
// attempt.started and first reward.computed in log order, whether any
// attempt.failed names it, and its compactions summed; 00008 adds the
// purpose of the first group.started of its group in log order and its
// turns and tokens summed: from the rows stored before the migrations (the
// backfills), and then from rows inserted in any order, several to a
// statement or one at a time (the triggers).
func TestAttemptSummaryFirstInLogOrder(t *testing.T) {
	url := testenv.Postgres(t)
	ctx := context.Background()
	schema, db := migratedTo(t, url, 5)
	f := summaryFacts{t, db}

	// Before the migration: a1 started twice (offset 3 is first), rewarded
	// twice (offset 8 is first), compacted twice, with two turns and its
	// group stored; a2 only failed.
	f.started("a1 10 g-late", "a1 3 g-first")
	f.rewarded("a1 12 false", "a1 8 true")
	f.compacted("a1", 5, 100, 40)
	f.compacted("a1", 6, 90, 30)
	f.failed("a2", 7)
	f.grouped("g-first 1 train", "g-late 2 eval")
	f.turned("a1", 4, 100, 10, 7)
	f.turned("a1", 9, 200, 150, 9)
	if _, err := pgsink.Migrate(ctx, url, schema, nil); err != nil {
		t.Fatal(err)
	}
	// After it: a3's starts arrive late first, then earlier, then later
	// still; a4's two starts and two rewards each come in one statement.
	// Groups: g-15 is stored before a3's start, as eval, then a
	// group.started of lower offset as train; g-45 only after a4's
	// starts; g-30 (not a3's first) as probe. a3's turns come before any
	// of its starts, a5's with no start at all.
	f.grouped("g-15 14 eval")
	f.turned("a3", 12, 50, 0, 5)
	f.started("a3 20 g-20")
	f.started("a3 15 g-15")
	f.grouped("g-15 11 train", "g-30 29 probe")
	f.started("a3 30 g-30")
	f.rewarded("a3 40 false")
	f.rewarded("a3 33 true")
	f.started("a4 50 g-50", "a4 45 g-45")
	f.grouped("g-45 44 probe", "g-50 49 eval")
	f.rewarded("a4 60 true", "a4 55 false")
	f.failed("a4", 61)
	f.failed("a4", 62)
	f.compacted("a4", 52, 10, 4)
	f.failed("a1", 70)
	f.compacted("a1", 71, 50, 10)
	f.turned("a1", 72, 30, 0, 3)
	f.turned("a3", 41, 60, 20, 6)
	f.turned("a5", 80, 1, 1, 1)

	// attempt, started, group, task, rewarded, passed, infra failed,
	// compactions, tokens before and after, purpose, turns, prompt,
	// cached and completion tokens.
	want := []string{
		"a1 3 g-first task-g-first 8 true true 3 240 80 train 3 330 160 19",
		"a2 - - - - - true 0 0 0 - 0 0 0 0",
		"a3 15 g-15 task-g-15 33 true false 0 0 0 train 2 110 20 11",
		"a4 45 g-45 task-g-45 55 false true 1 10 4 probe 0 0 0 0",
		"a5 - - - - - false 0 0 0 - 1 1 1 1",
	}
	rows, err := db.QueryContext(ctx, `SELECT attempt, coalesce(started_offset::text, '-'), coalesce(group_id, '-'), coalesce(task, '-'),
		coalesce(rewarded_offset::text, '-'), coalesce(passed::text, '-'), infra_failed, compactions,
		compacted_tokens_before, compacted_tokens_after, coalesce(purpose, '-'), turns, prompt_tokens, cached_tokens,
		completion_tokens FROM attempt_summary WHERE run = 'r' ORDER BY attempt`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var c [15]string
		ptrs := make([]any, len(c))
		for i := range c {
			ptrs[i] = &c[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join(c[:], " "))
	}
	if !slices.Equal(got, want) {
		t.Errorf("attempt_summary:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Migration 00008 moves the costs' inputs onto attempt_summary; undone and
// done again, attempt_costs and run_costs answer the same rows each time.
func TestCostsMigrationRoundTrip(t *testing.T) {
	url := testenv.Postgres(t)
	ctx := context.Background()
	schema, db := migratedTo(t, url, 8)
	f := summaryFacts{t, db}
	f.grouped("g1 1 train", "g2 2 probe")
	f.started("a1 3 g1", "a2 4 g1", "a3 5 g2")
	f.turned("a1", 6, 1000, 200, 50)
	f.turned("a1", 7, 1500, 900, 70)
	f.turned("a3", 8, 800, 0, 40)
	f.rewarded("a1 9 true", "a3 10 false")
	costs := func() string {
		t.Helper()
		var out []string
		for _, q := range []string{
			`SELECT attempt || ' ' || coalesce(purpose, '-') || ' ' || turns || ' ' || prompt_tokens || ' ' || cached_tokens || ' ' ||
				completion_tokens || ' ' || round(cost_usd::numeric, 9) || ' ' || coalesce(passed::text, '-') FROM attempt_costs ORDER BY attempt`,
			`SELECT purpose || ' ' || attempts || ' ' || solves || ' ' || solved_tasks || ' ' || round(cost_usd::numeric, 9) FROM run_costs ORDER BY purpose`,
		} {
			rows, err := db.QueryContext(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				out = append(out, s)
			}
			rows.Close()
		}
		return strings.Join(out, "\n")
	}
	want := costs()
	if !strings.Contains(want, "a1 train 2 2500 1100 120") || !strings.Contains(want, "a2 train 0 0 0 0") {
		t.Fatalf("attempt_costs before the round trip:\n%s", want)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(schema+".goose_db_version"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if got := costs(); got != want {
		t.Errorf("after 00008 was undone:\n%s\nwant:\n%s", got, want)
	}
	if _, err := p.UpTo(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if got := costs(); got != want {
		t.Errorf("after 00008 was done again:\n%s\nwant:\n%s", got, want)
	}
}

// summaryFacts inserts the rows of run "r" that attempt_summary is kept
// from, as the sink stores them, several to a statement where a method
// takes several.
type summaryFacts struct {
	t  *testing.T
	db *sql.DB
}

func (f summaryFacts) exec(q string, args ...any) {
	f.t.Helper()
	if _, err := f.db.ExecContext(context.Background(), q, args...); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
}

// insert runs one INSERT of head (the statement up to VALUES) with a row
// of values for each of rows, as row writes it.
func (f summaryFacts) insert(head string, rows []string, row func(string) string) {
	f.t.Helper()
	vals := make([]string, len(rows))
	for i, r := range rows {
		vals[i] = row(r)
	}
	f.exec(head + " VALUES " + strings.Join(vals, ", "))
}

// started inserts attempt.started rows, each "attempt offset group"; the
// task is "task-" and the group.
func (f summaryFacts) started(rows ...string) {
	f.t.Helper()
	f.insert(`INSERT INTO attempts (event_id, run, producer, at, log_partition, log_offset, attempt, group_id, task, engine, vm, fork_ms, retry_of)`, rows, func(r string) string {
		var a, g string
		var off int
		fmt.Sscan(r, &a, &off, &g)
		return fmt.Sprintf("(gen_random_uuid(), 'r', 'e', now(), 0, %d, '%s', '%s', 'task-%s', 'eng', 'vm', %d, NULL)", off, a, g, g, off)
	})
}

// rewarded inserts reward.computed rows, each "attempt offset passed".
func (f summaryFacts) rewarded(rows ...string) {
	f.t.Helper()
	f.insert(`INSERT INTO rewards (event_id, run, producer, at, log_partition, log_offset, attempt, passed, tests_passed, tests_total, verifier)`, rows, func(r string) string {
		var a string
		var off int
		var passed bool
		fmt.Sscan(r, &a, &off, &passed)
		return fmt.Sprintf("(gen_random_uuid(), 'r', 'v', now(), 0, %d, '%s', %t, 1, 2, 'tests')", off, a, passed)
	})
}

func (f summaryFacts) failed(a string, off int) {
	f.t.Helper()
	f.exec(`INSERT INTO attempt_failures (event_id, run, producer, at, log_partition, log_offset, attempt, reason)
		VALUES (gen_random_uuid(), 'r', 'e', now(), 0, $1, $2, 'vm_lost')`, off, a)
}

func (f summaryFacts) compacted(a string, off, before, after int) {
	f.t.Helper()
	f.exec(`INSERT INTO compactions (event_id, run, producer, at, log_partition, log_offset, attempt, turn, tokens_before, tokens_after)
		VALUES (gen_random_uuid(), 'r', 'e', now(), 0, $1, $2, 1, $3, $4)`, off, a, before, after)
}

// grouped inserts group.started rows, each "group offset purpose".
func (f summaryFacts) grouped(rows ...string) {
	f.t.Helper()
	f.insert(`INSERT INTO groups (event_id, run, producer, at, log_partition, log_offset, group_id, task, size, purpose)`, rows, func(r string) string {
		var g, purpose string
		var off int
		fmt.Sscan(r, &g, &off, &purpose)
		return fmt.Sprintf("(gen_random_uuid(), 'r', 'e', now(), 0, %d, '%s', 'task-%s', 4, '%s')", off, g, g, purpose)
	})
}

func (f summaryFacts) turned(a string, off, prompt, cached, completion int) {
	f.t.Helper()
	f.exec(`INSERT INTO turns (event_id, run, producer, at, log_partition, log_offset, attempt, turn, policy_version,
			prompt_tokens, completion_tokens, cached_tokens, observation_tokens, inline_tokens, finish, latency_ms,
			segment_starts, segment_versions)
		VALUES (gen_random_uuid(), 'r', 'e', now(), 0, $1, $2, 1, 0, $3, $4, $5, 0, 0, 'stop', 1, '{0}', '{0}')`,
		off, a, prompt, completion, cached)
}
