package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

// migrate creates the schema once and then finds it up to date; rebuild
// fills a schema from the log, drawing its progress bar, and swaps it in.
func TestMigrateAndRebuildCommands(t *testing.T) {
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	code, out, errb := runMain("migrate", "--database-url", url, "--schema", schema)
	if code != 0 || !strings.Contains(out, "migrated to version") {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errb)
	}
	code, out, errb = runMain("migrate", "--database-url", url, "--schema", schema)
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("migrate again: exit %d\n%s%s", code, out, errb)
	}
	if code, _, errb = runMain("migrate", "--database-url", ""); code == 0 || !strings.Contains(errb, "DATABASE_URL") {
		t.Errorf("migrate without a database: exit %d, %s", code, errb)
	}

	kc, _ := testenv.EmbeddedKafka(t, "")
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(),
		Only: []string{stack.ServiceIngest, stack.ServiceProjector, stack.ServiceAPI}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	res, err := simulate.Run(context.Background(), simulate.Options{URL: s.URL(), Run: "cli-rebuild", Seed: 3, Tasks: 12, Steps: 1, BatchGroups: 4, MaxTurns: 40})
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kafkalog.EndOffsets(context.Background(), kc, kc.FactsTopic())
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 30*time.Second, "the projector folds every fact", func() bool {
		for p, end := range ends {
			if off, err := s.Projector().Offset(p); err != nil || off < end {
				return false
			}
		}
		return true
	})

	code, out, errb = runMain("projections", "rebuild", "postgres", "--brokers", kc.Brokers[0], "--topic-prefix", kc.TopicPrefix,
		"--database-url", url, "--schema", schema)
	if code != 0 || !strings.Contains(out, "rebuilt "+schema) || !strings.Contains(out, "replaced schema was dropped") ||
		!strings.Contains(errb, "rebuilding "+schema) {
		t.Fatalf("rebuild: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var turns int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{schema, "turns"}.Sanitize()).Scan(&turns); err != nil {
		t.Fatal(err)
	}
	if want := res.ByType[events.TypeTurnGenerated]; turns != want {
		t.Errorf("%d turns in the rebuilt schema, the run has %d", turns, want)
	}
}
