package memtable

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/schema"
)

// TestHeapTracksBytes checks that the accounting is honest: the Go heap a
// Set keeps alive stays close to what it charges the budget, for tiny rows
// (where the per-value overheads dominate) and for rollout-sized text.
func TestHeapTracksBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates tens of megabytes")
	}
	for _, tc := range []struct {
		name string
		text int // mean length of prompt and completion
	}{{"tiny rows", 4}, {"short text", 100}, {"rollout text", 3000}} {
		t.Run(tc.name, func(t *testing.T) {
			ratio := heapPerByte(t, tc.text)
			t.Logf("heap / Bytes() = %.3f", ratio)
			if ratio < 0.8 || ratio > 1.25 {
				t.Errorf("the Set keeps %.2f bytes of heap per byte it charges; want 0.8 to 1.25", ratio)
			}
		})
	}
}

// heapPerByte fills a Set with 40k rows of about text bytes per string
// column and returns the growth of the live heap divided by Set.Bytes.
func heapPerByte(t *testing.T, text int) float64 {
	rng := rand.New(rand.NewPCG(uint64(text), 1))
	before := liveHeap()
	set := NewSet(testSchema, 1, NewBudget(1<<40), nil)
	seq := uint64(1)
	for i := range 200 {
		rows := make([]schema.Row, 200)
		for j := range rows {
			id := fmt.Sprintf("rollout-%d-%d", i, j)
			rows[j] = schema.Row{
				"id":         id,
				"prompt":     strings.Repeat("p", text/2+rng.IntN(text+1)),
				"completion": strings.Repeat("c", text/2+rng.IntN(text+1)),
				"reward":     rng.Float64(),
				"metadata":   `{"step":` + fmt.Sprint(j) + `}`,
			}
		}
		b, err := testSchema.Build(rows)
		if err != nil {
			t.Fatal(err)
		}
		fresh, _ := set.Filter(b)
		if err := set.budget.Acquire(t.Context(), EstimateBytes(fresh), false); err != nil {
			t.Fatal(err)
		}
		set.Insert(fresh, seq, 1, "", 0)
		seq += uint64(fresh.Len())
	}
	if set.Len() != 200*200 {
		t.Fatalf("%d rows", set.Len())
	}
	grown := liveHeap() - before
	charged := set.Bytes()
	runtime.KeepAlive(set)
	set.Close()
	return float64(grown) / float64(charged)
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC() // a second cycle also frees what the first one's finalizers released
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
