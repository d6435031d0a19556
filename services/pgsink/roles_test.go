package pgsink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
)

// The ledger's Postgres role needs no more than docs/security.md says: a
// login role with CREATE on the database, no superuser, no CREATEDB, no
// CREATEROLE (rolloutledger_reader made beforehand), migrates, stores a
// run and rebuilds the read model.
func TestLeastPrivilegeLedgerRole(t *testing.T) {
	admin := testenv.Postgres(t)
	kc := testenv.RealKafka(t)
	ctx := context.Background()
	conn := connect(t, admin)
	var b [4]byte
	_, _ = rand.Read(b[:])
	role, password := "rl_ledger_"+hex.EncodeToString(b[:]), "pw-"+hex.EncodeToString(b[:])
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rolloutledger_reader') THEN CREATE ROLE rolloutledger_reader NOLOGIN; END IF; END $$`,
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s' NOSUPERUSER NOCREATEDB NOCREATEROLE", role, password),
		fmt.Sprintf("GRANT CREATE ON DATABASE %q TO %s", db, role),
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		c := connect(t, admin)
		for _, stmt := range []string{"DROP OWNED BY " + role + " CASCADE", fmt.Sprintf("REVOKE CREATE ON DATABASE %q FROM %s", db, role), "DROP ROLE " + role} {
			if _, err := c.Exec(ctx, stmt); err != nil {
				t.Logf("%s: %v", stmt, err)
			}
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	ledgerURL := u.String()
	var schema string
	{
		_, _ = rand.Read(b[:])
		schema = "t_least_" + hex.EncodeToString(b[:])
	}

	s := startLedger(t, kc, ledgerURL, schema)
	res, err := simulate.Run(ctx, simulate.Options{URL: s.URL(), Run: "least-priv", Seed: 3, Tasks: 8, Steps: 1, BatchGroups: 2, MaxTurns: 10})
	if err != nil {
		t.Fatal(err)
	}
	waitStored(t, ledgerURL, schema, kc)
	ledger := connect(t, ledgerURL)
	if n := count(t, ledger, schema, "turns"); n == 0 {
		t.Fatalf("no turns stored of %d events", res.Events)
	}
	if _, err := pgsink.Rebuild(ctx, pgsink.RebuildOptions{Kafka: kc, DatabaseURL: ledgerURL, Schema: schema}); err != nil {
		t.Fatalf("rebuild as the least-privilege role: %v", err)
	}
	if n := count(t, ledger, schema, "turns"); n == 0 {
		t.Fatal("no turns after the rebuild")
	}
}
