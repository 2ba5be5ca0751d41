package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/internal/rolloutgen"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/wal"
)

var etcdClient *clientv3.Client

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rollwal-bench-etcd-")
	if err != nil {
		panic(err)
	}
	srv, err := etcdembed.Start(context.Background(), etcdembed.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	etcdClient = srv.Client()
	code := m.Run()
	srv.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// BenchmarkIngest measures append → WAL group commit → memtable → flush →
// manifest commit with producers appending 1 KiB-class rollouts concurrently,
// and reports acknowledgement latency percentiles.
func BenchmarkIngest(b *testing.B) {
	for _, producers := range []int{4, 16} {
		for _, comp := range []wal.Compression{wal.None, wal.S2} {
			b.Run(fmt.Sprintf("producers=%d/wal=%s", producers, comp), func(b *testing.B) {
				benchIngest(b, producers, comp)
			})
		}
	}
}

const ingestBatch = 64

func benchIngest(b *testing.B, producers int, comp wal.Compression) {
	ctx := context.Background()
	h, err := engine.NewHost(engine.Options{
		DataDir: b.TempDir(), Table: fmt.Sprintf("bench%d", time.Now().UnixNano()), Etcd: etcdClient,
		WALCompression: comp, FlushBytes: 32 << 20, MemoryBudget: 256 << 20, BudgetWait: time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	s, err := h.Open(ctx, "s0")
	if err != nil {
		b.Fatal(err)
	}
	batches, logical := prepare(b, producers)
	lat := make([][]time.Duration, producers)
	b.SetBytes(logical / int64(producers*len(batches[0])))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < b.N; i += producers {
				t0 := time.Now()
				if _, err := s.AppendBatch(ctx, withIDs(batches[p][(i/producers)%len(batches[p])], p, i), engine.Source{}); err != nil {
					b.Error(err)
					return
				}
				lat[p] = append(lat[p], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	if _, err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	report(b, lat, elapsed)
	if err := h.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// prepare builds a pool of validated batches per producer; appends reuse
// their payloads under fresh ids, so generation stays off the clock.
func prepare(b *testing.B, producers int) ([][]*schema.Batch, int64) {
	const pool = 32
	var logical int64
	out := make([][]*schema.Batch, producers)
	for p := range out {
		g := rolloutgen.New(uint64(p+1), fmt.Sprintf("p%d", p))
		for range pool {
			batch, err := schema.Rollout().Build(g.Rows(ingestBatch))
			if err != nil {
				b.Fatal(err)
			}
			logical += rowBytes(batch)
			out[p] = append(out[p], batch)
		}
	}
	return out, logical
}

// rowBytes is the logical size of a batch: ids and string payloads.
func rowBytes(b *schema.Batch) int64 {
	var n int64
	for _, id := range b.IDs {
		n += int64(len(id))
	}
	for _, v := range b.Cols {
		for _, s := range v.Str {
			n += int64(len(s))
		}
		n += int64(8 * (len(v.F64) + len(v.I64)))
	}
	return n
}

// withIDs shares base's columns under ids unique to (producer, op).
func withIDs(base *schema.Batch, producer, op int) *schema.Batch {
	ids := make([]string, len(base.IDs))
	for i := range ids {
		ids[i] = fmt.Sprintf("p%d-op%d-%d", producer, op, i)
	}
	return &schema.Batch{Schema: base.Schema, IDs: ids, Cols: base.Cols}
}

func report(b *testing.B, lat [][]time.Duration, elapsed time.Duration) {
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	b.ReportMetric(float64(b.N*ingestBatch)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-us")
}
