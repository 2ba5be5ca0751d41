package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/schema"
)

// How cost grows with work (issue 7): an append must cost the same however
// long the shard's history, and reopening must cost time linear in the WAL
// tail it replays. Each is reported as a ratio against the smallest case of
// the same run (x-first), next to its absolute figure.

// BenchmarkAppendByHistory appends 64-row batches (one producer, so each op
// is one durable append) to a shard that has already committed history
// generations of 200 rows each.
func BenchmarkAppendByHistory(b *testing.B) {
	var first float64
	for _, history := range []int{0, 1000} {
		b.Run(fmt.Sprintf("generations=%d", history), func(b *testing.B) {
			ctx := context.Background()
			// The history stays unmerged: room for it above the default
			// limit on unmerged generations (ErrMergesBehind), and few
			// sources (it uses none), so that the worst-case manifest still
			// fits one etcd value (Options.Validate).
			h, s := openShard(b, scalingOptions(b, engine.Options{FlushBytes: 64 << 20, FlushAge: -1,
				MaxUnmergedGenerations: 2 * max(history, 1000), MaxSources: 16}))
			defer h.Close(ctx)
			batches, _ := prepare(b, 1)
			for g := range history {
				if _, err := s.AppendBatch(ctx, withIDs(batches[0][g%len(batches[0])], 1, g), engine.Source{}); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if n := len(s.Manifest().Flushed); n != history {
				b.Fatalf("history of %d generations, want %d", n, history)
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := s.AppendBatch(ctx, withIDs(batches[0][i%len(batches[0])], 2, i), engine.Source{}); err != nil {
					b.Fatal(err)
				}
			}
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if first == 0 {
				first = perOp
			}
			b.ReportMetric(perOp/first, "x-first")
		})
	}
}

// BenchmarkReplayByTail reopens a shard whose WAL tail holds rows unflushed
// rows (~1 KiB each). Reopening also claims an epoch (a fixed cost), so
// linearity shows in the marginal cost between consecutive tail sizes:
// s/GiB-marginal stays flat when replay is linear in the tail.
func BenchmarkReplayByTail(b *testing.B) {
	var prevSec, prevGiB, firstMarginal float64
	for _, rows := range []int{20_000, 40_000, 80_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			sec, gib := replayTail(b, rows)
			b.ReportMetric(sec/gib, "s/GiB")
			if prevGiB > 0 {
				marginal := (sec - prevSec) / (gib - prevGiB)
				if firstMarginal == 0 {
					firstMarginal = marginal
				}
				b.ReportMetric(marginal, "s/GiB-marginal")
				b.ReportMetric(marginal/firstMarginal, "x-first-marginal")
			}
			prevSec, prevGiB = sec, gib
		})
	}
}

// replayTail leaves rows unflushed rows in a shard's WAL, then times
// reopening it; it returns seconds per reopen and the tail's GiB.
func replayTail(b *testing.B, rows int) (float64, float64) {
	ctx := context.Background()
	opts := scalingOptions(b, engine.Options{FlushBytes: 1 << 30, MemoryBudget: 1 << 30, FlushAge: -1, NoFlushOnClose: true})
	h, s := openShard(b, opts)
	batches, logical := prepare(b, 1)
	var bytes int64
	for i := 0; i*ingestBatch < rows; i++ {
		if _, err := s.AppendBatch(ctx, withIDs(batches[0][i%len(batches[0])], 1, i), engine.Source{}); err != nil {
			b.Fatal(err)
		}
		bytes += logical / int64(len(batches[0]))
	}
	if err := h.Close(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		h, s := openShard(b, opts)
		if got := s.Status().MemtableRows; got < rows {
			b.Fatalf("replayed %d rows, want %d", got, rows)
		}
		b.StopTimer()
		if err := h.Close(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	return b.Elapsed().Seconds() / float64(b.N), float64(bytes) / (1 << 30)
}

func scalingOptions(b *testing.B, o engine.Options) engine.Options {
	o.DataDir, o.Table, o.Etcd, o.Schema = b.TempDir(), fmt.Sprintf("scale%d", time.Now().UnixNano()), etcdClient, schema.Rollout()
	if o.MemoryBudget == 0 {
		o.MemoryBudget = 256 << 20
	}
	return o
}

func openShard(b *testing.B, o engine.Options) (*engine.Host, *engine.Shard) {
	b.Helper()
	h, err := engine.NewHost(o)
	if err != nil {
		b.Fatal(err)
	}
	s, err := h.Open(context.Background(), "s0")
	if err != nil {
		b.Fatal(err)
	}
	return h, s
}
