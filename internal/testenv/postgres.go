package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultDatabaseURL is where the development and CI Postgres listens
// (scripts/postgres/start.sh).
const DefaultDatabaseURL = "postgres://rolloutledger:rolloutledger@127.0.0.1:5432/rolloutledger?sslmode=disable"

// Postgres returns $DATABASE_URL (default [DefaultDatabaseURL]) once a
// server answers there, or skips (fails in CI) when none does.
func Postgres(t testing.TB) string {
	t.Helper()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = DefaultDatabaseURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		Unavailable(t, "no Postgres at $DATABASE_URL (%s): %v", redact(url), err)
	}
	conn.Close(ctx)
	return url
}

// Schema returns a schema name no other test uses, and drops the schema
// (if the test created it) when the test ends.
func Schema(t testing.TB, url string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Logf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", name, err)
		}
	})
	return name
}

func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "(unparsable URL)"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// PGServer is a throwaway Postgres server of the test's own, for tests
// that stop, kill or restart the server: the shared one serves other test
// packages running at the same time.
type PGServer struct {
	bin, dir, data string
	port           int
	asPostgres     bool
}

// PrivatePostgres initializes and starts a server in a temporary directory
// on a free loopback port, and removes it when the test ends. It needs the
// PostgreSQL server binaries (scripts/postgres/start.sh installs them);
// without them it skips, or fails in CI.
func PrivatePostgres(t testing.TB) *PGServer {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Strings(bins)
	if len(bins) == 0 {
		Unavailable(t, "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
	}
	s := &PGServer{bin: filepath.Dir(bins[len(bins)-1])}
	// initdb and postgres refuse to run as root: run them as the postgres
	// user, which must be able to reach the directory.
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			Unavailable(t, "running as root and there is no postgres user to run the server as")
		}
		s.asPostgres = true
	}
	dir, err := os.MkdirTemp("", "rl-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s.dir, s.data = dir, filepath.Join(dir, "data")
	t.Cleanup(func() {
		_ = s.pgctl("stop", "-m", "immediate", "-w")
		os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(s.data, 0o700); err != nil {
		t.Fatal(err)
	}
	if s.asPostgres {
		if out, err := exec.Command("chown", "postgres:postgres", s.data).CombinedOutput(); err != nil {
			t.Fatalf("chown %s: %v: %s", s.data, err, out)
		}
	}
	if out, err := s.command(filepath.Join(s.bin, "initdb"), "-D", s.data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--no-locale", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s.Start(t)
	return s
}

// URL is the superuser connection string of the server.
func (s *PGServer) URL() string {
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(s.port) + "/postgres?sslmode=disable"
}

func (s *PGServer) command(name string, args ...string) *exec.Cmd {
	if s.asPostgres {
		cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
		cmd.Dir = "/"
		return cmd
	}
	return exec.Command(name, args...)
}

func (s *PGServer) pgctl(args ...string) error {
	args = append([]string{"-D", s.data}, args...)
	out, err := s.command(filepath.Join(s.bin, "pg_ctl"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %v\n%s", args, err, out)
	}
	return nil
}

// Start starts the server and waits until it accepts connections.
func (s *PGServer) Start(t testing.TB) {
	t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=60 -c shared_buffers=32MB",
		s.port, s.data)
	if err := s.pgctl("start", "-w", "-t", "60", "-l", filepath.Join(s.data, "server.log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.data, "server.log"))
		t.Fatalf("%v\nserver log:\n%s", err, log)
	}
	CheckFor(t, 30*time.Second, "the private Postgres accepts connections", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.URL())
		if err != nil {
			return false
		}
		conn.Close(ctx)
		return true
	})
}

// Kill stops the server the way a crash would (immediate shutdown: no
// checkpoint, every connection cut); the next Start recovers from the WAL.
func (s *PGServer) Kill(t testing.TB) {
	t.Helper()
	if err := s.pgctl("stop", "-m", "immediate", "-w"); err != nil {
		t.Fatal(err)
	}
}

// Stop shuts the server down the way an operator would (fast shutdown:
// open transactions rolled back, connections closed); Start brings it back.
func (s *PGServer) Stop(t testing.TB) {
	t.Helper()
	if err := s.pgctl("stop", "-m", "fast", "-w"); err != nil {
		t.Fatal(err)
	}
}
