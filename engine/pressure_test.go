package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollwal/rollwal/vfs"
)

// TestNoShardStarves: ten shards share one memory budget smaller than ten
// memtables at FlushBytes, with flush by age off. Each shard alone would
// wait for FlushBytes before it flushes; together they fill the budget
// first. The host must seal and flush the largest memtables when the
// budget runs low, so that every shard keeps acknowledging appends.
func TestNoShardStarves(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.FlushBytes, opts.MemoryBudget = 1<<20, 4<<20 // 10 × FlushBytes is 2.5 × the budget
	opts.BudgetWait = 200 * time.Millisecond
	h := openHost(t, opts)
	defer h.Close(ctx)
	const shards, batches = 10, 300 // about 1.5 MiB each: the budget must turn over several times
	acked := make([]atomic.Int64, shards)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range shards {
		s := mustOpen(t, h, fmt.Sprintf("s%d", i))
		wg.Go(func() { produce(t, s, &acked[i], stop) })
	}
	defer func() { close(stop); wg.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for i := range shards {
		for acked[i].Load() < batches {
			if time.Now().After(deadline) {
				t.Fatalf("shards starved: %v of %d batches acknowledged in 20s (budget: %d of %d bytes in use)",
					starved(acked, batches), batches, h.budget.Used(), h.budget.Limit())
			}
			time.Sleep(5 * time.Millisecond) // polling a counter, not waiting for an event
		}
	}
}

// starved names the shards below want, with what each acknowledged.
func starved(acked []atomic.Int64, want int64) []string {
	var out []string
	for i := range acked {
		if n := acked[i].Load(); n < want {
			out = append(out, fmt.Sprintf("s%d:%d", i, n))
		}
	}
	return out
}

// produce appends batches to s until stop, counting the acknowledged ones
// and retrying on backpressure as a producer does.
func produce(t *testing.T, s *Shard, acked *atomic.Int64, stop chan struct{}) {
	ctx := context.Background()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		_, err := s.Append(ctx, rows(s.Name()+"-b"+itoa(i), 0, 50), Source{})
		switch {
		case err == nil:
			acked.Add(1)
		case errors.Is(err, ErrBackpressure):
		default:
			t.Errorf("shard %s: append: %v", s.Name(), err)
			return
		}
	}
}
