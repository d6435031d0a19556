package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rolloutledger/rolloutledger/services/proxy"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// The proxy figures (docs/capture.md): what `rolloutledger proxy` adds to
// an agent's requests, measured against the same llama-server (the tiny
// random model of scripts/engine) asked the same requests directly,
// interleaved so a noisy machine moves both sides together; and the turns
// per second it sustains with its spool on, every turn delivered to a
// ledger (the in-process stack on the bench's Kafka).

// GroupProxy is the proxy's group of figures.
const GroupProxy = "proxy"

// engineHint is how a developer gets the engine and its models.
const engineHint = `scripts/engine/build.sh && eval "$(scripts/engine/models.sh)"`

// proxySizes are a run's request counts and the sustained load's length.
type proxySizes struct {
	whole, streams, workers int
	sustain                 time.Duration
}

func (e *env) proxySizes() proxySizes {
	if e.o.Short {
		return proxySizes{whole: 10, streams: 4, workers: 2, sustain: 2 * time.Second}
	}
	return proxySizes{whole: 200, streams: 40, workers: 8, sustain: 10 * time.Second}
}

// engineFiles finds llama-server and the tiny model as the tests do:
// $LLAMA_SERVER and $ROLLOUTLEDGER_TINY_GGUF, else where scripts/engine
// caches them. missing says what is not there.
func engineFiles() (bin, model, missing string) {
	cache := os.Getenv("ROLLOUTLEDGER_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "rolloutledger")
	}
	bin = os.Getenv("LLAMA_SERVER")
	if bin == "" {
		bin = filepath.Join(cache, "engine", "llama.cpp-0.3.36", "llama-server")
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", "", fmt.Sprintf("no llama-server executable at %s ($LLAMA_SERVER)", bin)
	}
	model = os.Getenv("ROLLOUTLEDGER_TINY_GGUF")
	if model == "" {
		script, err := readUp(filepath.Join("scripts", "engine", "tiny_gguf.py"))
		if err != nil {
			return "", "", "scripts/engine/tiny_gguf.py not found (run inside the repository, or set $ROLLOUTLEDGER_TINY_GGUF)"
		}
		sum := sha256.Sum256(script)
		model = filepath.Join(cache, "engine", "models", "tiny-llama-"+hex.EncodeToString(sum[:])[:12]+".gguf")
	}
	if st, err := os.Stat(model); err != nil || st.Size() == 0 {
		return "", "", fmt.Sprintf("no tiny model at %s ($ROLLOUTLEDGER_TINY_GGUF)", model)
	}
	return bin, model, ""
}

// readUp reads rel from the working directory or the nearest parent that
// has it (the repository's root, from a package's test).
func readUp(rel string) ([]byte, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err == nil {
			return b, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, err
		}
		dir = parent
	}
}

// engineProc is a llama-server of the benchmark's own.
type engineProc struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
	logs bytes.Buffer
	mu   sync.Mutex
}

func (p *engineProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

func (p *engineProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return tail(p.logs.Bytes())
}

func (p *engineProc) stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

func startEngine(ctx context.Context, bin, model string, slots int) (*engineProc, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p := &engineProc{url: "http://127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{})}
	p.cmd = exec.Command(bin, "-m", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"-c", strconv.Itoa(2048*slots), "-np", strconv.Itoa(slots), "-t", "1", "--jinja",
		// One compute thread: the other core is the proxy's, the ledger's
		// and the client's, as a GPU engine leaves the host's cores to
		// them. With -t 2 on two cores every other thread's work stalls
		// one of the engine's two (they meet at a barrier each step), so
		// the proxy's figures measured the machine's contention more than
		// the proxy; the engine alone is also faster so (8.3 ms against
		// 11.2 for the bench's chat request, same run).
		// The proxy asks /apply-template and /tokenize beside each chat
		// generation: the engine needs HTTP threads for both (its default,
		// -np + 2, queues them behind the generations).
		"--threads-http", strconv.Itoa(4*slots))
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := http.Get(p.url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("llama-server exited before it was ready:\n%s", p.output())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("llama-server not healthy after 2 minutes:\n%s", p.output())
		}
	}
}

func proxyFigures(ctx context.Context, e *env) ([]*Figure, error) {
	sz := e.proxySizes()
	cmd := e.cmd(GroupProxy)
	wholeNote := fmt.Sprintf("%d non-streaming chat requests per run (8 tokens, ignore_eos, cache_prompt off, each a new attempt), each sent once straight to llama-server (tiny model) and once through the proxy, the order alternating", sz.whole)
	directP50 := &Figure{Name: "chat, not streamed: latency p50, straight to llama-server", Unit: "ms", Command: cmd, Note: wholeNote}
	proxyP50 := &Figure{Name: "chat, not streamed: latency p50, through the proxy", Unit: "ms", Command: cmd}
	addedP50 := &Figure{Name: "chat, not streamed: added latency p50", Unit: "ms", Command: cmd,
		Note: "p50 through the proxy minus p50 straight to the engine; includes the spool's fsync of the held turn before the answer's last byte (the prompt's ids are asked of the engine's /apply-template and /tokenize after the answer, docs/design.md §19.6)"}
	addedP99 := &Figure{Name: "chat, not streamed: added latency p99", Unit: "ms", Command: cmd, Note: "p99 through the proxy minus p99 straight to the engine"}
	// Where the added time goes: the proxy's own phase timers
	// (rolloutledger_proxy_phase_seconds) over the same requests, as means.
	splitNote := "mean per request through the proxy over the same requests, from its rolloutledger_proxy_phase_seconds"
	splitHold := &Figure{Name: "chat, not streamed: added, the held turn's synced write (mean)", Unit: "ms", Command: cmd,
		Note: splitNote + ": the request and the answer as they came, written with sync before the answer's last byte"}
	splitIDs := &Figure{Name: "chat, not streamed: /apply-template + /tokenize after the answer (mean)", Unit: "ms", Command: cmd, Note: splitNote + ": the engine's work for the prompt's ids, which the client no longer waits for"}
	splitBuild := &Figure{Name: "chat, not streamed: building the turn's facts after the answer (mean)", Unit: "ms", Command: cmd, Note: splitNote + ": facts built, encoded and decoded again as the ledger will"}
	splitSpool := &Figure{Name: "chat, not streamed: the facts' spool commit after the answer (mean)", Unit: "ms", Command: cmd, Note: splitNote + ": the synced Pebble commit of the facts, removing the held turn"}
	splitHop := &Figure{Name: "chat, not streamed: added, forwarding (mean)", Unit: "ms", Command: cmd,
		Note: "mean through the proxy minus mean straight, minus the held write: reading and editing the request and the answer, and the extra HTTP hop"}
	streamNote := fmt.Sprintf("%d streamed chat requests per run (32 tokens, ignore_eos), straight and through the proxy, interleaved; a chunk is an SSE data event as the client parses it", sz.streams)
	ttfcDirect := &Figure{Name: "stream: time to first chunk p50, straight to llama-server", Unit: "ms", Command: cmd, Note: streamNote}
	ttfcAdded := &Figure{Name: "stream: time to first chunk p50, added by the proxy", Unit: "ms", Command: cmd}
	gapDirect := &Figure{Name: "stream: delay between chunks p50, straight to llama-server", Unit: "ms", Command: cmd}
	gapAdded := &Figure{Name: "stream: delay between chunks p50, added by the proxy", Unit: "ms", Command: cmd,
		Note: "the proxy forwards each event as it arrives; buffering would show here as bursts (a smaller median gap and a larger time to first chunk)"}
	chunks := &Figure{Name: "stream: chunks through the proxy per chunk straight", Unit: "ratio", Command: cmd,
		Note: "the same requests' SSE events counted on both sides (the proxy drops only the usage-only chunk it asked for itself)"}
	// The engine's own slowdown: on a CPU engine the tokenizer calls the
	// proxy makes for a chat turn's prompt ids compete with generation.
	sideAdded := &Figure{Name: "chat, not streamed: added p50 straight, with /apply-template + /tokenize alongside", Unit: "ms", Command: cmd,
		Note: "the same chat requests straight to the engine while a client makes the calls the proxy makes for the prompt's ids, minus plain straight: the engine slowed by its own tokenizer calls (on a GPU engine the tokenizer runs beside generation, not on its cores)"}
	tokenNote := fmt.Sprintf("%d non-streaming token-in /v1/completions requests per run (the prompt as ids, 8 tokens, ignore_eos, cache_prompt off, each a new attempt), straight and through the proxy, alternating: the client's ids are the prompt's, so the proxy asks the engine nothing else", sz.whole)
	tokenDirect := &Figure{Name: "completions, token-in, not streamed: latency p50, straight to llama-server", Unit: "ms", Command: cmd, Note: tokenNote}
	tokenAdded := &Figure{Name: "completions, token-in, not streamed: added latency p50", Unit: "ms", Command: cmd,
		Note: "p50 through the proxy minus p50 straight; the proxy's own work: reading and editing the request and answer, the facts, the spool's fsync, the extra hop"}
	longNote := fmt.Sprintf("%d token-in requests per run as above, each generating %d tokens, a real agent turn's median length: what the proxy does per token (reading each log-prob entry, the ids in the facts and the spool) shows here", max(sz.whole/4, 4), realTurnTokens)
	longDirect := &Figure{Name: fmt.Sprintf("completions, token-in, %d tokens: latency p50, straight to llama-server", realTurnTokens), Unit: "ms", Command: cmd, Note: longNote}
	longAdded := &Figure{Name: fmt.Sprintf("completions, token-in, %d tokens: added latency p50", realTurnTokens), Unit: "ms", Command: cmd,
		Note: "p50 through the proxy minus p50 straight, for answers of a real turn's length"}
	engineNote := "the same requests straight to the engine with the log-probs the proxy asks for on the client's behalf (logprobs: 1), minus plain straight: the engine's own cost of computing and sending them, part of the added latency above"
	tokenEngine := &Figure{Name: "completions, token-in, not streamed: added p50 straight, with the log-probs the proxy asks for", Unit: "ms", Command: cmd, Note: engineNote}
	longEngine := &Figure{Name: fmt.Sprintf("completions, token-in, %d tokens: added p50 straight, with the log-probs the proxy asks for", realTurnTokens), Unit: "ms", Command: cmd, Note: engineNote}
	longOwn := &Figure{Name: fmt.Sprintf("completions, token-in, %d tokens: the proxy's time after the engine's answer (mean)", realTurnTokens), Unit: "ms", Command: cmd,
		Note: "from the proxy's rolloutledger_proxy_added_seconds: the engine's last byte to the client's (reading and stripping the answer, the facts, the synced spool commit); the difference of medians above also holds the request's side and the hop, and varies run to run with the engine's time"}
	direct := &Figure{Name: "sustained requests/s straight to llama-server", Unit: "req/s", Command: cmd}
	turns := &Figure{Name: "sustained turns/s through the proxy, spool on", Unit: "turns/s", Command: cmd}
	figs := []*Figure{directP50, proxyP50, addedP50, addedP99, splitHold, splitIDs, splitBuild, splitSpool, splitHop, sideAdded, tokenDirect, tokenAdded, tokenEngine, longDirect, longAdded, longEngine, longOwn, ttfcDirect, ttfcAdded, gapDirect, gapAdded, chunks, direct, turns}

	bin, model, missing := engineFiles()
	if missing != "" {
		if os.Getenv("CI") == "true" {
			return nil, fmt.Errorf("CI=true and the inference engine is missing: %s", missing)
		}
		for _, f := range figs {
			f.Skipped, f.Note = true, "skipped: "+missing+" (run: "+engineHint+")"
		}
		return figs, nil
	}
	eng, err := startEngine(ctx, bin, model, sz.workers)
	if err != nil {
		return nil, err
	}
	defer eng.stop()
	dir, err := os.MkdirTemp("", "rolloutledger-bench-proxy-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	led, err := stack.Start(ctx, stack.Options{Addr: "127.0.0.1:0", Kafka: e.kafka("proxy", 3), DataDir: filepath.Join(dir, "ledger")})
	if err != nil {
		return nil, err
	}
	defer led.Shutdown(context.Background())
	px, err := proxy.New(proxy.Options{Upstreams: []string{eng.url}, Engine: proxy.EngineLlamaCPP, Ledger: led.URL(), SpoolDir: filepath.Join(dir, "spool")})
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	px.Start(pctx)
	defer px.Close()
	if err := px.Probe(ctx); err != nil {
		e.log.Warn("proxy: engine probe", "err", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: px.Handler()}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	proxyURL := "http://" + ln.Addr().String()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	run := strings.ReplaceAll(e.prefix, "_", "-") + "-proxy"
	pb := &proxyBench{client: client, engine: eng.url, proxy: proxyURL, run: run}

	for r := range e.o.Runs {
		e.log.Info("proxy: latency", "run", r+1)
		before, err := phaseTotals(ctx, client, proxyURL)
		if err != nil {
			return nil, err
		}
		d, p, err := pb.pairs(ctx, sz.whole, "/v1/chat/completions", fmt.Sprintf("whole-%d", r), func(i int) []byte {
			return chatBody(fmt.Sprintf("request %d of run %d: say something", i, r), 8, false)
		})
		if err != nil {
			return nil, err
		}
		directP50.Runs = append(directP50.Runs, quantile(d, 0.5))
		proxyP50.Runs = append(proxyP50.Runs, quantile(p, 0.5))
		addedP50.Runs = append(addedP50.Runs, quantile(p, 0.5)-quantile(d, 0.5))
		addedP99.Runs = append(addedP99.Runs, quantile(p, 0.99)-quantile(d, 0.99))
		after, err := phaseTotals(ctx, client, proxyURL)
		if err != nil {
			return nil, err
		}
		mean := func(phase string) float64 {
			n := after[phase][1] - before[phase][1]
			return 1000 * (after[phase][0] - before[phase][0]) / max(n, 1)
		}
		splitHold.Runs = append(splitHold.Runs, mean("hold"))
		splitIDs.Runs = append(splitIDs.Runs, mean("prompt_ids"))
		splitBuild.Runs = append(splitBuild.Runs, mean("build"))
		splitSpool.Runs = append(splitSpool.Runs, mean("spool_commit"))
		splitHop.Runs = append(splitHop.Runs, avg(p)-avg(d)-mean("hold"))

		e.log.Info("proxy: the engine's tokenizer calls alongside", "run", r+1)
		var plain, side []float64
		for i := range sz.whole {
			msg := fmt.Sprintf("request %d of run %d: say something", i, r)
			body := chatBody(msg, 8, false)
			a, err := pb.whole(ctx, pb.engine, body)
			if err != nil {
				return nil, err
			}
			b, err := pb.wholeWithTokenizer(ctx, body, msg)
			if err != nil {
				return nil, err
			}
			plain, side = append(plain, a), append(side, b)
		}
		sideAdded.Runs = append(sideAdded.Runs, quantile(side, 0.5)-quantile(plain, 0.5))

		e.log.Info("proxy: token-in completions", "run", r+1)
		prompt, err := pb.tokenize(ctx, "<|im_start|>user\nsay something<|im_end|>\n<|im_start|>assistant\n")
		if err != nil {
			return nil, err
		}
		tokenIn := func(n int, extra ...any) func(int) []byte {
			req := map[string]any{"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": true, "cache_prompt": false}
			for k := 0; k+1 < len(extra); k += 2 {
				req[extra[k].(string)] = extra[k+1]
			}
			b, _ := json.Marshal(req)
			return func(int) []byte { return b }
		}
		// The engine's own part: the same requests straight, with and
		// without the log-probs the proxy asks for on the client's behalf.
		engineLogprobs := func(n, count int) (float64, error) {
			plain, asked := tokenIn(n), tokenIn(n, "logprobs", 1)
			a, b, err := pb.alternate(ctx, count, "/v1/completions", func(i, side int) (string, []byte) {
				if side == 0 {
					return pb.engine, plain(i)
				}
				return pb.engine, asked(i)
			})
			return quantile(b, 0.5) - quantile(a, 0.5), err
		}
		td, tp, err := pb.pairs(ctx, sz.whole, "/v1/completions", fmt.Sprintf("token-in-%d", r), tokenIn(8))
		if err != nil {
			return nil, err
		}
		tokenDirect.Runs = append(tokenDirect.Runs, quantile(td, 0.5))
		tokenAdded.Runs = append(tokenAdded.Runs, quantile(tp, 0.5)-quantile(td, 0.5))
		lpAdded, err := engineLogprobs(8, sz.whole)
		if err != nil {
			return nil, err
		}
		tokenEngine.Runs = append(tokenEngine.Runs, lpAdded)
		e.log.Info("proxy: token-in completions of a real turn's length", "run", r+1, "tokens", realTurnTokens)
		nLong := max(sz.whole/4, 4)
		before, err = phaseTotals(ctx, client, proxyURL)
		if err != nil {
			return nil, err
		}
		ld, lp, err := pb.pairs(ctx, nLong, "/v1/completions", fmt.Sprintf("token-in-long-%d", r), tokenIn(realTurnTokens))
		if err != nil {
			return nil, err
		}
		longDirect.Runs = append(longDirect.Runs, quantile(ld, 0.5))
		longAdded.Runs = append(longAdded.Runs, quantile(lp, 0.5)-quantile(ld, 0.5))
		if after, err = phaseTotals(ctx, client, proxyURL); err != nil {
			return nil, err
		}
		longOwn.Runs = append(longOwn.Runs, mean("added:completions"))
		if lpAdded, err = engineLogprobs(realTurnTokens, nLong); err != nil {
			return nil, err
		}
		longEngine.Runs = append(longEngine.Runs, lpAdded)

		e.log.Info("proxy: streams", "run", r+1)
		var dt, pt, dg, pg []float64
		var dn, pn int
		for i := range sz.streams {
			body := chatBody(fmt.Sprintf("stream %d of run %d: tell a story", i, r), 32, true)
			via := pb.attemptURL(fmt.Sprintf("stream-%d-%d", r, i))
			order := []string{pb.engine, via}
			if i%2 == 1 {
				order = []string{via, pb.engine}
			}
			for _, base := range order {
				s, err := pb.stream(ctx, base, body)
				if err != nil {
					return nil, err
				}
				if base == pb.engine {
					dt, dg, dn = append(dt, s.first), append(dg, s.gaps...), dn+s.chunks
				} else {
					pt, pg, pn = append(pt, s.first), append(pg, s.gaps...), pn+s.chunks
				}
			}
		}
		ttfcDirect.Runs = append(ttfcDirect.Runs, quantile(dt, 0.5))
		ttfcAdded.Runs = append(ttfcAdded.Runs, quantile(pt, 0.5)-quantile(dt, 0.5))
		gapDirect.Runs = append(gapDirect.Runs, quantile(dg, 0.5))
		gapAdded.Runs = append(gapAdded.Runs, quantile(pg, 0.5)-quantile(dg, 0.5))
		chunks.Runs = append(chunks.Runs, float64(pn)/float64(max(dn, 1)))

		e.log.Info("proxy: sustained load", "run", r+1)
		n, took, err := pb.sustain(ctx, pb.engine, nil, sz, r)
		if err != nil {
			return nil, err
		}
		direct.Runs = append(direct.Runs, float64(n)/took.Seconds())
		n, took, err = pb.sustain(ctx, "", pb.attemptURL, sz, r)
		if err != nil {
			return nil, err
		}
		drained, err := waitSpool(ctx, px, 2*time.Minute)
		if err != nil {
			return nil, err
		}
		turns.Runs = append(turns.Runs, float64(n)/took.Seconds())
		turns.Note = fmt.Sprintf("%d attempts at once for %v, each a conversation of up to 16 turns (8 tokens each) then a new attempt; every turn synced to the spool before its answer's last byte and delivered to the ledger (in-process stack on the bench's Kafka): the spool was empty %v after the load ended", sz.workers, sz.sustain, drained.Round(time.Millisecond))
		direct.Note = "the same load sent straight to the engine (-np " + strconv.Itoa(sz.workers) + "); the proxy's rate is set against it"
	}
	addedP50.link = func(map[string]*Figure) { addedP50.goalAtMost(1, "<= 1 ms") }
	tokenAdded.link = func(map[string]*Figure) { tokenAdded.goalAtMost(1, "<= 1 ms") }
	chunks.link = func(map[string]*Figure) { chunks.goalAtLeast(1, "= 1 (no chunk held back)") }
	turns.link = func(map[string]*Figure) { turns.against(direct, 0.9, ">= 90% of straight") }
	return figs, nil
}

// proxyBench sends the figures' requests.
type proxyBench struct {
	client             *http.Client
	engine, proxy, run string
}

func (pb *proxyBench) attemptURL(attempt string) string {
	return pb.proxy + "/r/" + pb.run + "/a/" + attempt
}

func chatBody(user string, tokens int, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{
		"messages": []map[string]string{{"role": "user", "content": user}}, "max_tokens": tokens,
		"temperature": 0, "ignore_eos": true, "cache_prompt": false, "stream": stream,
	})
	return b
}

func (pb *proxyBench) post(ctx context.Context, base string, body []byte) (*http.Response, error) {
	return pb.postTo(ctx, base, "/v1/chat/completions", body)
}

func (pb *proxyBench) postTo(ctx context.Context, base, route string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+route, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	// llama-server closes a kept-alive connection after a number of
	// requests, which a POST on it meets as EOF: marked idempotent (these
	// requests only generate), the transport sends it again on a new one.
	req.Header["Idempotency-Key"] = nil // present, so idempotent; empty, so not sent
	resp, err := pb.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s: %s", base, resp.Status, b)
	}
	return resp, nil
}

// realTurnTokens is the completion length of the bench's long token-in
// requests: the median completion of the agent turns `simulate` draws.
const realTurnTokens = 380

// pairs sends n requests to route, each once straight to the engine and
// once through the proxy (attempt prefix-i), and returns both sides' times
// in ms.
func (pb *proxyBench) pairs(ctx context.Context, n int, route, prefix string, body func(i int) []byte) (straight, through []float64, err error) {
	return pb.alternate(ctx, n, route, func(i, side int) (string, []byte) {
		if side == 0 {
			return pb.engine, body(i)
		}
		return pb.attemptURL(fmt.Sprintf("%s-%d", prefix, i)), body(i)
	})
}

// alternate sends n pairs of requests to route, side 0 and side 1 of pair
// i as send(i, side) says, the order alternating so that neither side
// always goes first, and returns each side's times in ms.
func (pb *proxyBench) alternate(ctx context.Context, n int, route string, send func(i, side int) (base string, body []byte)) (zero, one []float64, err error) {
	for i := range n {
		var ms [2]float64
		for k := range 2 {
			side := (k + i) % 2
			base, body := send(i, side)
			if ms[side], err = pb.wholeAt(ctx, base, route, body); err != nil {
				return nil, nil, err
			}
		}
		zero, one = append(zero, ms[0]), append(one, ms[1])
	}
	return zero, one, nil
}

// whole times one non-streaming chat request to its last byte, in ms.
func (pb *proxyBench) whole(ctx context.Context, base string, body []byte) (float64, error) {
	return pb.wholeAt(ctx, base, "/v1/chat/completions", body)
}

// wholeWithTokenizer is whole straight to the engine while the calls the
// proxy makes for a chat turn's prompt ids run beside it.
func (pb *proxyBench) wholeWithTokenizer(ctx context.Context, body []byte, user string) (float64, error) {
	done := make(chan error, 1)
	go func() {
		var tpl struct {
			Prompt string `json:"prompt"`
		}
		if err := pb.engineJSON(ctx, "/apply-template", map[string]any{"messages": []map[string]string{{"role": "user", "content": user}}}, &tpl); err != nil {
			done <- err
			return
		}
		_, err := pb.tokenize(ctx, tpl.Prompt)
		done <- err
	}()
	ms, err := pb.whole(ctx, pb.engine, body)
	if serr := <-done; err == nil {
		err = serr
	}
	return ms, err
}

// tokenize is the engine's ids of text, special tokens parsed.
func (pb *proxyBench) tokenize(ctx context.Context, text string) ([]int32, error) {
	var tok struct {
		Tokens []int32 `json:"tokens"`
	}
	err := pb.engineJSON(ctx, "/tokenize", map[string]any{"content": text, "add_special": true, "parse_special": true}, &tok)
	return tok.Tokens, err
}

// engineJSON posts body to one of the engine's routes and decodes its answer.
func (pb *proxyBench) engineJSON(ctx context.Context, route string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := pb.postTo(ctx, pb.engine, route, b)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// wholeAt times one non-streaming request to route to its last byte, in ms.
func (pb *proxyBench) wholeAt(ctx context.Context, base, route string, body []byte) (float64, error) {
	t0 := time.Now()
	resp, err := pb.postTo(ctx, base, route, body)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return float64(time.Since(t0).Microseconds()) / 1000, err
}

type streamTiming struct {
	first  float64   // ms to the first data event
	gaps   []float64 // ms between data events
	chunks int
}

// stream reads one SSE answer and times its events as the client sees them.
func (pb *proxyBench) stream(ctx context.Context, base string, body []byte) (streamTiming, error) {
	var s streamTiming
	t0 := time.Now()
	resp, err := pb.post(ctx, base, body)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	last := t0
	for {
		line, err := br.ReadBytes('\n')
		if bytes.HasPrefix(line, []byte("data:")) {
			now := time.Now()
			if s.chunks == 0 {
				s.first = float64(now.Sub(t0).Microseconds()) / 1000
			} else {
				s.gaps = append(s.gaps, float64(now.Sub(last).Microseconds())/1000)
			}
			last = now
			s.chunks++
		}
		if errors.Is(err, io.EOF) {
			return s, nil
		}
		if err != nil {
			return s, err
		}
	}
}

// sustain runs sz.workers conversations at once for sz.sustain, straight
// to base or through the proxy (via names an attempt's base), and counts
// the answers.
func (pb *proxyBench) sustain(ctx context.Context, base string, via func(string) string, sz proxySizes, r int) (int64, time.Duration, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, sz.workers)
	t0 := time.Now()
	end := t0.Add(sz.sustain)
	side := "direct"
	if via != nil {
		side = "proxy"
	}
	for w := range sz.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := 0; time.Now().Before(end); a++ {
				url := base
				if via != nil {
					url = via(fmt.Sprintf("sustain-%s-%d-%d-%d", side, r, w, a))
				}
				msgs := []map[string]string{}
				for turn := 0; turn < 16 && time.Now().Before(end); turn++ {
					msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("turn %d", turn)})
					body, _ := json.Marshal(map[string]any{"messages": msgs, "max_tokens": 8, "temperature": 0, "ignore_eos": true})
					resp, err := pb.post(ctx, url, body)
					if err != nil {
						errs[w] = err
						return
					}
					var ans struct {
						Choices []struct {
							Message struct {
								Content string `json:"content"`
							} `json:"message"`
						} `json:"choices"`
					}
					err = json.NewDecoder(resp.Body).Decode(&ans)
					resp.Body.Close()
					if err != nil || len(ans.Choices) == 0 {
						errs[w] = fmt.Errorf("an answer without a choice: %v", err)
						return
					}
					msgs = append(msgs, map[string]string{"role": "assistant", "content": ans.Choices[0].Message.Content})
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return n.Load(), time.Since(t0), errors.Join(errs...)
}

// waitSpool waits until the proxy's spool is empty and says how long that took.
func waitSpool(ctx context.Context, px *proxy.Server, d time.Duration) (time.Duration, error) {
	t0 := time.Now()
	for {
		waiting, dead := px.Pending()
		if dead > 0 {
			return 0, fmt.Errorf("the ledger refused %d of the proxy's facts", dead)
		}
		if waiting == 0 {
			return time.Since(t0), nil
		}
		if time.Since(t0) > d {
			return 0, fmt.Errorf("%d facts still in the proxy's spool after %v", waiting, d)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// phaseTotals reads the proxy's rolloutledger_proxy_phase_seconds and
// rolloutledger_proxy_added_seconds: each phase's (and each route's, as
// "added:<route>") sum of seconds and count.
func phaseTotals(ctx context.Context, c *http.Client, proxyURL string) (map[string][2]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string][2]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for i, suffix := range []string{"_sum", "_count"} {
			// The phases by name, and the time added by route as
			// "added:<route>".
			rest, ok := strings.CutPrefix(line, "rolloutledger_proxy_phase_seconds"+suffix+`{phase="`)
			key := ""
			if !ok {
				if rest, ok = strings.CutPrefix(line, "rolloutledger_proxy_added_seconds"+suffix+`{route="`); !ok {
					continue
				}
				key = "added:"
			}
			phase, val, ok := strings.Cut(rest, `"} `)
			if !ok {
				continue
			}
			phase = key + phase
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return nil, fmt.Errorf("proxy metrics: %q: %w", line, err)
			}
			t := out[phase]
			t[i] = v
			out[phase] = t
		}
	}
	return out, sc.Err()
}

func avg(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// quantile is the q-quantile of xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
