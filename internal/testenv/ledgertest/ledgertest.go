// Package ledgertest holds the checks that the tests of several services
// share about what the ledger decided and stored: the offline reference
// fold of a log, the decisions on the decisions topic, their byte-for-byte
// comparison, and the comparison of two Postgres read models. Only tests
// import it.
package ledgertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
)

// readTimeout bounds one read of a topic: generous, for a read of a few
// thousand token-bearing facts takes over a minute on a loaded machine
// under the race detector.
const readTimeout = 5 * time.Minute

// Facts reads every fact of the facts topic, by run in log order, as the
// projector folds them. A record that does not decode fails the test.
func Facts(t testing.TB, kc kafkalog.Config) map[string][]projections.Record {
	t.Helper()
	byRun := map[string][]projections.Record{}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	err := kafkalog.ReadAll(ctx, kc, kc.FactsTopic(), func(m kafkalog.Message) error {
		ev, err := events.Decode(m.Value)
		if err != nil {
			return fmt.Errorf("%d/%d: %w", m.Partition, m.Offset, err)
		}
		byRun[ev.Run] = append(byRun[ev.Run], projections.Record{Value: m.Value, Event: ev, Partition: int32(m.Partition), Offset: m.Offset})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return byRun
}

// Reference folds every fact of the facts topic offline, run by run in log
// order: what any correct projector decides over this log, by decision id.
func Reference(t testing.TB, kc kafkalog.Config) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for run, recs := range Facts(t, kc) {
		ds, err := projections.FoldAll(run, recs)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			out[d.ID] = d.Value
		}
	}
	return out
}

// Decisions reads the decisions topic: each decision's bytes by id, and
// how many records the topic holds (re-emissions included). An id seen
// with two different values fails the test: re-emissions must be
// byte-identical.
func Decisions(t testing.TB, kc kafkalog.Config) (map[string][]byte, int) {
	t.Helper()
	out, records := map[string][]byte{}, 0
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	err := kafkalog.ReadAll(ctx, kc, kc.DecisionsTopic(), func(m kafkalog.Message) error {
		var env struct{ ID string }
		if err := json.Unmarshal(m.Value, &env); err != nil {
			return err
		}
		records++
		if prev, ok := out[env.ID]; ok && !bytes.Equal(prev, m.Value) {
			return fmt.Errorf("decision %s re-emitted with different bytes:\n first %s\n later %s", env.ID, prev, m.Value)
		}
		out[env.ID] = m.Value
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, records
}

// WaitDecisions waits until the decisions topic holds as many decisions as
// want, then requires it to hold exactly those, byte for byte. It returns
// what the topic holds.
func WaitDecisions(t testing.TB, kc kafkalog.Config, want map[string][]byte, d time.Duration) map[string][]byte {
	t.Helper()
	var got map[string][]byte
	testenv.CheckFor(t, d, "the projector decides everything the log implies", func() bool {
		got, _ = Decisions(t, kc)
		return len(got) >= len(want)
	})
	SameDecisions(t, got, want)
	return got
}

// SameDecisions fails the test unless got and want hold the same decision
// ids with the same bytes, naming the first few that differ.
func SameDecisions(t testing.TB, got, want map[string][]byte) {
	t.Helper()
	bad := 0
	report := func(format string, args ...any) {
		bad++
		if bad <= 5 {
			t.Errorf(format, args...)
		}
	}
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			report("decision %s missing: %.200s", id, w)
		} else if !bytes.Equal(g, w) {
			report("decision %s differs:\n got %.300s\nwant %.300s", id, g, w)
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			report("unexpected decision %s: %.200s", id, g)
		}
	}
	if bad > 0 {
		t.Errorf("%d decisions differ", bad)
	}
}

// positionalColumn matches the columns that place a row's record in the
// log or commit to the log's bytes: other in a log with duplicates.
var positionalColumn = regexp.MustCompile(`(^|_)(partition|offset)$|^fact_seq$|^tree_|^watermark_`)

// SameTables fails the test unless every table of the read model holds
// the same rows (as multisets) in schemas a and b: the tables the sink
// writes and those its triggers keep, all but the migrator's own. With
// meaningOnly, columns that say where records sit in the log, and the
// tables that only count records, are left out: a log holding duplicates
// is compared with a clean one by what its rows say.
func SameTables(t testing.TB, conn *pgx.Conn, a, b string, meaningOnly bool) {
	t.Helper()
	ctx := context.Background()
	count := func(q string) int64 {
		t.Helper()
		var n int64
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	tables := func(schema string) []string {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT table_name::text FROM information_schema.tables
			WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND table_name <> 'goose_db_version' ORDER BY 1`, schema)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	names := tables(a)
	if other := tables(b); fmt.Sprint(names) != fmt.Sprint(other) {
		t.Fatalf("schemas %s and %s hold different tables: %v and %v", a, b, names, other)
	}
	if len(names) == 0 {
		t.Fatalf("schema %s holds no tables", a)
	}
	for _, table := range names {
		cols := "*"
		switch {
		case meaningOnly && (table == "consumed_offsets" || table == "audit_checkpoints" || table == "skipped_records"):
			continue
		case table == "consumed_offsets":
			cols = "topic, partition, next_offset, first_offset, first_sha256"
		case meaningOnly:
			rows, err := conn.Query(ctx, "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position", a, table)
			if err != nil {
				t.Fatal(err)
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			cols = ""
			for _, n := range names {
				if positionalColumn.MatchString(n) || (table == "batches" && n == "digest") {
					continue
				}
				if cols != "" {
					cols += ", "
				}
				cols += pgx.Identifier{n}.Sanitize()
			}
		}
		q := func(x, y string) string {
			return fmt.Sprintf("SELECT count(*) FROM (SELECT %s FROM %s EXCEPT ALL SELECT %s FROM %s) d",
				cols, pgx.Identifier{x, table}.Sanitize(), cols, pgx.Identifier{y, table}.Sanitize())
		}
		onlyA, onlyB := count(q(a, b)), count(q(b, a))
		na := count("SELECT count(*) FROM " + pgx.Identifier{a, table}.Sanitize())
		nb := count("SELECT count(*) FROM " + pgx.Identifier{b, table}.Sanitize())
		if onlyA != 0 || onlyB != 0 || na != nb {
			t.Errorf("table %s: %d rows in %s, %d in %s; %d only in the first, %d only in the second", table, na, a, nb, b, onlyA, onlyB)
		}
	}
}

// Post appends facts of run to the ledger at url (POST /v1/events), as
// source, with token ("" for none), in one request, and fails the test
// unless the ledger acknowledges them all.
func Post(t testing.TB, url, token, run, source string, facts ...events.Fact) {
	t.Helper()
	var body bytes.Buffer
	body.WriteByte('[')
	for i, f := range facts {
		rec, err := events.Encode(events.New(run, source, time.Now(), f))
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(rec)
	}
	body.WriteByte(']')
	req, err := http.NewRequest(http.MethodPost, url+"/v1/events", &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("posting %d facts of %s: %s %s", len(facts), run, resp.Status, raw)
	}
}
