package memtable

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/schema"
)

// benchBatches returns n batches of rows rows each, with distinct ids, and
// prompt and completion of text bytes.
func benchBatches(b *testing.B, n, rows, text int) []*schema.Batch {
	out := make([]*schema.Batch, n)
	for i := range out {
		rs := make([]schema.Row, rows)
		for j := range rs {
			rs[j] = schema.Row{
				"id": fmt.Sprintf("rollout-%d-%d", i, j), "prompt": strings.Repeat("p", text),
				"completion": strings.Repeat("c", text), "reward": 0.5, "metadata": `{"step":1}`,
			}
		}
		var err error
		if out[i], err = testSchema.Build(rs); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// BenchmarkInsert is the append path of one shard: Filter, Acquire, Insert,
// with a flush (Rotate, Release) whenever the pool of distinct ids is used
// up. Bytes are what the rows cost the budget.
func BenchmarkInsert(b *testing.B) {
	for _, text := range []int{64, 4096} {
		b.Run(fmt.Sprintf("rows=256/text=%d", text), func(b *testing.B) {
			pool := benchBatches(b, 64, 256, text)
			budget := NewBudget(1 << 40)
			set := NewSet(testSchema, 1, budget, nil)
			defer set.Close()
			b.SetBytes(EstimateBytes(pool[0]))
			b.ReportAllocs()
			seq := uint64(1)
			for i := 0; b.Loop(); i++ {
				if i%len(pool) == 0 && i > 0 {
					_ = set.Release(set.Rotate().Generation())
				}
				fresh, _ := set.Filter(pool[i%len(pool)])
				if err := budget.Acquire(b.Context(), EstimateBytes(fresh), false); err != nil {
					b.Fatal(err)
				}
				set.Insert(fresh, seq, 1, "src", int64(i))
				seq += uint64(fresh.Len())
			}
		})
	}
}

// BenchmarkAppendRow is the alternative Insert does not take: copying rows
// one by one with schema.Batch.AppendRow (sharing strings, no index, no
// arena). Compare with BenchmarkInsert/rows=256/text=64.
func BenchmarkAppendRow(b *testing.B) {
	pool := benchBatches(b, 64, 256, 64)
	b.SetBytes(EstimateBytes(pool[0]))
	b.ReportAllocs()
	dst := testSchema.NewBatch(0)
	for i := 0; b.Loop(); i++ {
		if i%len(pool) == 0 {
			dst = testSchema.NewBatch(0)
		}
		src := pool[i%len(pool)]
		for r := range src.Len() {
			dst.AppendRow(src, r)
		}
	}
}

// BenchmarkFilter filters 256-row batches, half of them duplicates, against
// a set holding 64k ids.
func BenchmarkFilter(b *testing.B) {
	pool := benchBatches(b, 256, 256, 16)
	set := NewSet(testSchema, 1, NewBudget(1<<40), nil)
	defer set.Close()
	for i, batch := range pool {
		if i%2 == 0 {
			_ = set.budget.Acquire(b.Context(), EstimateBytes(batch), false)
			set.Insert(batch, uint64(i*256+1), 1, "", 0)
		}
	}
	mixed := make([]*schema.Batch, len(pool)/2)
	for i := range mixed { // rows alternate between stored and new ids
		mixed[i] = testSchema.NewBatch(256)
		for r := range 256 {
			mixed[i].AppendRow(pool[2*i+r%2], r)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, dups := set.Filter(mixed[i%len(mixed)]); dups != 128 {
			b.Fatalf("%d duplicates", dups)
		}
	}
}

func BenchmarkBudget(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		budget := NewBudget(1 << 30)
		for b.Loop() {
			_ = budget.Acquire(b.Context(), 1024, false)
			budget.Release(1024)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		budget := NewBudget(1 << 30)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = budget.Acquire(b.Context(), 1024, true)
				budget.Release(1024)
			}
		})
	})
}
