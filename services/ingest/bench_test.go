package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/services/ingest"
)

// acknowledged answers every append at once: what is left of a request is
// what the ledger adds to its Kafka client (the writer is measured in the
// bench command's ingest group, against a broker).
type acknowledged struct{}

func (acknowledged) Append(_ context.Context, recs []kafkalog.Record) ([]kafkalog.Position, error) {
	return make([]kafkalog.Position, len(recs)), nil
}

// BenchmarkPostEvents is the ingest's own work on 2K-token v2 turns, 8 and
// 64 to a request: reading the body over a loopback connection, strict
// decoding, the canonical records, and the answer, from two clients.
//
//	go test -run='^$' -bench=PostEvents -benchmem ./services/ingest/
func BenchmarkPostEvents(b *testing.B) {
	r := rand.New(rand.NewPCG(8, 64))
	var recs [][]byte
	for i := range 64 {
		rec, err := events.Encode(turn2K(r, fmt.Sprintf("bench-%02d", i%24), i))
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, rec)
	}
	mux := http.NewServeMux()
	(&ingest.Service{Appender: acknowledged{}}).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, per := range []int{8, 64} {
		body := append(append([]byte("["), bytes.Join(recs[:per], []byte(","))...), ']')
		b.Run(fmt.Sprintf("2K-token/%d", per), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.SetParallelism(1) // GOMAXPROCS clients
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := srv.Client().Post(srv.URL+"/v1/events", "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("POST /v1/events: %s", resp.Status)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
