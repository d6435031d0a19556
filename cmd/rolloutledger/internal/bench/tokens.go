package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// The token figures (docs/design.md §18.7): ingest of turns of 2,048
// completion tokens beside ProducerPerformance with the same records, the
// trainer's fetch of a batch into NumPy beside np.load of the same arrays,
// and what a token costs in the facts log, in the projector's Pebble state
// and in Postgres.

// Turn shape of the token figures: a long agentic turn.
const (
	tokenTurnCompletion  = 2048
	tokenTurnObservation = 512
)

// makeTokenPayload builds version 2 turn.generated facts of 2,048
// completion and 512 observation tokens: ids uniform over a 151,936-token
// vocabulary and log-probs of sampled tokens, as the base64 encoding sees
// them (neither compresses much).
func makeTokenPayload(distinct, perBody int) (*payload, error) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(1, 2))
	p := &payload{perBody: perBody}
	for i := range distinct {
		run := fmt.Sprintf("bench-tokens-%02d", i%ingestRuns)
		obs, ids, lps := make([]int32, tokenTurnObservation), make([]int32, tokenTurnCompletion), make([]float32, tokenTurnCompletion)
		for j := range obs {
			obs[j] = r.Int32N(151_936)
		}
		for j := range ids {
			ids[j] = r.Int32N(151_936)
			lps[j] = -float32(r.ExpFloat64() * 0.3)
		}
		ev := events.New(run, "engine-1", at, &events.TurnGenerated{
			Attempt: run + "/a0", Turn: i, PromptTokens: 8000, CompletionTokens: tokenTurnCompletion, CachedTokens: 6000,
			VersionSegments: events.SingleVersion(1), ObservationTokenIDs: obs, TokenIDs: ids, Logprobs: lps,
			Finish: events.FinishToolCall, LatencyMS: 20_000,
		})
		ev.V = 2 // observation tokens of tool output only: version 2's meaning
		b, err := events.Encode(ev)
		if err != nil {
			return nil, err
		}
		p.records = append(p.records, b)
		p.keys = append(p.keys, []byte(run))
	}
	for lo := 0; lo+perBody <= len(p.records); lo += perBody {
		p.bodies = append(p.bodies, append(append([]byte("["), bytes.Join(p.records[lo:lo+perBody], []byte(","))...), ']'))
	}
	p.size = p.meanSize()
	return p, nil
}

func tokenFigures(ctx context.Context, e *env) ([]*Figure, error) {
	figs, err := tokenLogFigures(e)
	if err != nil {
		return nil, err
	}
	fetch, err := tokenFetchFigures(ctx, e)
	if err != nil {
		return nil, err
	}
	return append(figs, fetch...), nil
}

// tokenLogFigures is the facts log's bytes per token of a 2K-token turn;
// the ingest of the same records is the ingest group's "2K-token v2 turn".
func tokenLogFigures(e *env) ([]*Figure, error) {
	p, err := makeTokenPayload(128, 8)
	if err != nil {
		return nil, err
	}
	perToken := float64(p.size) / (tokenTurnCompletion + tokenTurnObservation)
	logBytes := &Figure{Name: "facts log, bytes per token (before Kafka's compression)", Unit: "B/token", Command: e.cmd(GroupTokens),
		Runs: []float64{perToken},
		Note: fmt.Sprintf("a 2K-token turn's canonical record: %d B for %d tokens (completion and observation); the same turn at catalogue version 1 (JSON numbers) is about 15.6; its ingest is the ingest group's 2K-token v2 turn", p.size, tokenTurnCompletion+tokenTurnObservation)}
	logBytes.link = func(map[string]*Figure) { logBytes.goalAtMost(10, "<= 10 B/token") }
	return []*Figure{logBytes}, nil
}

// fetchResult is the last line of sdk/python/bench/fetch_samples.py.
type fetchResult struct {
	Run    string `json:"run"`
	Tokens int64  `json:"tokens"`
	Arrow  struct {
		TokensPerS float64 `json:"tokens_per_s"`
		Bytes      int64   `json:"bytes"`
		// Views says the token ids and log-probs are views of the body
		// as read (one record batch), not joined into new arrays.
		Views bool `json:"views"`
		// Compression is what the SDK asked for: lz4 when pyarrow reads
		// it, else none.
		Compression string `json:"compression"`
		// FirstSeconds is the process's first fetch, outside the best.
		FirstSeconds float64 `json:"first_seconds"`
	} `json:"arrow"`
	ArrowUncompressed struct {
		TokensPerS   float64 `json:"tokens_per_s"`
		Bytes        int64   `json:"bytes"`
		FirstSeconds float64 `json:"first_seconds"`
	} `json:"arrow_uncompressed"`
	Columns []string `json:"columns"`
	NDJSON  struct {
		TokensPerS float64 `json:"tokens_per_s"`
	} `json:"ndjson"`
	NPY struct {
		TokensPerS float64 `json:"tokens_per_s"`
	} `json:"np_load_npy"`
}

// tokenFetchFigures run a stack (ingest, projector, API, and the pgsink
// when there is a database), post a batch of long token turns through the
// Python SDK, time the trainer's fetch of it beside np.load, and measure
// what its tokens cost in Pebble and in Postgres.
func tokenFetchFigures(ctx context.Context, e *env) ([]*Figure, error) {
	script := e.o.FetchScript
	cmdline := func(extra ...string) string {
		return fmt.Sprintf("%s %s --url URL %s", e.o.Python, script, joinArgs(extra))
	}
	groups, tokens := "16", "50000"
	if e.o.Short {
		groups, tokens = "2", "4000"
	}
	fetch := &Figure{Name: "trainer fetch of a batch into NumPy (SDK, Arrow)", Unit: "M tokens/s", Command: e.cmd(GroupTokens) + " ; " + cmdline("--make")}
	plain := &Figure{Name: "trainer fetch of a batch into NumPy (SDK, Arrow uncompressed)", Unit: "M tokens/s", Command: fetch.Command}
	ndjson := &Figure{Name: "trainer fetch of a batch into NumPy (SDK, NDJSON)", Unit: "M tokens/s", Command: fetch.Command}
	npy := &Figure{Name: "np.load of the same arrays (.npy files)", Unit: "M tokens/s", Command: fetch.Command}
	pebbleBytes := &Figure{Name: "Pebble (projector state), bytes per token", Unit: "B/token", Command: e.cmd(GroupTokens)}
	pgBytes := &Figure{Name: "Postgres (read model), bytes per token", Unit: "B/token", Command: e.cmd(GroupTokens)}
	figs := []*Figure{fetch, plain, ndjson, npy, pebbleBytes, pgBytes}
	skip := func(why string) []*Figure {
		for _, f := range figs {
			f.Skipped, f.Note = true, why
		}
		return figs
	}
	if _, err := os.Stat(script); err != nil {
		return skip(fmt.Sprintf("%s not found: run from the repository's root", script)), nil
	}
	if out, err := exec.CommandContext(ctx, e.o.Python, "-c", "import rolloutledger, numpy, pyarrow").CombinedOutput(); err != nil {
		return skip(fmt.Sprintf("%s cannot import rolloutledger, numpy and pyarrow (pip install -e './sdk/python[arrow]'; --python names the interpreter): %s", e.o.Python, tail(out))), nil
	}

	dir, err := os.MkdirTemp("", "rolloutledger-bench-tokens-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	so := stack.Options{Addr: "127.0.0.1:0", Kafka: e.kafka("tokens", 12), DataDir: dir}
	if e.o.DatabaseURL != "" {
		so.DatabaseURL, so.PostgresSchema = e.o.DatabaseURL, e.schema()
	}
	s, err := stack.Start(ctx, so)
	if err != nil {
		return nil, err
	}
	var emptySchema int64 // the migrated schema's own pages, before any row
	if so.DatabaseURL != "" {
		if emptySchema, err = schemaSize(ctx, so.DatabaseURL, so.PostgresSchema); err != nil {
			return nil, err
		}
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = s.Shutdown(context.Background())
		}
	}
	defer stop()

	var res fetchResult
	run := ""
	for i := range e.o.Runs {
		args := []string{script, "--url", s.URL(), "--repeats", "3"}
		if run == "" {
			args = append(args, "--make", "--groups", groups, "--attempts", "8", "--tokens", tokens, "--turn-tokens", "2000")
		} else {
			args = append(args, "--run", run)
		}
		e.log.Info("tokens: trainer fetch", "run", i+1)
		out, err := exec.CommandContext(ctx, e.o.Python, args...).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return nil, fmt.Errorf("%s: %v\n%s", cmdline(args[1:]...), err, tail(ee.Stderr))
			}
			return nil, err
		}
		if res, err = lastJSONLine(out); err != nil {
			return nil, fmt.Errorf("%s: %w", cmdline(args[1:]...), err)
		}
		run = res.Run
		fetch.Runs = append(fetch.Runs, res.Arrow.TokensPerS/1e6)
		plain.Runs = append(plain.Runs, res.ArrowUncompressed.TokensPerS/1e6)
		ndjson.Runs = append(ndjson.Runs, res.NDJSON.TokensPerS/1e6)
		npy.Runs = append(npy.Runs, res.NPY.TokensPerS/1e6)
	}
	how := "token ids and log-probs views of the one buffer the body was read into"
	if !res.Arrow.Views {
		how = "joined from several record batches into new arrays"
	}
	fetch.Note = fmt.Sprintf("a batch of %s groups of 8 attempts of %s completion tokens (%d tokens, %d B of Arrow IPC with compression %s) fetched with Ledger.samples(format='arrow') into NumPy arrays (%s), best of 3 per run after a first call (the last run's took %.0f ms: pyarrow's start and memory the process never had), from the in-process stack on loopback; the server sends the Arrow body the projector wrote at seal, with its Content-Length",
		groups, tokens, res.Tokens, res.Arrow.Bytes, res.Arrow.Compression, how, 1000*res.Arrow.FirstSeconds)
	plain.Note = fmt.Sprintf("the same batch with compression='none': %d B, every array a view of the body (first call of the last run %.0f ms)",
		res.ArrowUncompressed.Bytes, 1000*res.ArrowUncompressed.FirstSeconds)
	ndjson.Note = "the same batch as NDJSON, parsed by the SDK into the same arrays"
	npy.Note = fmt.Sprintf("np.load of the same arrays (%s) from .npy files in a temporary directory (page cache), best of 3", strings.Join(res.Columns, ", "))
	fetch.link = func(map[string]*Figure) { fetch.against(npy, 0.5, ">= 50% of np.load") }
	plain.link = func(map[string]*Figure) { plain.against(npy, 0, "(vs np.load)"); plain.Met = nil }
	ndjson.link = func(map[string]*Figure) { ndjson.against(npy, 0, "(vs np.load)"); ndjson.Met = nil }

	if so.DatabaseURL != "" {
		v, note, err := postgresPerToken(ctx, so.DatabaseURL, so.PostgresSchema, run, res.Tokens, emptySchema)
		if err != nil {
			return nil, err
		}
		pgBytes.Runs, pgBytes.Note = []float64{v}, note
	} else {
		pgBytes.Skipped, pgBytes.Note = true, "no database: pass --database-url or set $DATABASE_URL"
	}
	stop()
	v, note, err := pebblePerToken(filepath.Join(dir, "projector"), res.Tokens)
	if err != nil {
		return nil, err
	}
	pebbleBytes.Runs, pebbleBytes.Note = []float64{v}, note
	return figs, nil
}

func joinArgs(args []string) string {
	var b bytes.Buffer
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a)
	}
	return b.String()
}

func lastJSONLine(out []byte) (fetchResult, error) {
	var res fetchResult
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 && l[0] == '{' {
			last = append(last[:0], l...)
		}
	}
	if last == nil {
		return res, fmt.Errorf("no JSON line in its output:\n%s", tail(out))
	}
	if err := json.Unmarshal(last, &res); err != nil {
		return res, err
	}
	if res.Tokens <= 0 {
		return res, fmt.Errorf("it measured a batch of %d tokens", res.Tokens)
	}
	return res, nil
}

// pebblePerToken compacts the stopped projector's Pebble state (so the
// write-ahead log and memtables are in compressed sstables, as they are
// once the state settles) and divides its size by the batch's tokens.
func pebblePerToken(dir string, tokens int64) (float64, string, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		return 0, "", fmt.Errorf("open the projector's state: %w", err)
	}
	defer db.Close()
	if err := db.Flush(); err != nil {
		return 0, "", err
	}
	if err := db.Compact(context.Background(), []byte{0}, bytes.Repeat([]byte{0xff}, 64), true); err != nil {
		return 0, "", err
	}
	m := db.Metrics()
	var size int64
	for _, l := range m.Levels {
		size += l.TablesSize
	}
	return float64(size) / float64(tokens), fmt.Sprintf("the projector's Pebble state after the run (the sealed batch's samples in canonical binary chunks, 17 B a token before compression, with its manifest and the fold's state), compacted: %d B of sstables for %d tokens", size, tokens), nil
}

// postgresPerToken waits for the sink to store the run's turns and
// divides what the read model grew by (tables, TOAST and indexes, past the
// migrated schema's empty pages) by the run's tokens.
func postgresPerToken(ctx context.Context, url, schema, run string, tokens, empty int64) (float64, string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close(ctx)
	want := tokens / 2000 // turns of 2,000 tokens
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "turns"}.Sanitize()+" WHERE run = $1", run).Scan(&n); err != nil {
			return 0, "", err
		}
		if n >= want {
			break
		}
		if time.Now().After(deadline) {
			return 0, "", fmt.Errorf("the sink stored %d of %d turns within 2 minutes", n, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
	size, err := schemaSize(ctx, url, schema)
	if err != nil {
		return 0, "", err
	}
	var turns int64
	if err := conn.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", pgx.Identifier{schema, "turns"}.Sanitize()).Scan(&turns); err != nil {
		return 0, "", err
	}
	grew := size - empty
	return float64(grew) / float64(tokens), fmt.Sprintf("what the read model's tables, indexes and TOAST grew by while the sink stored the run: %d B for %d tokens (the turns table %d B); it keeps counts, segments and text, not token ids or log-probs (docs/design.md §18.7)", grew, tokens, turns), nil
}

// schemaSize is the size of every table of a schema with its indexes and
// TOAST.
func schemaSize(ctx context.Context, url, schema string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var size int64
	err = conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'm')`, schema).Scan(&size)
	return size, err
}

// quietPebble discards Pebble's informational logs.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)           {}
func (quietPebble) Errorf(string, ...any)          {}
func (quietPebble) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
