package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/ingest"
)

// buildBinary compiles the command once per test binary run.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rolloutledger")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type devProc struct {
	cmd       *exec.Cmd
	url       string
	kafkaAddr string
	log       *bytes.Buffer
}

func startDevProc(t *testing.T, bin, data, addr, kafkaAddr string) *devProc {
	t.Helper()
	var log bytes.Buffer
	cmd := exec.Command(bin, "dev", "--data", data, "--addr", addr, "--kafka-addr", kafkaAddr, "--partitions", "3")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &devProc{cmd: cmd, url: "http://" + addr, kafkaAddr: kafkaAddr, log: &log}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("dev output:\n%s", log.String())
		}
	})
	testenv.CheckFor(t, 30*time.Second, "dev answers /healthz", func() bool {
		resp, err := http.Get(p.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// Every event acknowledged before a kill -9 of dev is there after a restart
// on the same data directory, and a clean stop keeps them too.
func TestDevRestartKeepsAcknowledgedEvents(t *testing.T) {
	bin := buildBinary(t)
	data := t.TempDir()
	addr, kafkaAddr := freeAddr(t), freeAddr(t)
	acked := map[string]bool{}

	send := func(p *devProc, round int) {
		for i := range 5 {
			run := fmt.Sprintf("restart-%d", i)
			evs := []events.Event{events.New(run, "scheduler", time.Unix(0, 0), &events.GroupClosed{Group: fmt.Sprintf("g-%d-%d", round, i), Reason: "test"})}
			vals, _ := events.EncodeBatch(evs)
			resp, err := http.Post(p.url+"/v1/events", "application/json", bytes.NewReader(vals[0]))
			if err != nil {
				t.Fatal(err)
			}
			var r ingest.Response
			_ = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("POST: %d", resp.StatusCode)
			}
			acked[r.Events[0].ID] = true
		}
	}

	p := startDevProc(t, bin, data, addr, kafkaAddr)
	send(p, 0)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()

	p = startDevProc(t, bin, data, addr, kafkaAddr)
	send(p, 1)
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("dev after SIGINT: %v", err)
	}

	p = startDevProc(t, bin, data, addr, kafkaAddr)
	got := map[string]int{}
	kc := kafkalog.Config{Brokers: []string{p.kafkaAddr}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := kafkalog.ReadAll(ctx, kc, kc.FactsTopic(), func(m kafkalog.Message) error {
		ev, err := events.Decode(m.Value)
		if err != nil {
			return err
		}
		got[ev.ID]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for id := range acked {
		if got[id] != 1 {
			t.Errorf("acknowledged event %s: found %d times after restarts, want 1", id, got[id])
		}
	}
	if len(got) != len(acked) {
		t.Errorf("got %d distinct events, want %d", len(got), len(acked))
	}
}
