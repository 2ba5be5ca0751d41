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
			text := tc.text
			checkHeapPerByte(t, testSchema, uint64(text), 200, 200, func(rng *rand.Rand, id string, j int) schema.Row {
				return schema.Row{
					"id":         id,
					"prompt":     strings.Repeat("p", text/2+rng.IntN(text+1)),
					"completion": strings.Repeat("c", text/2+rng.IntN(text+1)),
					"reward":     rng.Float64(),
					"metadata":   `{"step":` + fmt.Sprint(j) + `}`,
				}
			})
		})
	}
}

// TestHeapTracksBytesOfLists is TestHeapTracksBytes for what RL rollouts
// carry in lists: token ids and log-probabilities by the thousand per row,
// and chat messages, long and short. Long lists weigh the per-element costs
// against slack in the memtable's growing element slices; short ones weigh
// the per-row offsets and string headers.
func TestHeapTracksBytesOfLists(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates tens of megabytes")
	}
	s, err := schema.New([]schema.Column{
		mustColumn("tokens", "list<int32>", false),
		mustColumn("logprobs", "list<float32>", false),
		mustColumn("messages", "list<struct<role: string, content: string>>", false),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name             string
		batches, rows    int
		tokens, messages int // most elements of a row's lists
		content          int // most bytes of a message's content
	}{
		{"thousands of tokens", 100, 20, 4000, 8, 2000},
		{"short lists", 200, 200, 8, 3, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkHeapPerByte(t, s, uint64(tc.tokens), tc.batches, tc.rows, func(rng *rand.Rand, id string, _ int) schema.Row {
				n := tc.tokens/4 + rng.IntN(tc.tokens*3/4+1)
				tokens, logprobs := make([]int32, n), make([]float32, n)
				for i := range n {
					tokens[i], logprobs[i] = rng.Int32N(1<<17), -rng.Float32()
				}
				messages := make([]any, rng.IntN(tc.messages+1))
				for i := range messages {
					role := []string{"system", "user", "assistant"}[i%3]
					messages[i] = map[string]any{"role": role, "content": strings.Repeat("m", rng.IntN(tc.content+1))}
				}
				return schema.Row{"id": id, "tokens": tokens, "logprobs": logprobs, "messages": messages}
			})
		})
	}
}

// checkHeapPerByte fills a Set with batches of rows rows made by row and
// fails unless the growth of the live heap is 0.8 to 1.25 times Set.Bytes.
func checkHeapPerByte(t *testing.T, s *schema.Schema, seed uint64, batches, rows int, row func(rng *rand.Rand, id string, j int) schema.Row) {
	ratio := heapPerByte(t, s, seed, batches, rows, row)
	t.Logf("heap / Bytes() = %.3f", ratio)
	if ratio < 0.8 || ratio > 1.25 {
		t.Errorf("the Set keeps %.2f bytes of heap per byte it charges; want 0.8 to 1.25", ratio)
	}
}

func heapPerByte(t *testing.T, s *schema.Schema, seed uint64, batches, rows int, row func(rng *rand.Rand, id string, j int) schema.Row) float64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	before := liveHeap()
	set := NewSet(s, 1, NewBudget(1<<40), nil)
	seq := uint64(1)
	for i := range batches {
		rs := make([]schema.Row, rows)
		for j := range rs {
			rs[j] = row(rng, fmt.Sprintf("rollout-%d-%d", i, j), j)
		}
		b, err := s.Build(rs)
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
	if set.Len() != batches*rows {
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
