package engine

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// testOptions are small, fast options over fs for table.
func testOptions(fs vfs.FS, table string) Options {
	return Options{
		DataDir: "/data", FS: fs, Table: table, Etcd: etcdClient,
		WALSegmentSize: 64 << 10, FlushBytes: 1 << 20, FlushAge: -1,
		MemoryBudget: 64 << 20, Codec: "snappy", RequestTimeout: 5 * time.Second,
	}
}

func openHost(t testing.TB, opts Options) *Host {
	t.Helper()
	h, err := NewHost(opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func mustOpen(t testing.TB, h *Host, name string) *Shard {
	t.Helper()
	s, err := h.Open(context.Background(), name)
	if err != nil {
		t.Fatalf("open shard %s: %v", name, err)
	}
	return s
}

func rows(prefix string, from, n int) []schema.Row {
	out := make([]schema.Row, n)
	for i := range out {
		out[i] = schema.Row{
			"id":         prefix + "-" + itoa(from+i),
			"prompt":     "prompt " + itoa(from+i),
			"completion": "completion text that is long enough to compress a little",
			"reward":     float64(from+i) / 7,
		}
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

// committed reads every generation the shard's manifest names and counts
// each id; it fails the test if a named file is missing or unreadable.
func committed(t testing.TB, fs vfs.FS, opts Options, shard string) (map[string]int, *shardmeta.Manifest) {
	t.Helper()
	m, err := LoadManifest(context.Background(), opts.Etcd, opts.Prefix, opts.Table, shard)
	if err != nil {
		t.Fatalf("load manifest: %v", err)
	}
	ids := map[string]int{}
	dir := filepath.Join(opts.DataDir, opts.Table, "shards", shard, "gen")
	sch := opts.Schema
	if sch == nil {
		sch = schema.Rollout()
	}
	for _, g := range m.Flushed {
		_, d, err := generation.Read(fs, filepath.Join(dir, g.File), sch)
		if opts.Store != nil {
			// The store is where everyone else reads: a successor on
			// another machine holds none of the files.
			d, err = readGenerationObject(opts, shard, g.File)
		}
		if err != nil {
			t.Fatalf("committed generation %d (%s): %v", g.Number, g.File, err)
		}
		for _, id := range d.Rows.IDs {
			ids[id]++
		}
	}
	return ids, m
}

// memtableIDs lists the ids in an open shard's memtables.
func memtableIDs(s *Shard) map[string]int {
	ids := map[string]int{}
	for _, m := range append(s.set.Sealed(), s.set.Active()) {
		for _, id := range m.Rows().IDs {
			ids[id]++
		}
	}
	return ids
}

// readGenerationObject reads a committed generation from opts.Store.
func readGenerationObject(opts Options, shard, file string) (generation.Data, error) {
	obj, err := opts.Store.Open(context.Background(), generation.ObjectKey(opts.Table, shard, file))
	if err != nil {
		return generation.Data{}, err
	}
	defer obj.Close()
	_, d, err := generation.ReadStoredFrom(obj, obj.Size(), file)
	return d, err
}
