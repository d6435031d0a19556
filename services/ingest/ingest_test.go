package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/ingest"
)

// turn2K is a version 2 turn of 2,048 completion and 512 observation
// tokens, its weights updated at token 1,500.
func turn2K(r *rand.Rand, run string, n int) events.Event {
	ids, lps, obs := make([]int32, 2048), make([]float32, 2048), make([]int32, 512)
	for i := range ids {
		ids[i], lps[i] = r.Int32N(151936), -float32(r.ExpFloat64())
	}
	for i := range obs {
		obs[i] = r.Int32N(151936)
	}
	ev := events.New(run, "engine-1", time.Date(2026, 11, 29, 19, 10, 0, 0, time.UTC), &events.TurnGenerated{
		Attempt: "g/a-0", Turn: n, PromptTokens: 9000, CompletionTokens: 2048,
		VersionSegments:     []events.VersionSegment{{Start: 0, PolicyVersion: 3}, {Start: 1500, PolicyVersion: 4}},
		ObservationTokenIDs: obs, TokenIDs: ids, Logprobs: lps, Text: fmt.Sprintf("turn %d: «ok» <done>", n),
		Finish: events.FinishToolCall, LatencyMS: 4000,
	})
	// Version 2: its observation tokens are the tool output alone (from
	// version 3 on they are all of the prompt not shared with a parent).
	ev.V = 2
	return ev
}

// Ingest stores each fact's canonical record, whatever spelling of it a
// producer sent, and the base64 of a v2 turn's token arrays exactly as it
// was sent: read back from Kafka, every record is the byte string the
// producer's own canonical encoding gives, against both backends.
func TestV2TurnsReachKafkaByteForByte(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
				t.Fatal(err)
			}
			w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
			defer w.Close()
			mux := http.NewServeMux()
			(&ingest.Service{Appender: w}).Register(mux)
			srv := httptest.NewServer(mux)
			defer srv.Close()

			r := rand.New(rand.NewPCG(2, 2048))
			run := "v2-kafka"
			var evs []events.Event
			for n := range 8 {
				evs = append(evs, turn2K(r, run, n))
			}
			// A version 1 turn with token arrays, in the same request.
			v1 := turn2K(r, run, 8)
			v1.V = 1
			v1.Data.(*events.TurnGenerated).VersionSegments = events.SingleVersion(4)
			v1.Data.(*events.TurnGenerated).Text = ""
			evs = append(evs, v1)
			want, err := events.EncodeBatch(evs)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(want[0], []byte(`"token_ids":"`)) || !bytes.Contains(want[8], []byte(`"token_ids":[`)) {
				t.Fatal("the records are not of the versions meant")
			}
			// The first four as the canonical records; the others indented,
			// with their members in reverse order and every / in a string
			// (base64 has many) written as the escape \/.
			var parts [][]byte
			for i, rec := range want {
				if i < 4 {
					parts = append(parts, rec)
					continue
				}
				parts = append(parts, respell(t, rec))
			}
			body := append(append([]byte("[\n"), bytes.Join(parts, []byte(",\n"))...), "\n]"...)
			acks := post(t, srv.URL, body)
			if len(acks) != len(want) {
				t.Fatalf("got %d acknowledgments, want %d", len(acks), len(want))
			}
			for i, a := range acks {
				got := readAt(ctx, t, kc, a)
				if !bytes.Equal(got.Value, want[i]) {
					t.Errorf("record %d at %d/%d: got %d bytes, want the %d of its canonical form\ngot  %.200s\nwant %.200s",
						i, a.Partition, a.Offset, len(got.Value), len(want[i]), got.Value, want[i])
				}
				if v := header(got, "v"); v != strconv.Itoa(evs[i].V) {
					t.Errorf("record %d: header v=%q, want %d", i, v, evs[i].V)
				}
			}
		})
	}
}

// respell writes the record rec as a producer might: indented, members in
// reverse order, slashes escaped.
func respell(t *testing.T, rec []byte) []byte {
	t.Helper()
	var members []struct {
		key string
		val json.RawMessage
	}
	dec := json.NewDecoder(bytes.NewReader(rec))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		members = append(members, struct {
			key string
			val json.RawMessage
		}{k.(string), v})
	}
	var out bytes.Buffer
	out.WriteString("{")
	for i := len(members) - 1; i >= 0; i-- {
		fmt.Fprintf(&out, "\n  %q: ", members[i].key)
		if err := json.Indent(&out, members[i].val, "  ", "\t"); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			out.WriteString(",")
		}
	}
	out.WriteString("\n}")
	return bytes.ReplaceAll(out.Bytes(), []byte("/"), []byte(`\/`))
}

func post(t *testing.T, url string, body []byte) []ingest.Appended {
	t.Helper()
	resp, err := http.Post(url+"/v1/events", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/events: %d %s", resp.StatusCode, b)
	}
	var r ingest.Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.Events
}

func readAt(ctx context.Context, t *testing.T, kc kafkalog.Config, a ingest.Appended) kafkalog.Message {
	t.Helper()
	var got *kafkalog.Message
	err := kafkalog.ReadPartition(ctx, kc, kc.FactsTopic(), int(a.Partition), a.Offset, a.Offset+1, func(m kafkalog.Message) error {
		got = &m
		return nil
	})
	if err != nil || got == nil {
		t.Fatalf("read %d/%d: %v", a.Partition, a.Offset, err)
	}
	return *got
}

func header(m kafkalog.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
