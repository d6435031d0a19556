package pgsink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/docs"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// docs/analysts.md runs as written, top to bottom, with psql, against the
// read model of the run it was written from (the demo's: seed 1, a
// trainer, 6 steps, max_staleness 3): as the owning role, twice (a rerun
// must work too), and as an analyst's login role granted the reader role,
// created by the page's own CREATE ROLE block. Every query whose pasted
// output has rows must return rows, so an example silently empty (a
// missing fact type, a filter that no longer matches) fails here; the
// price, which only the owner may set, is refused to the analyst.
func TestAnalystsDocRunsTopToBottom(t *testing.T) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		testenv.Unavailable(t, "psql is not on PATH")
	}
	kc := testenv.RealKafka(t)
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	s := startLedger(t, kc, url, schema)
	var b [4]byte
	_, _ = rand.Read(b[:])
	run := "doc-" + hex.EncodeToString(b[:])
	if _, err := simulate.Run(context.Background(), simulate.Options{
		URL: s.URL(), Run: run, Seed: 1, Trainer: true, Steps: 6, MaxStaleness: 3,
	}); err != nil {
		t.Fatal(err)
	}
	waitProjected(t, s, kc)
	waitStored(t, url, schema, kc)

	blocks := docs.SQLBlocks(docs.Analysts)
	if len(blocks) < 17 {
		t.Fatalf("docs/analysts.md has %d SQL blocks, want the 17 or more it documents", len(blocks))
	}
	role, password := "rl_alice_"+hex.EncodeToString(b[:]), "pw-"+hex.EncodeToString(b[:])
	local := func(sql string) string {
		sql = strings.ReplaceAll(sql, "SET search_path = rolloutledger;", "SET search_path = "+schema+";")
		sql = regexp.MustCompile(`(?m)^\\set run \S+$`).ReplaceAllString(sql, `\set run `+run)
		sql = strings.ReplaceAll(sql, "alice", role)
		return strings.ReplaceAll(sql, "'change-me'", "'"+password+"'")
	}
	owner := connect(t, url)
	t.Cleanup(func() {
		_, _ = owner.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = owner.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	analyst := fmt.Sprintf("host=%s port=%d dbname=%s user=%s password=%s sslmode=disable",
		cfg.Host, cfg.Port, cfg.Database, role, password)

	// The owner: every block, the DBA's CREATE ROLE included.
	var all, reads []docs.Block
	for _, b := range blocks {
		all = append(all, b)
		if b.Reads() {
			reads = append(reads, b)
		}
	}
	checkBlocks(t, "the owner", runBlocks(t, psql, url, all, local), all)
	// Again: nothing in the page fails when it is run a second time but
	// the role it creates, which the owner drops first.
	if _, err := owner.Exec(context.Background(), "DROP ROLE "+role); err != nil {
		t.Fatal(err)
	}
	checkBlocks(t, "the owner, rerun", runBlocks(t, psql, url, all, local), all)
	// The analyst: every block that only reads.
	checkBlocks(t, "the analyst", runBlocks(t, psql, analyst, reads, local), reads)
	// And what the page says the analyst may not do.
	for _, b := range blocks {
		if b.Reads() || strings.Contains(b.SQL, "CREATE ROLE") {
			continue
		}
		cmd := exec.Command(psql, "-X", "-v", "ON_ERROR_STOP=1", "-d", analyst, "-f", "-")
		cmd.Stdin = strings.NewReader(local("SET search_path = rolloutledger;\n\\set run x\n" + b.SQL))
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "permission denied") {
			t.Errorf("the analyst ran the owner's block at docs/analysts.md:%d: err %v, output\n%s\nwant permission denied", b.Line, err, out)
		}
	}
}

var rowsFooter = regexp.MustCompile(`(?m)^\((\d+) rows?\)$`)

// runBlocks runs blocks in one psql session, top to bottom, stopping at the
// first error, and returns each block's output.
func runBlocks(t *testing.T, psql, conn string, blocks []docs.Block, local func(string) string) []string {
	t.Helper()
	var script strings.Builder
	for i, b := range blocks {
		fmt.Fprintf(&script, "\\echo '@@block %d@@'\n%s", i, local(b.SQL))
	}
	cmd := exec.Command(psql, "-X", "-v", "ON_ERROR_STOP=1", "-P", "pager=off", "-d", conn, "-f", "-")
	cmd.Stdin = strings.NewReader(script.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql stopped: %v\n%s", err, out)
	}
	parts := regexp.MustCompile(`(?m)^@@block \d+@@$`).Split(string(out), -1)
	if len(parts) != len(blocks)+1 {
		t.Fatalf("psql printed %d block markers, want %d:\n%s", len(parts)-1, len(blocks), out)
	}
	return parts[1:]
}

func checkBlocks(t *testing.T, who string, outs []string, blocks []docs.Block) {
	t.Helper()
	for i, b := range blocks {
		if b.Rows <= 0 {
			continue
		}
		m := rowsFooter.FindAllStringSubmatch(outs[i], -1)
		if len(m) == 0 {
			t.Errorf("%s: docs/analysts.md:%d printed no rows footer:\n%s", who, b.Line, outs[i])
			continue
		}
		if n, _ := strconv.Atoi(m[len(m)-1][1]); n == 0 {
			t.Errorf("%s: docs/analysts.md:%d returned no rows; the page shows %d:\n%s", who, b.Line, b.Rows, outs[i])
		}
	}
}
