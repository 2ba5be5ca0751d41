package main

import (
	"encoding/json"
	"testing"
)

// TestInspectBesideServe: while `writer serve` holds the data dir's
// embedded etcd, inspect reads through the endpoint serve recorded and
// shows serve as the owner of its shards.
func TestInspectBesideServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	p := startServe(t, "--listen", "127.0.0.1:0", "--data-dir", dir, "--shards", "a,b", "--lease-ttl", "60s")
	defer p.stop(t)
	out, err := run(t, "inspect", "shards", "--data-dir", dir, "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var sums []shardSummary
	if err := json.Unmarshal([]byte(out), &sums); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(sums) != 2 || sums[0].Shard != "a" || sums[1].Shard != "b" {
		t.Fatalf("inspect shards listed %+v, want a and b", sums)
	}
	for _, s := range sums {
		if s.Owner == nil || s.Owner.Address != "http://"+p.addr || s.Owner.Epoch != 1 || s.Epoch != 1 {
			t.Fatalf("shard %s: owner %+v, epoch %d; want serve at %s, epoch 1", s.Shard, s.Owner, s.Epoch, p.addr)
		}
	}
}
