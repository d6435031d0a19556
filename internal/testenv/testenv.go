// Package testenv finds the servers integration tests run against. Tests
// find Kafka and Postgres through KAFKA_BROKERS and DATABASE_URL, defaulting
// to loopback; when CI=true a missing server fails the test instead of
// skipping it, so a broken CI setup can never pass silently.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/rolloutledger/rolloutledger/internal/embedded"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

// InCI reports whether the tests run in CI, where every server must exist.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips the test, or fails it in CI, because a server it needs
// is missing.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true and a required server is missing: "+format, args...)
	}
	t.Skipf("skipping: "+format+" (start the servers with scripts/services.sh)", args...)
}

// UniquePrefix returns a topic prefix no other test uses, so tests sharing
// a broker never see each other's records.
func UniquePrefix(t testing.TB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	// Kafka allows ASCII letters and digits, '.', '_' and '-' in a topic's
	// name; a subtest's name may hold anything.
	name := strings.Map(func(r rune) rune {
		switch {
		case r == '/':
			return '-'
		case r < 128 && (r == '.' || r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r)):
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return "t-" + name + "-" + hex.EncodeToString(b[:])
}

// RealKafka returns the configuration of the real Kafka cluster at
// $KAFKA_BROKERS (default 127.0.0.1:9092) with a fresh topic prefix, or
// skips (fails in CI) when no broker answers.
func RealKafka(t testing.TB) kafkalog.Config {
	t.Helper()
	brokers := os.Getenv("KAFKA_BROKERS")
	if brokers == "" {
		brokers = "127.0.0.1:9092"
	}
	list := strings.Split(brokers, ",")
	conn, err := net.DialTimeout("tcp", list[0], 2*time.Second)
	if err != nil {
		Unavailable(t, "no Kafka broker at %s: %v", brokers, err)
	}
	conn.Close()
	return kafkalog.Config{Brokers: list, TopicPrefix: UniquePrefix(t), Partitions: 4}
}

// EmbeddedKafka starts an embedded broker for the test, persisting under
// dir when dir is not empty, and stops it when the test ends.
func EmbeddedKafka(t testing.TB, dir string) (kafkalog.Config, *embedded.Broker) {
	t.Helper()
	b, err := embedded.Start(embedded.Options{Addr: "127.0.0.1:0", DataDir: dir, Partitions: 4})
	if err != nil {
		t.Fatalf("start embedded broker: %v", err)
	}
	t.Cleanup(b.Close)
	return kafkalog.Config{Brokers: []string{b.Addr()}, TopicPrefix: UniquePrefix(t), Partitions: 4}, b
}

// Backend is one Kafka implementation a shared suite runs against.
type Backend struct {
	Name  string
	Kafka func(t testing.TB) kafkalog.Config
}

// KafkaBackends lists the embedded broker and the real one: every test of
// the Kafka path runs against both.
func KafkaBackends() []Backend {
	return []Backend{
		{Name: "embedded", Kafka: func(t testing.TB) kafkalog.Config {
			c, _ := EmbeddedKafka(t, "")
			return c
		}},
		{Name: "kafka", Kafka: RealKafka},
	}
}

// MinCheckFor is the least time [CheckFor] waits before it fails a test.
// A bound only decides when a test gives up on a condition that does not
// come: a passing test never waits it out, so it is generous. A machine
// that also runs builds and other suites slows every step by more than a
// bound written on a quiet one assumes.
const MinCheckFor = 2 * time.Minute

// CheckFor polls cond every 20 ms until it returns true or d passes (at
// least [MinCheckFor]), then fails the test with what.
func CheckFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	d = max(d, MinCheckFor)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("after %v: %s", d, what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// CheckProgress polls cond until it says done, and fails the test when
// the progress it reports has not advanced for stall (at least
// MinCheckFor): for work whose length is the machine's to decide, such as
// a consumer catching up with a backlog, a loaded machine slows the
// progress, not the verdict, while a hang still fails within stall.
func CheckProgress(t testing.TB, stall time.Duration, what string, cond func() (done bool, progress int64)) {
	t.Helper()
	stall = max(stall, MinCheckFor)
	start := time.Now()
	done, last := cond()
	moved := time.Now()
	for !done {
		if time.Since(moved) > stall {
			t.Fatalf("after %v, %v without progress (at %d): %s", time.Since(start).Round(time.Second), stall, last, what)
		}
		time.Sleep(20 * time.Millisecond)
		var p int64
		done, p = cond()
		if p != last {
			last, moved = p, time.Now()
		}
	}
}

// SecureKafka locates the SASL and TLS test listeners of the real broker
// that scripts/kafka/start.sh configures (see scripts/services.sh for the
// variables).
type SecureKafka struct {
	// SASL is a SASL_PLAINTEXT (SCRAM) listener, SSL a TLS one, SASLSSL
	// SCRAM over TLS.
	SASL, SSL, SASLSSL []string
	// CAFile is the PEM CA that signed the broker's certificate.
	CAFile string
	// User and Password are a SCRAM user with SHA-256 and SHA-512
	// credentials.
	User, Password string
	// TopicPrefix is fresh for the test.
	TopicPrefix string
}

// RealSecureKafka returns the secure listeners of the broker, or skips (fails
// in CI) when they do not answer.
func RealSecureKafka(t testing.TB) SecureKafka {
	t.Helper()
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	s := SecureKafka{
		SASL:        strings.Split(env("KAFKA_SASL_BROKERS", "127.0.0.1:9094"), ","),
		SSL:         strings.Split(env("KAFKA_SSL_BROKERS", "127.0.0.1:9095"), ","),
		SASLSSL:     strings.Split(env("KAFKA_SASL_SSL_BROKERS", "127.0.0.1:9096"), ","),
		CAFile:      env("KAFKA_SSL_CA_FILE", filepath.Join(repoRoot(), ".services", "kafka", "tls", "ca.crt")),
		User:        env("KAFKA_SCRAM_USER", "ledger"),
		Password:    env("KAFKA_SCRAM_PASSWORD", "ledger-secret"),
		TopicPrefix: UniquePrefix(t),
	}
	for _, addr := range [][]string{s.SASL, s.SSL, s.SASLSSL} {
		conn, err := net.DialTimeout("tcp", addr[0], 2*time.Second)
		if err != nil {
			Unavailable(t, "no Kafka SASL/TLS test listener at %s: %v (scripts/kafka/start.sh adds them)", addr[0], err)
		}
		conn.Close()
	}
	if _, err := os.Stat(s.CAFile); err != nil {
		Unavailable(t, "no test CA for the Kafka TLS listener: %v", err)
	}
	return s
}

// repoRoot is the directory holding go.mod, found from the working
// directory (a test runs in its package's directory).
func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}
