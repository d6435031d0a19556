package testenv

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a fresh temporary directory and
// unmounts it when the test ends: a filesystem the test can fill. Mounting
// needs root (CAP_SYS_ADMIN); without it the test skips, or fails in CI,
// where the disk-full guarantees must be checked.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rl-tmpfs-")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10)+",mode=0755", "tmpfs", dir).CombinedOutput()
	if err != nil {
		os.Remove(dir)
		Unavailable(t, "cannot mount a tmpfs on %s (needs root): %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
		os.Remove(dir)
	})
	return dir
}
