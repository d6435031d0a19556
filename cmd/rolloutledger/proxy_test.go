package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// These tests run the proxy as a user does: the rolloutledger binary's
// `proxy` in front of a real llama-server, in front of `rolloutledger dev`,
// each a process of its own that the test kills -9 mid-conversation. A
// harness goroutine talks to the proxy as an agent harness would (plain
// OpenAI-compatible chat, streamed and not, retrying a request whose
// answer did not arrive whole) and keeps every answer it received whole.

// proxyProc is a `rolloutledger proxy` process.
type proxyProc struct {
	cmd  *exec.Cmd
	url  string
	logs *testenv.LogBuffer
	done chan struct{}
}

func startProxyProc(t *testing.T, bin, listen, upstream, ledger, spool string) *proxyProc {
	t.Helper()
	p := &proxyProc{url: "http://" + listen, logs: &testenv.LogBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "proxy", "--listen", listen, "--upstream", upstream, "--engine", "llamacpp",
		"--ledger", ledger, "--spool", spool)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("proxy (pid %d) output:\n%s", p.cmd.Process.Pid, tailString(p.logs.String(), 6000))
		}
	})
	testenv.CheckFor(t, time.Minute, "the proxy answers /healthz", func() bool {
		select {
		case <-p.done:
			t.Fatalf("the proxy exited before it listened:\n%s", p.logs.String())
		default:
		}
		resp, err := http.Get(p.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	return p
}

// kill ends the process with SIGKILL and waits for it.
func (p *proxyProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// health is the proxy's /healthz.
type proxyHealth struct {
	Status      string `json:"status"`
	Ledger      string `json:"ledger"`
	SpoolFacts  int64  `json:"spool_facts"`
	HeldTurns   int64  `json:"held_turns"`
	DeadLetters int64  `json:"dead_letters"`
}

func (p *proxyProc) health() (proxyHealth, error) {
	var h proxyHealth
	resp, err := http.Get(p.url + "/healthz")
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&h)
	return h, err
}

// waitDrained waits until the proxy's spool has handed every fact to the
// ledger (which acknowledges a fact once Kafka holds it).
func (p *proxyProc) waitDrained(t *testing.T, d time.Duration) {
	t.Helper()
	var last proxyHealth
	var lastErr error
	defer func() {
		if t.Failed() {
			t.Logf("last /healthz %+v, %v", last, lastErr)
		}
	}()
	testenv.CheckFor(t, d, "the proxy's spool drains", func() bool {
		h, err := p.health()
		if err != nil {
			lastErr = err
			return false
		}
		if h.DeadLetters > 0 {
			t.Fatalf("the ledger refused %d of the proxy's facts: %+v", h.DeadLetters, h)
		}
		last = h
		return h.SpoolFacts == 0 && h.HeldTurns == 0 && h.Ledger == "ok"
	})
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// chatHarness is an agent harness's side of one attempt: the conversation
// so far, sent whole with every request, as OpenAI-compatible clients do.
type chatHarness struct {
	base     string // http://proxy/r/{run}/a/{attempt}/v1
	messages []map[string]any
	client   *http.Client
	// received are the answers that arrived whole, in order; failed counts
	// requests whose answer did not (each may have been recorded).
	received []string
	failed   int
}

// turnOptions shape one request.
type turnOptions struct {
	stream    bool
	maxTokens int
	ignoreEOS bool
	// firstChunk, for a streamed turn, runs when the first chunk arrived.
	firstChunk func()
}

// ask sends the conversation and returns the assistant's text; an error
// means the answer did not arrive whole.
func (h *chatHarness) ask(ctx context.Context, o turnOptions) (string, error) {
	body := map[string]any{"messages": h.messages, "max_tokens": o.maxTokens, "temperature": 0, "stream": o.stream}
	if o.ignoreEOS {
		body["ignore_eos"] = true
	}
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/chat/completions", bytes.NewReader(raw))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	if !o.stream {
		var ans struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
			return "", err
		}
		if len(ans.Choices) != 1 || ans.Choices[0].FinishReason == "" {
			return "", fmt.Errorf("an answer without one finished choice: %+v", ans)
		}
		return ans.Choices[0].Message.Content, nil
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	first := true
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return text.String(), nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return "", fmt.Errorf("chunk %q: %w", data, err)
		}
		if len(chunk.Error) > 0 {
			return "", fmt.Errorf("the stream ended with an error: %s", chunk.Error)
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
		}
		if first && o.firstChunk != nil {
			o.firstChunk()
		}
		first = false
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("the stream ended without [DONE]")
}

// converse runs turns 0..n-1, each a new user message and the answer,
// retrying a request until its answer arrives whole (or ctx ends), and
// calls after(i) once turn i's answer arrived; after returning false ends
// the conversation there.
func (h *chatHarness) converse(ctx context.Context, n int, opts func(i int) turnOptions, after func(i int) bool) error {
	for i := range n {
		h.messages = append(h.messages, map[string]any{"role": "user", "content": fmt.Sprintf("step %d", i)})
		for {
			text, err := h.ask(ctx, opts(i))
			if err == nil {
				h.messages = append(h.messages, map[string]any{"role": "assistant", "content": text})
				h.received = append(h.received, text)
				break
			}
			h.failed++
			if ctx.Err() != nil {
				return fmt.Errorf("turn %d: %w (last error: %v)", i, ctx.Err(), err)
			}
			// A harness's retry: the proxy is restarting, or the engine busy.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		if after != nil && !after(i) {
			return nil
		}
	}
	return nil
}

// ledgerTurns reads the run's facts from dev's broker and checks that the
// proxy's turns of the attempt arrived once each: every copy of a fact id
// has the same bytes (a resend the fold drops), no two facts name the same
// turn, and the turns are numbered 0..n-1 without a gap. It returns them
// in turn order.
func ledgerTurns(t *testing.T, kafkaAddr, run, attempt string) []*events.TurnGenerated {
	t.Helper()
	kc := kafkalog.Config{Brokers: []string{kafkaAddr}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	copies := map[string][]byte{}
	resent := 0
	byTurn := map[int]*events.TurnGenerated{}
	err := kafkalog.ReadAll(ctx, kc, kc.FactsTopic(), func(m kafkalog.Message) error {
		ev, err := events.Decode(m.Value)
		if err != nil {
			return err
		}
		if ev.Run != run {
			return nil
		}
		if prev, ok := copies[ev.ID]; ok {
			if !bytes.Equal(prev, m.Value) {
				t.Errorf("fact %s is in the log twice with different bytes:\n%s\n%s", ev.ID, tailString(string(prev), 300), tailString(string(m.Value), 300))
			} else {
				resent++
			}
			return nil
		}
		copies[ev.ID] = bytes.Clone(m.Value)
		if _, ok := ev.Data.(*events.VocabularyRegistered); ok {
			// The run's vocabulary, registered once in the background
			// (docs/design.md §19.7): a resend has the same id and bytes.
			return nil
		}
		tg, ok := ev.Data.(*events.TurnGenerated)
		if !ok {
			t.Errorf("fact %s: type %s; the proxy wrote only turns and the vocabulary here", ev.ID, ev.Type)
			return nil
		}
		if tg.Attempt != attempt {
			t.Errorf("fact %s: attempt %q, want %q", ev.ID, tg.Attempt, attempt)
		}
		if other, ok := byTurn[tg.Turn]; ok {
			t.Errorf("turn %d is in the ledger twice, as two facts: texts %q and %q", tg.Turn, other.Text, tg.Text)
		}
		byTurn[tg.Turn] = tg
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if resent > 0 {
		t.Logf("%d record(s) were resent after a crash: the same fact id and bytes, which the fold counts once", resent)
	}
	turns := make([]*events.TurnGenerated, len(byTurn))
	for n, tg := range byTurn {
		if n < 0 || n >= len(byTurn) {
			t.Fatalf("turn numbers %v are not 0..%d without a gap", keys(byTurn), len(byTurn)-1)
		}
		turns[n] = tg
	}
	return turns
}

func keys[V any](m map[int]V) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkReceivedRecorded checks that every answer the harness received
// whole is a turn of the ledger, in order, and that the ledger holds at
// most one more turn per request whose answer was lost (the proxy may
// have recorded it before the crash cut the answer).
func checkReceivedRecorded(t *testing.T, h *chatHarness, turns []*events.TurnGenerated) {
	t.Helper()
	if len(turns) < len(h.received) || len(turns) > len(h.received)+h.failed {
		t.Errorf("%d turns in the ledger; the harness received %d answers whole and lost %d requests, so want %d to %d",
			len(turns), len(h.received), h.failed, len(h.received), len(h.received)+h.failed)
	}
	j := 0
	for i, text := range h.received {
		// The ledger holds no NUL character (the tiny random model emits
		// byte 0 now and then): the proxy leaves them out of the text and
		// counts them in text_cut; the ids keep them.
		text = strings.ReplaceAll(text, "\x00", "")
		for j < len(turns) && turns[j].Text != text {
			j++
		}
		if j == len(turns) {
			t.Fatalf("answer %d (%q), received whole by the harness, is not among the ledger's turns after the previous one", i, text)
		}
		j++
	}
}

// engineUpstream starts llama-server with the tiny model, with room for
// a long conversation: a harness that keeps going for a minute without
// the ledger reaches thousands of tokens (2,048 a slot is too few).
func engineUpstream(t *testing.T) string {
	t.Helper()
	return testenv.StartTinyLlama(t, "-c", "32768").URL
}

// TestProxyKill9MidConversation kills the proxy with SIGKILL twice in one
// conversation, once right after an answer arrived (its turn in the spool,
// perhaps not yet in the ledger) and once in the middle of a streamed
// answer, and restarts it on the same spool each time. Every answer the
// harness received whole is in the ledger once, no turn twice, the turns
// numbered without a gap.
func TestProxyKill9MidConversation(t *testing.T) {
	upstream := engineUpstream(t)
	bin := buildBinary(t)
	dev := startDevProc(t, bin, t.TempDir(), freeAddr(t), freeAddr(t))
	spool, listen := t.TempDir(), freeAddr(t)
	const run, attempt = "proxy-kill9", "g-0/a-0"
	p := startProxyProc(t, bin, listen, upstream, dev.url, spool)

	h := &chatHarness{base: "http://" + listen + "/r/" + run + "/a/g-0%2Fa-0/v1", client: &http.Client{Timeout: time.Minute}}
	const turns, killAfter, killDuring = 10, 3, 6
	kill, killed := make(chan string), make(chan struct{})
	duringDone := false // the kill mid-stream happens once, not on the retry
	opts := func(i int) turnOptions {
		o := turnOptions{stream: i%2 == 1, maxTokens: 8}
		if i == killDuring {
			// Long enough that the kill lands while tokens still flow.
			o.stream, o.maxTokens, o.ignoreEOS = true, 200, true
			if !duringDone {
				o.firstChunk = func() {
					duringDone = true
					kill <- fmt.Sprintf("during turn %d's stream", killDuring)
					<-killed
				}
			}
		}
		return o
	}
	after := func(i int) bool {
		if i == killAfter {
			kill <- fmt.Sprintf("right after turn %d's answer", killAfter)
			<-killed
		}
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.converse(ctx, turns, opts, after) }()
	kills := 0
	for finished := false; !finished; {
		select {
		case when := <-kill:
			p.kill()
			kills++
			t.Logf("proxy killed -9 %s", when)
			killed <- struct{}{}
			p = startProxyProc(t, bin, listen, upstream, dev.url, spool)
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		}
	}
	if kills != 2 {
		t.Fatalf("%d kills, want 2", kills)
	}
	p.waitDrained(t, 2*time.Minute)
	got := ledgerTurns(t, dev.kafkaAddr, run, attempt)
	checkReceivedRecorded(t, h, got)
	t.Logf("%d answers received whole, %d requests lost to the kills, %d turns in the ledger", len(h.received), h.failed, len(got))
}

// TestProxyLedgerDown takes the ledger away (kill -9 of `rolloutledger
// dev`) for a minute in the middle of a conversation: the harness keeps
// getting answers, /healthz says the ledger is unreachable, and when the
// ledger is back every turn arrives once. -short keeps it away 15 s.
func TestProxyLedgerDown(t *testing.T) {
	upstream := engineUpstream(t)
	bin := buildBinary(t)
	data, addr, kafkaAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	dev := startDevProc(t, bin, data, addr, kafkaAddr)
	listen := freeAddr(t)
	const run, attempt = "proxy-ledger-down", "g-0/a-0"
	p := startProxyProc(t, bin, listen, upstream, dev.url, t.TempDir())
	away := time.Minute
	if testing.Short() {
		away = 15 * time.Second
	}

	h := &chatHarness{base: "http://" + listen + "/r/" + run + "/a/g-0%2Fa-0/v1", client: &http.Client{Timeout: time.Minute}}
	progress := make(chan int, 64)
	ctx, cancel := context.WithTimeout(context.Background(), away+4*time.Minute)
	defer cancel()
	opts := func(i int) turnOptions { return turnOptions{stream: i%2 == 0, maxTokens: 8} }
	// The harness paces itself: a turn, then a tool's worth of waiting,
	// until told to stop after its next answer.
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- h.converse(ctx, 300, opts, func(i int) bool {
			progress <- i
			select {
			case <-stop:
				return false
			case <-time.After(time.Second):
				return true
			}
		})
	}()
	waitTurn := func(want int) int {
		t.Helper()
		for {
			select {
			case i := <-progress:
				if i >= want {
					return i
				}
			case err := <-done:
				t.Fatalf("the harness stopped early: %v", err)
			case <-time.After(2 * time.Minute):
				t.Fatalf("no answer for turn %d within 2 minutes", want)
			}
		}
	}
	before := waitTurn(2)
	if err := dev.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = dev.cmd.Wait()
	downAt := time.Now()
	t.Logf("ledger killed after turn %d", before)
	sawDown := false
	reached := 0
	for time.Since(downAt) < away {
		select {
		case i := <-progress:
			reached = i
		case err := <-done:
			t.Fatalf("the harness stopped while the ledger was away: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if hl, err := p.health(); err == nil && hl.Ledger == "unreachable" && hl.SpoolFacts > 0 {
			sawDown = true
		}
	}
	if reached <= before+2 {
		t.Errorf("the harness got answers up to turn %d in %v without the ledger, from turn %d: want it to keep working", reached, away, before)
	}
	if !sawDown {
		t.Error("/healthz never said the ledger was unreachable with facts waiting in the spool")
	}
	dev = startDevProc(t, bin, data, addr, kafkaAddr)
	t.Logf("ledger back after %v; the harness reached turn %d meanwhile", time.Since(downAt).Round(time.Second), reached)
	waitTurn(reached + 2)
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h.failed > 0 {
		t.Errorf("%d requests failed; the proxy should answer whether the ledger is there or not", h.failed)
	}
	p.waitDrained(t, 2*time.Minute)
	got := ledgerTurns(t, dev.kafkaAddr, run, attempt)
	if len(got) != len(h.received) {
		t.Errorf("%d turns in the ledger, the harness received %d answers", len(got), len(h.received))
	}
	checkReceivedRecorded(t, h, got)
	t.Logf("%d answers received, %d turns in the ledger", len(h.received), len(got))
}
