package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// hostileMaxBody is the body bound of the hostile tests' stack: small
// enough to send past quickly, large enough that a body of it nested one
// level per byte would have exhausted the parser's stack.
const hostileMaxBody = 24 << 20

func clipName(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// oneShot is a client that opens a connection per request, so that it
// holds no slot of a capped server between requests.
var oneShot = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func postOneShot(t *testing.T, url string, b []byte) (int, []byte) {
	t.Helper()
	resp, err := oneShot.Post(url+"/v1/events", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// errorBody is the contract's error shape, decoded strictly.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Index   *int   `json:"index"`
		Field   string `json:"field"`
	} `json:"error"`
}

// checkError asserts that a response is status with the contract's error
// body carrying code.
func checkError(t *testing.T, status int, contentType string, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status: got %d (%.300s), want %d", status, body, wantStatus)
	}
	if !strings.HasPrefix(contentType, "application/json") {
		t.Errorf("content type: got %q, want application/json", contentType)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var eb errorBody
	if err := dec.Decode(&eb); err != nil {
		t.Fatalf("error body %.300q: %v", body, err)
	}
	if eb.Error.Code != wantCode || eb.Error.Message == "" {
		t.Errorf("error: got code %q message %q, want code %q and a message", eb.Error.Code, eb.Error.Message, wantCode)
	}
}

// rawRequest writes req to a fresh connection and reads one response.
func rawRequest(t *testing.T, addr string, req []byte) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := conn.Write(req); err != nil {
		t.Fatalf("write: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func postRaw(t *testing.T, url, contentType string, body io.Reader, length int64) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/events", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// Hostile requests against the whole stack on real Kafka and Postgres:
// each gets a clear 4xx in the contract's shape, and none leaves anything
// in the facts topic, the projector or the read model.
func TestHostileInput(t *testing.T) {
	kc := testenv.RealKafka(t)
	dbURL := testenv.Postgres(t)
	schema := testenv.Schema(t, dbURL)
	var logs testenv.LogBuffer
	s, err := stack.Start(context.Background(), stack.Options{
		Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(), DatabaseURL: dbURL, PostgresSchema: schema,
		Bodies: httpx.BodyLimits{MaxBytes: hostileMaxBody},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	before := endOffsetsSum(t, kc)

	// valid is a turn of catalogue version 1, whose token arrays are JSON
	// numbers; validV2 the same turn at version 2, with base64 arrays.
	valid := func() events.Event {
		ev := runEvents("hostile", 2)[1]
		ev.V = 1
		return ev
	}
	validV2 := func() events.Event { return runEvents("hostile", 2)[1] }
	// edit returns a valid turn's canonical record with old replaced by new.
	editOf := func(ev events.Event, old, new string) string {
		b, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(old)) {
			t.Fatalf("%s not in %s", old, b)
		}
		return strings.Replace(string(b), old, new, 1)
	}
	edit := func(old, new string) string { return editOf(valid(), old, new) }
	editV2 := func(old, new string) string { return editOf(validV2(), old, new) }
	// hugeV2 has 150,000 completion tokens: 1.6 MB of base64, over the
	// canonical record's bound but under the raw record's.
	hugeV2 := func() string {
		const n = 150_000
		var m map[string]any
		if err := json.Unmarshal([]byte(editV2(`"a-1"`, `"a-1"`)), &m); err != nil {
			t.Fatal(err)
		}
		d := m["data"].(map[string]any)
		d["completion_tokens"] = n
		d["token_ids"] = base64.StdEncoding.EncodeToString(make([]byte, 4*n))
		d["logprobs"] = base64.StdEncoding.EncodeToString(make([]byte, 4*n))
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tokens := func(n int, logprobs int) string {
		var ids, lps strings.Builder
		for i := range n {
			if i > 0 {
				ids.WriteByte(',')
			}
			ids.WriteString(strconv.Itoa(100000 + i))
		}
		for i := range logprobs {
			if i > 0 {
				lps.WriteByte(',')
			}
			lps.WriteString("-0.5")
		}
		return fmt.Sprintf(`"completion_tokens":%d,"cached_tokens":0,"token_ids":[%s],"logprobs":[%s]`, n, ids.String(), lps.String())
	}
	const tokenField = `"completion_tokens":3,"cached_tokens":0,"token_ids":[1,2,3],"logprobs":[-0.1,-0.2,0]`

	bodies := []struct {
		name        string
		body        string
		contentType string
		status      int
		code        string
	}{
		{"nested a million deep", strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20), "", 400, "malformed"},
		{"nested twenty million deep, unclosed", strings.Repeat("[", 20<<20), "", 400, "malformed"},
		{"objects nested deep", strings.Repeat(`{"a":`, 1<<18), "", 400, "malformed"},
		{"invalid UTF-8 in a string", edit(`"engine-1"`, "\"engine-\xff\xfe\""), "", 400, "malformed"},
		{"overlong UTF-8 encoding of /", edit(`"a-1"`, "\"a-\xc0\xaf\""), "", 400, "malformed"},
		{"lone surrogate escape", edit(`"a-1"`, `"a-\ud800"`), "", 400, "invalid_value"},
		{"huge token arrays", edit(tokenField, tokens(400_000, 400_000)), "", 413, "too_large"},
		{"token and logprob counts differ", edit(tokenField, tokens(1000, 999)), "", 400, "invalid_value"},
		{"many events, one bad", "[" + strings.Repeat(edit(`"a-1"`, `"a-1"`)+",", 5000) + edit(`"finish":"tool_call"`, `"finish":"?"`) + "]", "", 400, "invalid_value"},
		{"int64 overflow", edit(`"prompt_tokens":100`, `"prompt_tokens":9223372036854775808`), "", 400, "wrong_type"},
		{"negative count", edit(`"prompt_tokens":100`, `"prompt_tokens":-1`), "", 400, "invalid_value"},
		{"int32 overflow in token ids", edit(`"token_ids":[1,2,3]`, `"token_ids":[1,2,2147483648]`), "", 400, "wrong_type"},
		{"v2 huge token arrays", hugeV2(), "", 413, "too_large"},
		{"v2 base64 with a NUL escape", editV2(`"token_ids":"AQAA`, `"token_ids":"\u0000AQA`), "", 400, "invalid_value"},
		{"v2 base64 with line breaks", editV2(`"token_ids":"AQAA`, `"token_ids":"AQ\r\nAA`), "", 400, "invalid_value"},
		{"v2 token ids as numbers", editV2(`"token_ids":"AQAAAAIAAAADAAAA"`, `"token_ids":[1,2,3]`), "", 400, "wrong_type"},
		{"NaN", edit(`-0.1`, `NaN`), "", 400, "malformed"},
		{"Infinity", edit(`-0.1`, `-Infinity`), "", 400, "malformed"},
		{"NaN as a string", edit(`-0.1`, `"NaN"`), "", 400, "wrong_type"},
		{"1e400", edit(`-0.1`, `-1e400`), "", 400, "wrong_type"},
		{"float turn index", edit(`"turn":0`, `"turn":1e0`), "", 400, "wrong_type"},
		{"run ../", edit(`"run":"hostile"`, `"run":"../hostile"`), "", 400, "invalid_value"},
		{"run ..", edit(`"run":"hostile"`, `"run":".."`), "", 400, "invalid_value"},
		{"run /", edit(`"run":"hostile"`, `"run":"/"`), "", 400, "invalid_value"},
		{"run %2e%2e", edit(`"run":"hostile"`, `"run":"%2e%2e"`), "", 400, "invalid_value"},
		{"run with NUL", edit(`"run":"hostile"`, `"run":"hostile\u0000"`), "", 400, "invalid_value"},
		{"run 129 bytes", edit(`"run":"hostile"`, `"run":"`+strings.Repeat("r", 129)+`"`), "", 400, "invalid_value"},
		{"run with CR LF", edit(`"run":"hostile"`, `"run":"hostile\r\nlevel=ERROR msg=forged"`), "", 400, "invalid_value"},
		{"source with CR LF", edit(`"source":"engine-1"`, `"source":"engine-1\r\nX-Injected: 1"`), "", 400, "invalid_value"},
		{"type with CR LF", edit(`"type":"turn.generated"`, `"type":"turn.generated\r\nlevel=ERROR"`), "", 400, "unknown_type"},
		{"attempt with control character", edit(`"a-1"`, `"a-1\u001b[2J"`), "", 400, "invalid_value"},
		{"duplicate keys disagreeing on the run", edit(`"run":"hostile"`, `"run":"hostile","run":"other"`), "", 400, "duplicate_field"},
		{"duplicate keys in the data", edit(`"attempt":"a-1"`, `"attempt":"a-1","attempt":"a-2"`), "", 400, "duplicate_field"},
		{"text/plain", edit(`"a-1"`, `"a-1"`), "text/plain", 415, "unsupported_media_type"},
		{"form", edit(`"a-1"`, `"a-1"`), "application/x-www-form-urlencoded", 415, "unsupported_media_type"},
		{"no content type", edit(`"a-1"`, `"a-1"`), "-", 415, "unsupported_media_type"},
		{"latin-1 JSON", edit(`"a-1"`, `"a-1"`), "application/json; charset=iso-8859-1", 415, "unsupported_media_type"},
	}
	for _, c := range bodies {
		t.Run(c.name, func(t *testing.T) {
			ct := c.contentType
			switch ct {
			case "":
				ct = "application/json"
			case "-":
				ct = ""
			}
			status, gotCT, out := postRaw(t, s.URL(), ct, strings.NewReader(c.body), int64(len(c.body)))
			checkError(t, status, gotCT, out, c.status, c.code)
		})
	}

	t.Run("declared length over the bound", func(t *testing.T) {
		// Only the headers are sent: the length alone is refused.
		resp, out := rawRequest(t, s.Addr(), fmt.Appendf(nil,
			"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", int64(1)<<40))
		checkError(t, resp.StatusCode, resp.Header.Get("Content-Type"), out, 413, "too_large")
	})
	t.Run("chunked body over the bound", func(t *testing.T) {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// The server answers as soon as the body passes the bound, while
		// the client is still sending: write in the background.
		go func() {
			fmt.Fprint(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
			chunk := fmt.Appendf(nil, "%x\r\n%s\r\n", 1<<16, bytes.Repeat([]byte(" "), 1<<16))
			for range hostileMaxBody>>16 + 1 {
				if _, err := conn.Write(chunk); err != nil {
					return
				}
			}
			fmt.Fprint(conn, "0\r\n\r\n")
		}()
		_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		checkError(t, resp.StatusCode, resp.Header.Get("Content-Type"), out, 413, "too_large")
	})
	t.Run("body shorter than its declared length", func(t *testing.T) {
		// The client stops sending and closes its side: the server must not
		// append the part it got.
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		rec := edit(`"a-1"`, `"a-1"`)
		fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(rec)+100, rec)
		_ = conn.(*net.TCPConn).CloseWrite()
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			out, _ := io.ReadAll(resp.Body)
			checkError(t, resp.StatusCode, resp.Header.Get("Content-Type"), out, 400, "unreadable_body")
		}
		conn.Close()
	})

	// The query API: run and task ids shaped like paths, in URL paths.
	long := strings.Repeat("r", 10_000)
	for _, c := range []struct{ path, code string }{
		{"/v1/runs/%2e%2e/status", "invalid_value"},
		{"/v1/runs/%2E%2E/batches/1", "invalid_value"},
		{"/v1/runs/../status", "invalid_path"},
		{"/v1/runs/./status", "invalid_path"},
		{"//v1/runs/x/status", "invalid_path"},
		{"/v1/runs/x/status/", "invalid_path"},
		{"/v1/runs/a%2fb/status", "invalid_value"},
		{"/v1/runs/..%2f..%2fetc/status", "invalid_value"},
		{"/v1/runs/x%00/status", "invalid_value"},
		{"/v1/runs/x%0d%0aSet-Cookie:a=b/status", "invalid_value"},
		{"/v1/runs/" + long + "/status", "invalid_value"},
		{"/v1/runs/x/tasks/a/../b", "invalid_path"},
		{"/v1/runs/x/tasks/%00", "invalid_value"},
		{"/v1/runs/x/batches/-1", "invalid_value"},
		{"/v1/runs/x/batches/18446744073709551616", "invalid_value"},
		{"/v1/runs/x/batches/next?after=1&wait=-1s", "invalid_value"},
		{"/v1/runs/x/batches/next?after=1&wait=1000h", "invalid_value"},
		{"/v1/runs/x/batches/next?after=NaN", "invalid_value"},
		{"/v1/runs/x/batches/1", "not_found"},
		{"/etc/passwd", "not_found"},
	} {
		t.Run("GET "+clipName(c.path), func(t *testing.T) {
			resp, out := rawRequest(t, s.Addr(), []byte("GET "+c.path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
			want := 400
			if c.code == "not_found" {
				want = 404
			}
			checkError(t, resp.StatusCode, resp.Header.Get("Content-Type"), out, want, c.code)
		})
	}

	// Nothing reached Kafka. A marker fact sent after everything else then
	// shows that the projector and the read model saw it and nothing
	// before it.
	if after := endOffsetsSum(t, kc); after != before {
		t.Fatalf("refused requests appended %d records", after-before)
	}
	marker := runEvents("hostile-marker", 1)
	if code, out := post(t, s.URL(), body(t, marker), nil); code != 200 {
		t.Fatalf("marker: got %d %s", code, out)
	}
	if after := endOffsetsSum(t, kc); after != before+1 {
		t.Fatalf("facts topic grew by %d records, want only the marker", after-before)
	}
	testenv.CheckFor(t, 60*time.Second, "the projector sees the marker run", func() bool {
		runs, err := s.Projector().Runs()
		return err == nil && len(runs) > 0
	})
	runs, _ := s.Projector().Runs()
	if len(runs) != 1 || runs[0].Run != "hostile-marker" {
		t.Errorf("projector runs: got %+v, want only hostile-marker", runs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := pgsink.EndOffsets(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sink().WaitStored(ctx, ends); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pgRuns []string
	rows, err := conn.Query(ctx, "SELECT run FROM "+pgx.Identifier{schema, "runs"}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r string
		_ = rows.Scan(&r)
		pgRuns = append(pgRuns, r)
	}
	rows.Close()
	if len(pgRuns) != 1 || pgRuns[0] != "hostile-marker" {
		t.Errorf("read model runs: got %q, want only hostile-marker", pgRuns)
	}

	// Every log line is one record: nothing a client sent split a line or
	// forged another.
	for i, line := range strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n") {
		if !strings.HasPrefix(line, "time=") {
			t.Errorf("log line %d is not a record of its own: %.200q", i, line)
		}
		if strings.Contains(line, "\x1b") {
			t.Errorf("log line %d carries a raw escape character: %.200q", i, line)
		}
	}
}

// A traceparent that is not W3C's exact form is dropped, not copied into
// the record's headers: ingest puts only the catalogue type, the version
// and a well-formed traceparent there.
func TestHostileTraceparentDoesNotReachKafka(t *testing.T) {
	kc := testenv.RealKafka(t)
	s := startStack(t, kc)
	evs := runEvents("hostile-trace", 1)
	for _, tp := range []string{
		"00-4bf92f3577b34ca3a2b9e0d0f2b1c3d4-00f067aa0ba902b7-01\x01",
		"00-4bf92f3577b34ca3a2b9e0d0f2b1c3d4-00f067aa0ba902b7-01, 00-aa",
		"00-4BF92F3577B34CA3A2B9E0D0F2B1C3D4-00F067AA0BA902B7-01",
		"00-4bf92f3577b34ca3a2b9e0d0f2b1c3d4-00f067aa0ba902b7-0\x7f",
	} {
		// Go's client refuses to send control characters itself: write them.
		b := body(t, evs)
		resp, out := rawRequest(t, s.Addr(), fmt.Appendf(nil,
			"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTraceparent: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", tp, len(b), b))
		if strings.ContainsAny(tp, "\x01\x7f") {
			// net/http refuses a header value with a control character
			// before any handler runs.
			if resp.StatusCode != 400 {
				t.Errorf("traceparent %q: got %d %s, want 400", tp, resp.StatusCode, out)
			}
			continue
		}
		if resp.StatusCode != 200 {
			t.Fatalf("traceparent %q: got %d %s, want 200 (the header is ignored)", tp, resp.StatusCode, out)
		}
	}
	recs := readFacts(t, kc, 2)
	for _, r := range recs {
		if len(r.headers) != 2 || r.headers["type"] != string(events.TypeRunStarted) || r.headers["v"] != "1" {
			t.Errorf("record %d/%d headers: got %q, want only type and v", r.partition, r.offset, r.headers)
		}
	}
	if n := endOffsetsSum(t, kc); n != 2 {
		t.Errorf("facts topic holds %d records, want the 2 accepted", n)
	}
}

// slowStack is an ingest-only stack with short timeouts, a small body
// budget and a connection cap, for the tests of clients that hold on.
func slowStack(t *testing.T, kc kafkalog.Config, o httpx.ServerOptions) *stack.Stack {
	t.Helper()
	s, err := stack.Start(context.Background(), stack.Options{
		Addr: "127.0.0.1:0", Kafka: kc, Only: []string{stack.ServiceIngest},
		HTTP: o, Bodies: httpx.BodyLimits{MaxBytes: 1 << 20, Budget: 1 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

// waitClosed reads from conn until the server closes it, failing the test
// when that takes longer than d.
func waitClosed(t *testing.T, conn net.Conn, d time.Duration) []byte {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %v", d)
	}
	return b
}

// Slow clients: headers or a body dribbled slower than the server's
// timeouts lose their connection, a body with 408; nothing is appended.
func TestHostileSlowClients(t *testing.T) {
	kc := testenv.RealKafka(t)
	s := slowStack(t, kc, httpx.ServerOptions{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, IdleTimeout: time.Second})
	before := endOffsetsSum(t, kc)

	t.Run("headers dribbled", func(t *testing.T) {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// One header line, then one more byte now and then: Slowloris.
		fmt.Fprint(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\n")
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := conn.Write([]byte("X")); err != nil {
						return
					}
				}
			}
		}()
		waitClosed(t, conn, 30*time.Second)
	})
	t.Run("body dribbled", func(t *testing.T) {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rec := string(body(t, runEvents("slow", 1)))
		fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(rec))
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for i := 0; i < len(rec)-1; i++ { // never the last byte
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := conn.Write([]byte{rec[i]}); err != nil {
						return
					}
				}
			}
		}()
		out := waitClosed(t, conn, 30*time.Second)
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
		if err != nil {
			t.Fatalf("no response before the close (%q): %v", out, err)
		}
		b, _ := io.ReadAll(resp.Body)
		checkError(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, 408, "timeout")
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		waitClosed(t, conn, 30*time.Second)
	})
	if after := endOffsetsSum(t, kc); after != before {
		t.Fatalf("slow clients appended %d records", after-before)
	}
}

// Too many clients at once: beyond the connection cap, connections wait
// until one is released (a silent one is cut off at ReadHeaderTimeout);
// beyond the body budget, requests are answered 503 with Retry-After after
// a short wait, and nothing of theirs is appended.
func TestHostileTooManyClients(t *testing.T) {
	kc := testenv.RealKafka(t)
	s := slowStack(t, kc, httpx.ServerOptions{ReadHeaderTimeout: 500 * time.Millisecond, ReadTimeout: 10 * time.Second, MaxConns: 3})
	before := endOffsetsSum(t, kc)

	t.Run("connection cap", func(t *testing.T) {
		// Three silent connections take every slot.
		var silent []net.Conn
		for range 3 {
			c, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			silent = append(silent, c)
		}
		// A real client still gets its answer, once the server has cut the
		// silent ones off.
		code, out := postOneShot(t, s.URL(), body(t, runEvents("capped", 1)))
		if code != 200 {
			t.Fatalf("got %d %s, want 200 once a slot is free", code, out)
		}
		for _, c := range silent {
			waitClosed(t, c, 30*time.Second)
		}
	})
	t.Run("body budget", func(t *testing.T) {
		// A body is charged by what arrives: one that has sent 600 KiB
		// (its buffer grown to the whole bound, which is the budget) holds
		// it all while it is being read, and any other request is turned
		// away after a short wait.
		pr, pw := io.Pipe()
		done := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/events", pr)
			req.Header.Set("Content-Type", "application/json")
			resp, err := oneShot.Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		if _, err := pw.Write(append([]byte("["), bytes.Repeat([]byte(" "), 600<<10)...)); err != nil {
			t.Fatal(err)
		}
		var status int
		var ct string
		var out []byte
		// The probe's body is one ingest would refuse anyway ("[]", no
		// events): a probe that comes before the first body's bytes have
		// arrived is read and refused with 400, appending nothing.
		testenv.CheckFor(t, 30*time.Second, "a second request refused while the first holds the budget", func() bool {
			req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/events", strings.NewReader("[]"))
			req.Header.Set("Content-Type", "application/json")
			resp, err := oneShot.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			out, _ = io.ReadAll(resp.Body)
			status, ct = resp.StatusCode, resp.Header.Get("Content-Type")
			if status == 503 && resp.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
			return status == 503
		})
		checkError(t, status, ct, out, 503, "overloaded")
		// The first request, abandoned mid-body, appends nothing either.
		pw.CloseWithError(io.ErrUnexpectedEOF)
		<-done
	})
	// The refused request, retried once the budget is free, is accepted.
	if code, out := postOneShot(t, s.URL(), body(t, runEvents("budget", 1))); code != 200 {
		t.Fatalf("retry: got %d %s", code, out)
	}
	if after := endOffsetsSum(t, kc); after != before+2 {
		t.Fatalf("got %d records appended, want 2 (the capped client's and the retry)", after-before)
	}
}

// A client that sends a whole valid request and goes away before the
// answer still has its facts appended, exactly once: the append does not
// depend on the client's connection, so a retry with the same ids is the
// only way to learn the outcome, and a safe one.
func TestHostileClientGoneAfterBody(t *testing.T) {
	kc := testenv.RealKafka(t)
	s := startStack(t, kc)
	evs := runEvents("gone", 3)
	b := body(t, evs)
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	conn.Close()
	recs := readFacts(t, kc, len(evs))
	if len(recs) != len(evs) {
		t.Fatalf("got %d records, want %d", len(recs), len(evs))
	}
	for i, r := range recs {
		ev, err := events.Decode(r.value)
		if err != nil || ev.ID != evs[i].ID {
			t.Fatalf("record %d: got %v (%v), want event %s", i, ev.ID, err, evs[i].ID)
		}
	}
}

// Requests whose framing is ambiguous or oversized are refused by net/http
// before any handler runs, so their answers are its plain-text ones rather
// than the contract's error body; what matters is that they are refused
// and append nothing (a request smuggled past a proxy could otherwise
// write facts the proxy never saw). net/http reads a request carrying both
// Content-Length and chunked framing by the chunks alone, as RFC 9112
// allows; a proxy in front must not read it by its length.
func TestHostileFramingRefusedByNetHTTP(t *testing.T) {
	kc := testenv.RealKafka(t)
	s := startStack(t, kc)
	b := body(t, runEvents("framing", 1))
	head := "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
	for _, c := range []struct {
		name string
		req  string
		want int
	}{
		{"two Content-Lengths", head + fmt.Sprintf("Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s", len(b), len(b)-1, b), 400},
		{"header with a NUL", head + fmt.Sprintf("X-Worker: a\x00b\r\nContent-Length: %d\r\n\r\n%s", len(b), b), 400},
		{"headers over MaxHeaderBytes", head + "X-Pad: " + strings.Repeat("a", 128<<10) + fmt.Sprintf("\r\nContent-Length: %d\r\n\r\n%s", len(b), b), 431},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, out := rawRequest(t, s.Addr(), []byte(c.req))
			if resp.StatusCode != c.want {
				t.Errorf("got %d %q, want %d", resp.StatusCode, out, c.want)
			}
		})
	}
	if n := endOffsetsSum(t, kc); n != 0 {
		t.Errorf("refused requests appended %d records", n)
	}
}
