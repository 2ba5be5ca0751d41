package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/vfs"
)

// TestMergeEverySurvivesServeRestart: real processes. `writer merge
// --every` runs beside `writer serve` on its embedded etcd; serve is
// SIGKILLed, so the merge's passes fail (logged, not fatal), and it never
// takes the data directory's lock, so serve starts again at once. The
// restarted serve's etcd is found anew at a later tick and the rows
// appended after the restart reach the base; SIGTERM ends the merge
// cleanly.
func TestMergeEverySurvivesServeRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	args := []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--lease-ttl", "2s", "--flush-age", "-1s"}
	p := startServe(t, args...)
	before := batchIDs("before", 0, 30)
	postAndFlush(t, p, before, 30)

	m := spawnWriter(t, "merge", "--data-dir", dir, "--every", "200ms", "-o", "json")
	waitBaseRows(t, dir, len(before), m)
	p.kill(t)
	// Two failed ticks: serve stays down across more than one, and a merge
	// that started the embedded etcd itself would hold the lock by now.
	waitLogCount(t, m, msgMergeRetry, 2)

	p2 := startServe(t, args...) // fails at once, naming the merge, if the merge took the lock
	after := batchIDs("after", 0, 20)
	postAndFlush(t, p2, after, 50)
	waitBaseRows(t, dir, len(before)+len(after), m)
	m.signal(t, syscall.SIGTERM)
	if err := m.wait(t, 30*time.Second); err != nil {
		t.Fatalf("merge --every exited with %v after SIGTERM", err)
	}
	p2.stop(t)
	checkBaseIDs(t, dir, append(before, after...))
}

// waitBaseRows waits (bounded) until the base's readers' manifest holds n
// rows, failing if the merge process exits first.
func waitBaseRows(t *testing.T, dir string, n int, m *serveProc) {
	t.Helper()
	baseDir := filepath.Join(dir, "rollouts", "base")
	deadline := time.Now().Add(60 * time.Second)
	for {
		rm, ok, err := publish.LatestReaderManifest(vfs.Default, baseDir)
		switch {
		case err != nil:
			t.Fatalf("readers' manifest: %v", err)
		case ok && rm.Rows == int64(n):
			return
		case ok && rm.Rows > int64(n):
			t.Fatalf("the base holds %d rows; want %d", rm.Rows, n)
		case m.exited():
			t.Fatalf("merge --every exited (%v) before the base held %d rows", m.waitErr, n)
		case time.Now().After(deadline):
			t.Fatalf("the base did not reach %d rows within 60s (readers' manifest found: %v, %d rows)", n, ok, rm.Rows)
		}
		time.Sleep(50 * time.Millisecond) // polling the files, bounded by the deadline
	}
}

// waitLogCount waits (bounded) until p logged msg n times.
func waitLogCount(t *testing.T, p *serveProc, msg string, n int) {
	t.Helper()
	quoted := fmt.Sprintf("%q", msg)
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(p.output(), `"msg":`+quoted) < n {
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("writer %s logged %q %d times, not %d (exited: %v)", p.command(), msg, strings.Count(p.output(), quoted), n, p.exited())
		}
		time.Sleep(20 * time.Millisecond) // polling the log, bounded by the deadline
	}
}

// TestMergeEveryStopsOnDamage: which errors end merge --every. Damage
// (a corrupt file, a state the planner refuses) does, since retrying
// cannot mend it; what time can mend does not.
func TestMergeEveryStopsOnDamage(t *testing.T) {
	for _, tc := range []struct {
		err   error
		fatal bool
	}{
		{fmt.Errorf("stage: %w", &generation.CorruptError{Path: "g.parquet", Reason: "bad page", Err: errors.New("crc")}), true},
		{fmt.Errorf("plan: %w", publish.ErrInvalidState), true},
		{fmt.Errorf("no running serve has recorded its embedded etcd in x"), false},
		{fmt.Errorf("commit: %w", publish.ErrLockLost), false},
		{&endpointMismatchError{endpoint: "127.0.0.1:1"}, false},
	} {
		if got := fatalMergeError(tc.err); got != tc.fatal {
			t.Errorf("fatalMergeError(%v) = %v; want %v", tc.err, got, tc.fatal)
		}
	}
}
