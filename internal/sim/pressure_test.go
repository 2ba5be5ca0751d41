package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rollwal/rollwal/engine"
)

// pressure is producers that keep sending, from their own goroutines, to
// writers that are losing their lease while the simulation goes on. The
// appends that straddle the moment a writer learns it lost its lease end
// with ErrUnknownOutcome (durable, not acknowledged): the outcome whose
// retries the model checks. The batches are made up front on the
// simulation's goroutine, so the ids stay a function of the seed.
type pressure struct {
	done    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	results []pressed
}

type pressed struct {
	z     *zombie
	b     *batch
	res   engine.Result
	err   error
	start time.Time
}

// pressureBatches bounds each producer; it stops earlier at the writer's
// first error.
const pressureBatches = 800

func (w *world) startPressure(zs []*zombie) *pressure {
	p := &pressure{done: make(chan struct{})}
	for _, z := range zs {
		batches := make([]*batch, pressureBatches)
		for i := range batches {
			batches[i] = w.newBatch(z.shard, 1+i%2, i*13, i)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			// Back to back would be thousands of appends per second of
			// lease; 2ms apart, an append still straddles the moment the
			// writer learns of the loss often enough.
			pace := time.NewTicker(2 * time.Millisecond)
			defer pace.Stop()
			for _, b := range batches {
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				res, err := z.s.Append(ctx, b.rows, b.src)
				cancel()
				p.mu.Lock()
				p.results = append(p.results, pressed{z: z, b: b, res: res, err: err, start: start})
				p.mu.Unlock()
				if err != nil {
					return // whatever the error, the writer is stopped now
				}
				select {
				case <-p.done:
					return
				case <-pace.C:
				}
			}
		}()
	}
	return p
}

// stop ends the producers and records their outcomes. claimed holds, per
// shard, when a successor's claim had returned: an append that began after
// it must not be acknowledged.
func (w *world) stopPressure(p *pressure, claimed map[string]time.Time) {
	close(p.done)
	p.wg.Wait()
	counts := map[string]map[outcome]int{}
	for _, r := range p.results {
		out := classifyAppend(r.err)
		a := attempt{step: w.step, shard: r.b.shard, epoch: r.z.epoch, zombie: true, outcome: out}
		if r.err != nil {
			a.err = r.err.Error()
		}
		w.m.record(r.b, a)
		w.st.appends++
		switch out {
		case acked:
			w.st.acks++
		case unknown:
			w.st.unknowns++
			if errors.Is(r.err, engine.ErrUnknownOutcome) {
				w.st.durableUnknowns++
			}
			w.m.retryable = append(w.m.retryable, r.b)
		case refused:
			w.st.refusals++
		}
		key := fmt.Sprintf("%s epoch %d", r.b.shard, r.z.epoch)
		if counts[key] == nil {
			counts[key] = map[outcome]int{}
		}
		counts[key][out]++
		if at, ok := claimed[r.b.shard]; ok && out == acked && r.start.After(at) {
			w.violatef("shard %s: zombie %s of epoch %d acknowledged an append it began %v after a successor's claim returned",
				r.b.shard, r.z.host, r.z.epoch, r.start.Sub(at))
		}
		if out == unknown && !errors.Is(r.err, engine.ErrUnknownOutcome) {
			w.tracef("%s: pressure append ended unclassified: %v", r.b.shard, r.err)
		}
	}
	for key, c := range counts {
		w.tracef("%s: producers under lease loss: %d acked, %d unknown, %d refused", key, c[acked], c[unknown], c[refused])
	}
}
