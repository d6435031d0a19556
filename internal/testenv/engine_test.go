package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestStartLlamaServerTiny starts the real engine with the tiny model,
// samples token ids through the native route, and checks the process is
// gone once the test that started it has ended.
func TestStartLlamaServerTiny(t *testing.T) {
	var url string
	t.Run("serve", func(t *testing.T) {
		s := StartTinyLlama(t)
		url = s.URL
		body, _ := json.Marshal(map[string]any{
			"prompt": []int{3, 300, 301, 302}, "n_predict": 6, "temperature": 0,
			"ignore_eos": true, "return_tokens": true, "n_probs": 1, "cache_prompt": false,
		})
		resp, err := http.Post(s.URL+"/completion", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("POST /completion: %v", err)
		}
		defer resp.Body.Close()
		var got struct {
			Tokens []int `json:"tokens"`
			Probs  []struct {
				ID int `json:"id"`
			} `json:"completion_probabilities"`
			TokensEvaluated int `json:"tokens_evaluated"`
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /completion: status %d", resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatalf("decode /completion: %v", err)
		}
		if len(got.Tokens) != 6 {
			t.Fatalf("got %d sampled ids %v, want 6", len(got.Tokens), got.Tokens)
		}
		if got.TokensEvaluated != 4 {
			t.Errorf("tokens_evaluated = %d, want the 4 prompt ids", got.TokensEvaluated)
		}
		if !strings.Contains(s.Logs(), "listening on") {
			t.Errorf("server output not captured; got %q", logTail(s.Logs(), 400))
		}
	})
	if url == "" {
		t.SkipNow() // the subtest skipped: no engine here
	}
	client := &http.Client{Timeout: time.Second}
	CheckFor(t, 10*time.Second, "llama-server still answers after its test ended", func() bool {
		resp, err := client.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	})
}

// recordingTB notes how a helper gave up on a test.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestLlamaServerMissing: without the binary a developer's test skips
// with the command that builds it, and CI fails instead.
func TestLlamaServerMissing(t *testing.T) {
	t.Setenv(LlamaServerEnv, t.TempDir()+"/no-such-llama-server")
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := &recordingTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			LlamaServerBinary(r)
		}()
		<-done
		if ci == "true" {
			if r.fatal == "" || r.skipped != "" {
				t.Errorf("CI=true: fatal %q, skipped %q; want a failure", r.fatal, r.skipped)
			}
			continue
		}
		if !strings.Contains(r.skipped, "scripts/engine/build.sh") || r.fatal != "" {
			t.Errorf("CI unset: skipped %q, fatal %q; want a skip naming scripts/engine/build.sh", r.skipped, r.fatal)
		}
	}
}
