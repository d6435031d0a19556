package kafkalog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// roundTrip uses every kind of client the ledger has against c: the admin
// client (topic bootstrap), the writer, offset queries, a reader and a
// fetcher of records by offset. It returns the first error.
func roundTrip(ctx context.Context, c kafkalog.Config) error {
	if _, err := kafkalog.EnsureTopics(ctx, c); err != nil {
		return err
	}
	w := kafkalog.NewWriter(c, c.FactsTopic(), kafkalog.WriterOptions{})
	defer w.Close()
	pos, err := w.Append(ctx, []kafkalog.Record{{Key: []byte("run-a"), Value: []byte(`{"n":1}`)}, {Key: []byte("run-a"), Value: []byte(`{"n":2}`)}})
	if err != nil {
		return err
	}
	var got []string
	err = kafkalog.ReadPartition(ctx, c, c.FactsTopic(), int(pos[0].Partition), pos[0].Offset, pos[1].Offset+1, func(m kafkalog.Message) error {
		got = append(got, string(m.Value))
		return nil
	})
	if err != nil {
		return err
	}
	if want := []string{`{"n":1}`, `{"n":2}`}; fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("read back %q, want %q", got, want)
	}
	f := kafkalog.NewFetcher(c)
	defer f.Close()
	at, err := f.ValuesAt(ctx, kafkalog.TopicPartition{Topic: c.FactsTopic(), Partition: int(pos[0].Partition)}, []int64{pos[1].Offset})
	if err != nil {
		return err
	}
	if string(at[0]) != `{"n":2}` {
		return fmt.Errorf("fetched %q at offset %d, want %q", at[0], pos[1].Offset, `{"n":2}`)
	}
	return nil
}

func secureConfig(t *testing.T, brokers []string, prefix string, s kafkalog.Security) kafkalog.Config {
	t.Helper()
	c := kafkalog.Config{Brokers: brokers, TopicPrefix: prefix, Partitions: 2}
	if err := s.Apply(&c); err != nil {
		t.Fatalf("configure %+v: %v", s, err)
	}
	return c
}

// TestSCRAMRoundTrip produces and consumes through the SASL_PLAINTEXT and
// SASL_SSL listeners of a real broker with each SCRAM mechanism.
func TestSCRAMRoundTrip(t *testing.T) {
	k := testenv.RealSecureKafka(t)
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		for _, tc := range []struct {
			name    string
			brokers []string
			tls     bool
		}{{"sasl_plaintext", k.SASL, false}, {"sasl_ssl", k.SASLSSL, true}} {
			t.Run(mech+"/"+tc.name, func(t *testing.T) {
				s := kafkalog.Security{SASLMechanism: mech, Username: k.User, Password: k.Password}
				if tc.tls {
					s.CAFile = k.CAFile
				}
				c := secureConfig(t, tc.brokers, testenv.UniquePrefix(t), s)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := roundTrip(ctx, c); err != nil {
					t.Fatalf("produce and consume over %s %s: %v", mech, tc.name, err)
				}
			})
		}
	}
}

// TestSCRAMWrongPassword: a wrong password is refused by the broker, with
// an error that says authentication failed.
func TestSCRAMWrongPassword(t *testing.T) {
	k := testenv.RealSecureKafka(t)
	c := secureConfig(t, k.SASL, k.TopicPrefix, kafkalog.Security{SASLMechanism: "SCRAM-SHA-256", Username: k.User, Password: k.Password + "-wrong"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := kafkalog.EnsureTopics(ctx, c)
	if err == nil {
		t.Fatal("got no error with a wrong SCRAM password")
	}
	if !errors.Is(err, kafka.SASLAuthenticationFailed) && !strings.Contains(err.Error(), "SASL Authentication Failed") {
		t.Fatalf("got %v, want an error saying SASL authentication failed", err)
	}
	t.Logf("wrong password: %v", err)
}

// TestSASLListenerRefusesPlainClient: a client without SASL gets nothing
// done through the SASL listener.
func TestSASLListenerRefusesPlainClient(t *testing.T) {
	k := testenv.RealSecureKafka(t)
	c := kafkalog.Config{Brokers: k.SASL, TopicPrefix: k.TopicPrefix}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kafkalog.EnsureTopics(ctx, c); err == nil {
		t.Fatal("a client without SASL bootstrapped topics through the SASL listener")
	}
}

// TestTLSRoundTrip: trusting the test CA, every client works over TLS;
// without it (the system's roots), the broker's certificate is refused.
func TestTLSRoundTrip(t *testing.T) {
	k := testenv.RealSecureKafka(t)
	t.Run("with CA", func(t *testing.T) {
		c := secureConfig(t, k.SSL, k.TopicPrefix, kafkalog.Security{CAFile: k.CAFile})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := roundTrip(ctx, c); err != nil {
			t.Fatalf("produce and consume over TLS: %v", err)
		}
	})
	t.Run("without CA", func(t *testing.T) {
		c := secureConfig(t, k.SSL, k.TopicPrefix+"-noca", kafkalog.Security{TLS: true})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := kafkalog.EnsureTopics(ctx, c)
		if err == nil {
			t.Fatal("got no error connecting over TLS without trusting the broker's CA")
		}
		if !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("got %v, want a certificate verification error", err)
		}
		t.Logf("without CA: %v", err)
	})
}

func TestSecurityConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    kafkalog.Security
		want []string
	}{
		{"unknown mechanism", kafkalog.Security{SASLMechanism: "PLAIN", Username: "u", Password: "p"}, []string{`"PLAIN"`, "SCRAM-SHA-256"}},
		{"no mechanism", kafkalog.Security{Username: "u", Password: "p"}, []string{"without a mechanism"}},
		{"no password", kafkalog.Security{SASLMechanism: "SCRAM-SHA-512", Username: "u"}, []string{"needs a username and a password"}},
		{"missing CA", kafkalog.Security{CAFile: "/nonexistent/ca.crt"}, []string{"TLS CA file", "/nonexistent/ca.crt"}},
		{"cert without key", kafkalog.Security{CertFile: "c.pem"}, []string{"both the certificate and the key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c kafkalog.Config
			err := tc.s.Apply(&c)
			if err == nil {
				t.Fatal("got no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q, want it to mention %q", err, w)
				}
			}
		})
	}
}
