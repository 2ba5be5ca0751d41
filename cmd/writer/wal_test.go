package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/internal/dirlock"
)

// TestWALRepairRefusesWhileServing: repair --yes cuts nothing while a writer
// holds the data dir's lock (here this process, as a serve with an external
// etcd would: the lock does not depend on the etcd), names the holder, and
// goes ahead once the lock is free; verify reads regardless.
func TestWALRepairRefusesWhileServing(t *testing.T) {
	dir := t.TempDir()
	if out, err := run(t, "generate", "--data-dir", dir, "--rows", "300", "--shards", "1", "--batch", "100", "--producers", "1"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	seg := filepath.Join(dir, "rollouts", "shards", "s0", "wal", "00000000000000000001-000001.wal")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0xff
	writeTestFile(t, seg, string(data))

	lock, err := dirlock.Acquire(dir, "serve")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	repair := []string{"wal", "repair", "--data-dir", dir, "--shard", "s0", "--yes", "--log-level", "error"}
	_, err = run(t, repair...)
	if err == nil || !strings.Contains(err.Error(), "refusing to repair") ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d (writer serve", os.Getpid())) {
		t.Fatalf("repair while the lock is held: %v; want a refusal naming pid %d and serve", err, os.Getpid())
	}
	if st, err := os.Stat(seg); err != nil || st.Size() != int64(len(data)) {
		t.Fatalf("the refused repair changed the segment: %v, %v", st, err)
	}
	if out, err := run(t, "wal", "verify", "--data-dir", dir, "--shard", "s0", "--log-level", "error"); err == nil || !strings.Contains(err.Error(), "a torn tail") {
		t.Fatalf("verify beside a writer: %v; want it to read regardless and report the torn tail\n%s", err, out)
	}
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, repair...); err != nil || !strings.Contains(out, "truncated") {
		t.Fatalf("repair after the lock was released: %v\n%s", err, out)
	}
	if st, err := os.Stat(seg); err != nil || st.Size() >= int64(len(data)) {
		t.Fatalf("repair left the segment at %v, %v", st, err)
	}
}
