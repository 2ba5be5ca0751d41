package engine

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// TestReplayWithLaggingCursor: the manifest's replay cursor lags the
// flushes (as after the incident where a restarted writer replayed an
// already-published tail), so replay reads WAL records of generations that
// were already committed. Their generation tags exclude them: no row is
// replayed twice. With the exclusion switched off the same setup replays
// them, which proves the test can see the failure.
func TestReplayWithLaggingCursor(t *testing.T) {
	for _, exclusion := range []bool{true, false} {
		name := "exclusion-on"
		if !exclusion {
			name = "exclusion-off"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
			opts.NoFlushOnClose = true
			h := openHost(t, opts)
			s := mustOpen(t, h, "s0")
			for i, prefix := range []string{"a", "b"} {
				if _, err := s.Append(ctx, rows(prefix, 0, 20), Source{}); err != nil {
					t.Fatal(err)
				}
				if g, err := s.Flush(ctx); err != nil || g != uint64(i+1) {
					t.Fatalf("flush %d: generation %d, %v", i, g, err)
				}
			}
			if _, err := s.Append(ctx, rows("c", 0, 20), Source{}); err != nil {
				t.Fatal(err)
			}
			if err := h.Close(ctx); err != nil {
				t.Fatal(err)
			}
			lagCursor(t, opts, "s0")

			opts.DisableSourceExclusion = !exclusion
			h = openHost(t, opts)
			defer h.Close(ctx)
			s = mustOpen(t, h, "s0")
			got := memtableIDs(s)
			want := 20
			if !exclusion {
				want = 60
			}
			if len(got) != want {
				t.Fatalf("replayed %d ids, want %d", len(got), want)
			}
			for id, n := range got {
				if n != 1 {
					t.Fatalf("id %s replayed %d times", id, n)
				}
				if exclusion && id[0] != 'c' {
					t.Fatalf("id %s of a committed generation was replayed", id)
				}
			}
		})
	}
}

// lagCursor rewrites the shard manifest as a drain would leave it (flushed
// generations gone) but with the replay cursor back at 0.
func lagCursor(t *testing.T, opts Options, shard string) {
	t.Helper()
	ctx := context.Background()
	m, err := LoadManifest(ctx, opts.Etcd, opts.Prefix, opts.Table, shard)
	if err != nil {
		t.Fatal(err)
	}
	if m.CurrentGeneration != 3 {
		t.Fatalf("current generation %d, want 3", m.CurrentGeneration)
	}
	m.Flushed, m.ReplayCursor = nil, 0
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = "rollwal"
	}
	key := shardmeta.Keys{Prefix: prefix, Table: opts.Table}.Manifest(shard)
	if _, err := opts.Etcd.Put(ctx, key, string(data)); err != nil {
		t.Fatal(err)
	}
}

// TestReplayLargerThanMemtable: a WAL tail larger than a memtable replays in
// bounded memory across several generations; the epoch records the last
// generation replay filled, and every row lands exactly once.
func TestReplayLargerThanMemtable(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewStrictMem()
	opts := testOptions(fs, tableName(t, ""))
	opts.NoFlushOnClose, opts.FlushBytes = true, 4<<20
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	for i := range 40 {
		if _, err := s.Append(ctx, rows("big", i*100, 100), Source{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}

	opts.FlushBytes = 128 << 10
	h = openHost(t, opts)
	s = mustOpen(t, h, "s0")
	m := s.Manifest()
	if len(m.Flushed) < 2 {
		t.Fatalf("replay of %d rows committed %d generations; want it split by the %d-byte memtable", 4000, len(m.Flushed), opts.FlushBytes)
	}
	replayEnd := s.set.Active().Generation()
	// The writer dies before flushing the rest of the replay: its records,
	// tagged with generations the previous epoch never committed, must
	// replay again in the next epoch.
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	h = openHost(t, opts)
	s = mustOpen(t, h, "s0")
	inGen, _ := committed(t, fs, opts, "s0")
	inMem := memtableIDs(s)
	for i := range 4000 {
		id := "big-" + itoa(i)
		if inGen[id]+inMem[id] != 1 {
			t.Fatalf("after a crash inside a replay: id %s: %d committed, %d in the memtable", id, inGen[id], inMem[id])
		}
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ids, m := committed(t, fs, opts, "s0")
	if len(ids) != 4000 {
		t.Fatalf("%d ids committed, want 4000", len(ids))
	}
	for id, n := range ids {
		if n != 1 {
			t.Fatalf("id %s committed %d times", id, n)
		}
	}
	second := m.Epochs[1]
	if second.Epoch != 2 || second.StartGeneration != 1 || second.ReplayEndGeneration != 0 && second.ReplayEndGeneration != replayEnd {
		t.Fatalf("epoch record %+v; want epoch 2 starting at generation 1", second)
	}
}

// TestReplayProgressLogsEachTenth: a long replay logs a line each time
// another tenth of the tail's positions is behind it (and not per record).
func TestReplayProgressLogsEachTenth(t *testing.T) {
	var buf bytes.Buffer
	s := &Shard{log: slog.New(slog.NewTextHandler(&buf, nil))}
	p := newReplayProgress(s, 100, 1100)
	for pos := uint64(101); pos <= 1100; pos += 3 {
		p.at(pos, int(pos-100))
	}
	lines := strings.Count(buf.String(), "replaying WAL tail")
	if lines < 9 || lines > 11 {
		t.Fatalf("%d progress lines for a 1000-position tail, want one per tenth:\n%s", lines, buf.String())
	}
	if !strings.Contains(buf.String(), "of=1100") || !strings.Contains(buf.String(), "done=50%") {
		t.Fatalf("progress lines do not say where replay is:\n%s", buf.String())
	}
}

// TestReplayedValuesAreTheAppended: rows replayed from the WAL (over
// several MiB, so the WAL reuses its read buffer many times, and the
// replay decodes into that buffer without copying) come out of the
// generation the replay flushes with exactly the values appended — id,
// every string and the reward.
func TestReplayedValuesAreTheAppended(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewStrictMem()
	opts := testOptions(fs, tableName(t, ""))
	opts.NoFlushOnClose, opts.FlushBytes = true, 64<<20
	want := map[string]schema.Row{}
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	for i := range 60 {
		batch := rows("v", i*200, 200)
		for k, r := range batch {
			r["completion"] = strings.Repeat(string(rune('a'+(i+k)%26)), 100+k%300)
			want[r["id"].(string)] = r
		}
		if _, err := s.Append(ctx, batch, Source{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	h = openHost(t, opts)
	s = mustOpen(t, h, "s0")
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m := s.Manifest()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, g := range m.Flushed {
		_, d, err := generation.Read(fs, filepath.Join(opts.DataDir, opts.Table, "shards", "s0", "gen", g.File), schema.Rollout())
		if err != nil {
			t.Fatal(err)
		}
		sch := d.Rows.Schema
		for i, id := range d.Rows.IDs {
			w, ok := want[id]
			if !ok {
				t.Fatalf("generation %d holds id %q, never appended", g.Number, id)
			}
			for _, col := range []string{"prompt", "completion", "reward"} {
				if v := d.Rows.Value(sch.Index(col), i); v != w[col] {
					t.Fatalf("id %s column %s: replayed %v, appended %v", id, col, v, w[col])
				}
			}
			got++
		}
	}
	if got != len(want) {
		t.Fatalf("%d rows in the generations, %d appended", got, len(want))
	}
}
