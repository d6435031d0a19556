package faults_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// The projector's state directory is on a small tmpfs that fills up while
// a run is being folded. The projector process stops cleanly — an error
// that names the directory and the missing space, no panic — and, started
// again once space is freed, decides exactly what an undisturbed projector
// decides over the same log.
func TestProjectorDiskFull(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 && os.Getenv(inNamespaceEnv) == "" {
		// Mounting a tmpfs needs root; an unprivileged user can have it in
		// a user and mount namespace of its own, where it is root.
		if _, err := exec.LookPath("unshare"); err == nil {
			cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount", os.Args[0], "-test.run=^TestProjectorDiskFull$", "-test.v")
			cmd.Env = append(os.Environ(), inNamespaceEnv+"=1")
			out, err := cmd.CombinedOutput()
			t.Logf("in a user and mount namespace of its own:\n%s", out)
			if err == nil && strings.Contains(string(out), "--- SKIP: TestProjectorDiskFull") {
				t.Skip("skipped in its namespace")
			}
			if err != nil || !strings.Contains(string(out), "--- PASS: TestProjectorDiskFull") {
				t.Fatalf("the test in its own namespace: %v", err)
			}
			return
		}
	}
	kc := testenv.RealKafka(t)
	ctx := context.Background()
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		t.Fatal(err)
	}
	// Room for the 256 MiB the projector keeps free and its write-ahead
	// logs, which Pebble preallocates at 1.1 times a memtable (70 MiB),
	// one in use and one kept for reuse.
	disk := testenv.Tmpfs(t, 512<<20)
	spec := childSpec{Brokers: kc.Brokers, Prefix: kc.TopicPrefix, Only: []string{stack.ServiceProjector}, DataDir: disk}
	var out testenv.LogBuffer
	c := startChild(t, spec, &out)
	stateDir := filepath.Join(disk, "projector")
	testenv.CheckFor(t, 60*time.Second, "the projector opens its state", func() bool {
		return strings.Contains(out.String(), "consuming")
	})

	// Another file takes every free byte.
	filler := filepath.Join(disk, "filler")
	fill(t, filler)

	const epr = 32
	plan := generate(t, "disk-run", 31)
	url := ingestServer(t, kc, 0)
	if _, err := push(ctx, url, plan, epr, 0, nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("the projector kept running with its disk full:\n%s", out.String())
	}
	var exit *os.ProcessState
	if ee := (*exitErr)(nil); errors.As(c.err, &ee) {
		exit = ee.ProcessState
	}
	log := out.String()
	if exit == nil || exit.ExitCode() != 1 || strings.Contains(log, "panic") || strings.Contains(log, "goroutine ") {
		t.Fatalf("want exit code 1 after a clean stop, got %v:\n%s", c.err, log)
	}
	if !strings.Contains(log, "out of space") || !strings.Contains(log, stateDir) {
		t.Fatalf("the projector's error does not say the disk of %s is full:\n%s", stateDir, log)
	}
	t.Logf("stopped with: %s", lastLine(log, "child: stopped"))

	// Space returns: the projector resumes on its state.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var out2 testenv.LogBuffer
	c2 := startChild(t, spec, &out2)
	want := ledgertest.Reference(t, kc)
	got := ledgertest.WaitDecisions(t, kc, want, 90*time.Second)
	sameMeaning(t, meaning(t, got, plan.Run), meaning(t, undisturbed(t, plan, epr), plan.Run))
	c2.stop()
	if c2.err != nil {
		t.Errorf("the restarted projector: %v\n%s", c2.err, out2.String())
	}
	t.Logf("decisions after the restart: %s", countKinds(got))
}

type exitErr = exec.ExitError

// inNamespaceEnv marks the test re-run in a user and mount namespace.
const inNamespaceEnv = "ROLLOUTLEDGER_TEST_IN_NAMESPACE"

// fill writes path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

func lastLine(log, prefix string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], prefix) {
			return lines[i]
		}
	}
	return ""
}
