package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWALRepairRefusesWhileServing: repair cuts nothing while the etcd
// endpoint recorded in the data dir answers (a writer may be appending),
// and goes ahead once the recorded endpoint is a dead leftover.
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

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	writeTestFile(t, endpointFile(dir), "http://"+addr+"\n")
	repair := []string{"wal", "repair", "--data-dir", dir, "--shard", "s0", "--yes", "--log-level", "error"}
	if _, err := run(t, repair...); err == nil || !strings.Contains(err.Error(), "a writer process runs") {
		t.Fatalf("repair beside a live endpoint: %v", err)
	}
	if st, err := os.Stat(seg); err != nil || st.Size() != int64(len(data)) {
		t.Fatalf("the refused repair changed the segment: %v, %v", st, err)
	}
	ln.Close()
	if out, err := run(t, repair...); err != nil || !strings.Contains(out, "truncated") {
		t.Fatalf("repair after the endpoint died: %v\n%s", err, out)
	}
	if st, err := os.Stat(seg); err != nil || st.Size() >= int64(len(data)) {
		t.Fatalf("repair left the segment at %v, %v", st, err)
	}
}
