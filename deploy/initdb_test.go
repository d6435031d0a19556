package deploy_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
)

// The first-start script runs on a fresh server (as the postgres image runs
// it), and after the migrations Grafana's login reads the analysts' views
// through its own search path and can write nothing. A private server: the
// script creates cluster-wide roles.
func TestPostgresInitScript(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		testenv.Unavailable(t, "no psql: %v", err)
	}
	srv := testenv.PrivatePostgres(t)
	cfg, err := pgx.ParseConfig(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "postgres/initdb/10-grafana-reader.sh")
	cmd.Env = append(os.Environ(), "POSTGRES_USER="+cfg.User, "POSTGRES_DB="+cfg.Database,
		"PGHOST="+cfg.Host, "PGPORT="+strconv.Itoa(int(cfg.Port)),
		"GRAFANA_DB_PASSWORD=s3cret")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("10-grafana-reader.sh: %v\n%s", err, out)
	}
	ctx := context.Background()
	if _, err := pgsink.Migrate(ctx, srv.URL(), pgsink.DefaultSchema, nil); err != nil {
		t.Fatalf("migrations after the first-start script: %v", err)
	}
	gcfg := cfg.Copy()
	gcfg.User, gcfg.Password = "grafana", "s3cret"
	conn, err := pgx.ConnectConfig(ctx, gcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM step_metrics").Scan(&n); err != nil {
		t.Errorf("grafana reads step_metrics through its search path: %v", err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO prices (run, prompt_per_mtok, cached_per_mtok, completion_per_mtok) VALUES ('x', 1, 1, 1)"); err == nil {
		t.Error("grafana could write to the read model")
	}
}
