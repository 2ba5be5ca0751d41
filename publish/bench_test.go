package publish

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/vfs"
	"github.com/rollwal/rollwal/schema"
)

// BenchmarkMerge stages one 10,000-row generation against a base of
// baseRows rows, lookup-free and with the ID check (bloom probe of every
// base row group, exact confirmation of hits). Base sizes: 100k and 1M rows
// (10M only with ROLLWAL_BENCH_10M=1: building it takes minutes per run).
func BenchmarkMerge(b *testing.B) {
	sizes := []int{100_000, 1_000_000}
	if os.Getenv("ROLLWAL_BENCH_10M") != "" {
		sizes = append(sizes, 10_000_000)
	}
	for _, baseRows := range sizes {
		b.Run(fmt.Sprintf("base=%d", baseRows), func(b *testing.B) {
			e := benchEnv(b, baseRows)
			for _, check := range []bool{false, true} {
				name := "lookup-free"
				if check {
					name = "id-check"
				}
				b.Run(name, func(b *testing.B) {
					p, err := e.c.Plan(e.ctx)
					if err != nil {
						b.Fatal(err)
					}
					for i := range p.Shards[0].Generations {
						p.Shards[0].Generations[i].IDCheck = check
					}
					b.ReportAllocs()
					for b.Loop() {
						staged, err := e.c.Stage(e.ctx, p)
						if err != nil {
							b.Fatal(err)
						}
						if staged.RowsStaged != 10_000 {
							b.Fatalf("staged %d rows", staged.RowsStaged)
						}
						b.StopTimer()
						for _, part := range staged.Parts {
							for _, f := range part.Files {
								_ = os.Remove(filepath.Join(e.c.BaseDir(), f.Path))
							}
						}
						b.StartTimer()
					}
				})
			}
		})
	}
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
	add := func(prefix string, n int) {
		for lo := 0; lo < n; lo += 100_000 {
			rows := make([]schema.Row, 0, 100_000)
			for i := lo; i < min(n, lo+100_000); i++ {
				rows = append(rows, schema.Row{"id": prefix + strconv.Itoa(i), "prompt": "p", "completion": "c", "reward": 1.0})
			}
			if _, err := s.Append(e.ctx, rows, engine.Source{}); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := s.Flush(e.ctx); err != nil {
			b.Fatal(err)
		}
	}
	add("base-", baseRows)
	c, err := New(e.ctx, Options{Etcd: etcdClient, Prefix: "rollwal", Table: e.table, DataDir: e.dir, FS: e.fs, MemoryBudget: 1 << 30})
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
