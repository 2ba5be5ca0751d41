package sim

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/snapshot"
)

// background is producer sessions appending from their own goroutines to
// whichever writer the shard has at that moment (its view), while the
// simulation's goroutine goes on: flushes, merges, handoffs, claims,
// closes and crashes meet appends in flight. Each producer sends its
// batches in order and each batch again, with the same sequence number,
// until it is acknowledged or the producers stop; what is left unresolved
// the simulation's producers send later. The batches are made up front on
// the simulation's goroutine, so that the ids stay a function of the seed.
type background struct {
	shard string
	prods []*producer
	// until is the last step a stream runs through; 0: its op stops it.
	until int
	done  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	results []bgResult
}

type bgResult struct {
	sb     *sbatch
	epoch  uint64
	zombie bool
	retry  bool
	out    outcome
	err    error
	start  time.Time
	vs     []string
}

const (
	// bgBatches bounds each background producer; bgPace is the pause
	// between its appends (and before it sends a batch again).
	bgBatches = 250
	bgPace    = 3 * time.Millisecond
)

// startBackground starts n producer sessions of shard appending in the
// background, or returns nil if the shard already has background
// producers or no free producer.
func (w *world) startBackground(shard string, n, until int) *background {
	for _, b := range w.bgs {
		if b.shard == shard {
			return nil
		}
	}
	bg := &background{shard: shard, until: until, done: make(chan struct{})}
	for _, p := range w.producers[shard] {
		if len(bg.prods) < n && !p.busy {
			bg.prods = append(bg.prods, p)
		}
	}
	if len(bg.prods) == 0 {
		return nil
	}
	view := w.views[shard]
	for i, p := range bg.prods {
		p.busy = true
		w.m.bgActive[p.src]++
		// First what the producer has not resolved yet, in order, then new
		// batches.
		batches := p.unresolved()
		for j := range bgBatches {
			batches = append(batches, w.newSessionBatch(p, 1+(i+j)%4, j*29+i))
		}
		bg.wg.Add(1)
		go func() {
			defer bg.wg.Done()
			bg.produce(view, batches)
		}()
	}
	w.bgs = append(w.bgs, bg)
	w.tracef("%s: %d producer sessions append in the background (until step %d)", shard, len(bg.prods), until)
	return bg
}

// produce sends batches in order to the shard's writer of the moment.
func (bg *background) produce(view *shardView, batches []*sbatch) {
	pace := time.NewTicker(bgPace)
	defer pace.Stop()
	for _, sb := range batches {
		for !sb.known {
			select {
			case <-bg.done:
				return
			case <-pace.C:
			}
			s := view.cur.Load()
			if s == nil {
				continue
			}
			start := time.Now()
			retry := sb.attempts > 0
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			res, err := s.AppendWith(ctx, sb.b.rows, sb.options())
			cancel()
			zombie := s.Epoch() < view.maxEpoch.Load()
			out, vs := judgeSession(sb, res, err, zombie)
			bg.mu.Lock()
			bg.results = append(bg.results, bgResult{sb: sb, epoch: s.Epoch(), zombie: zombie, retry: retry, out: out, err: err, start: start, vs: vs})
			bg.mu.Unlock()
		}
	}
}

// stopBackground stops the background producers that match (nil: all)
// and records their outcomes.
func (w *world) stopBackground(match func(*background) bool) {
	keep := w.bgs[:0]
	for _, bg := range w.bgs {
		if match != nil && !match(bg) {
			keep = append(keep, bg)
			continue
		}
		close(bg.done)
		bg.wg.Wait()
		w.recordBackground(bg)
	}
	clear(w.bgs[len(keep):])
	w.bgs = keep
}

// stopExpired stops the streams whose last step has passed.
func (w *world) stopExpired() {
	w.stopBackground(func(bg *background) bool { return bg.until != 0 && bg.until <= w.step })
}

func (w *world) recordBackground(bg *background) {
	counts := map[outcome]int{}
	seen := map[string]bool{} // a producer repeats a batch every few ms
	for _, r := range bg.results {
		for _, v := range r.vs {
			if !seen[v] {
				seen[v] = true
				w.violatef("shard %s (background): %s", bg.shard, v)
			}
		}
		a := attempt{step: w.step, shard: bg.shard, epoch: r.epoch, zombie: r.zombie, retry: r.retry, outcome: r.out}
		if r.err != nil {
			a.err = r.err.Error()
		}
		w.m.record(r.sb.b, a)
		w.st.appends++
		w.st.sessionAppends++
		w.st.bgAppends++
		w.countOutcome(r.out, r.err)
		counts[r.out]++
		if at, ok := w.m.supersededAt(bg.shard, r.epoch); ok && r.out == acked && r.start.After(at) {
			w.violatef("shard %s: writer of epoch %d acknowledged %s, an append begun %v after a successor's claim returned",
				bg.shard, r.epoch, r.sb, r.start.Sub(at))
		}
		if r.out == unknown && r.err != nil && !errors.Is(r.err, engine.ErrUnknownOutcome) {
			counts[0]++ // unknown for another reason: a crash, a killed process
		}
	}
	for _, p := range bg.prods {
		p.busy = false
		p.rewind()
		w.m.bgActive[p.src]--
		key := snapshot.Key{Table: w.table, Shard: bg.shard, Source: p.src}
		if off, ok := w.m.snaps[key]; ok && w.m.bgActive[p.src] == 0 && off > w.m.reached[p.src] {
			w.violatef("snapshot %s holds offset %d, above every offset that reached a WAL (%d)", key, off, w.m.reached[p.src])
		}
	}
	w.tracef("%s: background producers stopped: %d acked, %d unknown (%d not ErrUnknownOutcome), %d refused; unresolved now: %d",
		bg.shard, counts[acked], counts[unknown], counts[0], counts[refused], len(slices.Concat(unresolvedOf(bg.prods)...)))
}

func unresolvedOf(ps []*producer) [][]*sbatch {
	var out [][]*sbatch
	for _, p := range ps {
		out = append(out, p.unresolved())
	}
	return out
}
