package publish

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// BenchmarkMerge stages one 10,000-row generation against a base of
// baseRows rows (built from 100k-row generations, one base file each):
//
//   - lookup-free: fresh rows, no ID check;
//   - id-check-fresh: the same generation marked ID-check; its positions lie
//     beyond every base file, so nothing is opened;
//   - id-check-replay: half of the generation replays the last 5,000 rows of
//     the base (same ids, same positions) — the restart case — so the one
//     overlapping base file is opened and its candidate row group confirmed.
//
// x-lookup-free is the lookup-free time over the case's time, measured in
// the same run. x-rowgroup-copy, on lookup-free, is the time a verbatim
// copy of the generation file (every row group as it is, and its footer)
// takes over the stage's, measured in the same run, off the clock: the
// floor of a merge that rewrites nothing. Base sizes: 100k and 1M rows (10M only with
// ROLLWAL_BENCH_10M=1: building it takes minutes).
func BenchmarkMerge(b *testing.B) {
	sizes := []int{100_000, 1_000_000}
	if os.Getenv("ROLLWAL_BENCH_10M") != "" {
		sizes = append(sizes, 10_000_000)
	}
	for _, baseRows := range sizes {
		b.Run(fmt.Sprintf("base=%d", baseRows), func(b *testing.B) {
			e := benchEnv(b, baseRows)
			replay := e.replayGeneration(b)
			var lookupFree float64
			for _, tc := range []struct {
				name          string
				check, replay bool
			}{{"lookup-free", false, false}, {"id-check-fresh", true, false}, {"id-check-replay", true, true}} {
				b.Run(tc.name, func(b *testing.B) {
					p := e.plan(b, tc.check)
					want := int64(10_000)
					if tc.replay {
						p.Shards[0].Generations[0].Path = replay
						want = 5_000
					}
					b.ReportAllocs()
					for b.Loop() {
						e.stageOnce(b, p, want)
					}
					perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
					if !tc.check {
						lookupFree = perOp
						b.ReportMetric(copyFloor(b, p.Shards[0].Generations[0].Path, e.c.BaseDir())/perOp, "x-rowgroup-copy")
					} else if lookupFree > 0 {
						b.ReportMetric(lookupFree/perOp, "x-lookup-free")
					}
				})
			}
		})
	}
}

func (e *bench) plan(b *testing.B, check bool) *Plan {
	p, err := e.c.Plan(e.ctx)
	if err != nil {
		b.Fatal(err)
	}
	if len(p.Shards) != 1 || len(p.Shards[0].Generations) != 1 {
		b.Fatalf("plan %+v, want one generation", p.Shards)
	}
	p.Shards[0].Generations[0].IDCheck = check
	return p
}

// stageOnce stages p, checks the rows kept and removes the staged files
// outside the timer.
func (e *bench) stageOnce(b *testing.B, p *Plan, want int64) {
	staged, err := e.c.Stage(e.ctx, p)
	if err != nil {
		b.Fatal(err)
	}
	if staged.RowsStaged != want {
		b.Fatalf("staged %d rows, want %d", staged.RowsStaged, want)
	}
	b.StopTimer()
	for _, part := range staged.Parts {
		for _, f := range part.Files {
			_ = os.Remove(filepath.Join(e.c.BaseDir(), f.Path))
		}
	}
	b.StartTimer()
}

// replayGeneration writes, outside the shard, a file standing in for the
// planned generation after a restart with a lagging cursor: the last 5,000
// rows of the newest base file, positions kept, then 5,000 new rows.
func (e *bench) replayGeneration(b *testing.B) string {
	p := e.plan(b, true)
	pg := p.Shards[0].Generations[0]
	st, _, err := e.c.store.LoadBaseState(e.ctx)
	if err != nil {
		b.Fatal(err)
	}
	base, err := e.c.loadBase(e.ctx, st.Version)
	if err != nil {
		b.Fatal(err)
	}
	newest := base.files[len(base.files)-1]
	_, old, err := generation.Read(vfs.Default, filepath.Join(e.c.BaseDir(), newest.Path), schema.Rollout())
	if err != nil {
		b.Fatal(err)
	}
	meta, fresh, err := generation.Read(vfs.Default, pg.Path, schema.Rollout())
	if err != nil {
		b.Fatal(err)
	}
	d := generation.Data{Rows: schema.Rollout().NewBatch(10_000)}
	for i := old.Rows.Len() - 5_000; i < old.Rows.Len(); i++ {
		d.Rows.AppendRow(old.Rows, i)
		d.Seq, d.Epoch = append(d.Seq, old.Seq[i]), append(d.Epoch, old.Epoch[i])
	}
	for i := range 5_000 {
		d.Rows.AppendRow(fresh.Rows, i)
		d.Seq, d.Epoch = append(d.Seq, fresh.Seq[i]), append(d.Epoch, fresh.Epoch[i])
	}
	dir := b.TempDir()
	meta.SeqFirst, meta.SeqLast = 0, 0
	f, err := generation.Write(e.ctx, generation.Options{FS: vfs.Default}, dir, schema.Rollout(), meta, d)
	if err != nil {
		b.Fatal(err)
	}
	return filepath.Join(dir, f.Name)
}

// copyFloor is the mean time, in nanoseconds, of copying file src into
// dir as the stage places a base file: written whole under a temporary
// name, synced, renamed, the directory synced. The source is read from
// the page cache, as the stage reads a generation a flush just wrote.
func copyFloor(b *testing.B, src, dir string) float64 {
	b.StopTimer()
	defer b.StartTimer()
	const copies = 5
	var total time.Duration
	for i := range copies {
		data, err := os.ReadFile(src)
		if err != nil {
			b.Fatal(err)
		}
		tmp, dst := filepath.Join(dir, fmt.Sprintf(".copy-%d.tmp", i)), filepath.Join(dir, fmt.Sprintf("copy-%d.parquet", i))
		start := time.Now()
		if err := writeSynced(tmp, data); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			b.Fatal(err)
		}
		if err := vfs.SyncDir(vfs.Default, dir); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		if err := os.Remove(dst); err != nil {
			b.Fatal(err)
		}
	}
	return float64(total.Nanoseconds()) / copies
}

func writeSynced(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return errors.Join(err, f.Close())
	}
	return errors.Join(f.Sync(), f.Close())
}

type bench struct {
	*env
	c *Coordinator
}

func benchEnv(b *testing.B, baseRows int) *bench {
	t := &testing.T{}
	e := &env{t: t, ctx: b.Context(), fs: &countingFS{FS: vfs.Default}, dir: b.TempDir(), table: tableName(b), ids: map[string]bool{}}
	e.opts = engine.Options{DataDir: e.dir, FS: e.fs, Table: e.table, Etcd: etcdClient,
		FlushBytes: 512 << 20, MemoryBudget: 1 << 30, FlushAge: -1, NoFlushOnClose: true, MaxBatchRows: 1 << 20}
	h, err := engine.NewHost(e.opts)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(e.ctx)
	s, err := h.Open(e.ctx, "s0")
	if err != nil {
		b.Fatal(err)
	}
	// One generation, and so one base file, per 100k rows.
	add := func(prefix string, n int) {
		for lo := 0; lo < n; lo += 100_000 {
			rows := make([]schema.Row, 0, 100_000)
			for i := lo; i < min(n, lo+100_000); i++ {
				rows = append(rows, schema.Row{"id": prefix + strconv.Itoa(i), "prompt": "p", "completion": "c", "reward": 1.0})
			}
			if _, err := s.Append(e.ctx, rows, engine.Source{}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Flush(e.ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	add("base-", baseRows)
	// No compaction: the base keeps one file per 100k rows, as the figures
	// before the Iceberg base had it.
	c, err := New(e.ctx, Options{Etcd: etcdClient, Prefix: "rollwal", Table: e.table, DataDir: e.dir, FS: e.fs, MemoryBudget: 1 << 30,
		Compaction: Compaction{Disabled: true}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := c.RunOnce(e.ctx); err != nil {
		b.Fatal(err)
	}
	add("new-", 10_000)
	return &bench{env: e, c: c}
}
