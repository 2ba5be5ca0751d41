package memtable

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/rollwal/rollwal/errs"
)

// ErrBackpressure reports that the memory budget cannot hold a request now.
// It is temporary: retry after memtables have been flushed.
var ErrBackpressure = errs.New(errs.Backpressure, "memtable: memory budget exhausted")

// ErrTooLarge reports a request larger than the whole budget. It never
// succeeds, so it is not ErrBackpressure: split the batch instead.
var ErrTooLarge = errs.New(errs.TooLarge, "memtable: request larger than the whole memory budget")

// Budget is a count of bytes shared by the memtables of every shard of a
// process. Acquire takes bytes, Release gives them back. Waiters are served
// first come, first served: a small request never overtakes a large one
// that waits ahead of it, so a large batch cannot starve.
//
// A Budget is safe for concurrent use.
type Budget struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	waiters []*waiter // FIFO

	onWait func() // test hook: called (under mu) when a waiter is queued

	// pressureAt and onPressure are set by OnPressure.
	pressureAt int64
	onPressure func()
}

type waiter struct {
	n     int64
	ready chan struct{} // closed, under Budget.mu, once the bytes are granted
}

// NewBudget returns a budget of limit bytes; limit must be positive.
func NewBudget(limit int64) *Budget {
	if limit <= 0 {
		panic(fmt.Sprintf("memtable: budget limit must be positive, got %d", limit))
	}
	return &Budget{limit: limit}
}

// Acquire takes n bytes. When they are not available, it fails at once with
// an error wrapping ErrBackpressure if wait is false; otherwise it waits in
// line until Releases free enough, or until ctx is done, and then returns an
// error wrapping both ErrBackpressure and ctx.Err(). A request larger than
// the limit fails at once with ErrTooLarge. Acquiring 0 bytes always
// succeeds.
func (b *Budget) Acquire(ctx context.Context, n int64, wait bool) error {
	switch {
	case n < 0:
		return fmt.Errorf("memtable: budget request of %d bytes is negative", n)
	case n == 0:
		return nil
	case n > b.limit:
		return fmt.Errorf("%w: wanted %d bytes, the limit is %d", ErrTooLarge, n, b.limit)
	}
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+n <= b.limit {
		b.used += n
		low := b.onPressure != nil && b.used > b.pressureAt
		b.mu.Unlock()
		if low {
			b.onPressure()
		}
		return nil
	}
	if !wait {
		err := b.exhaustedLocked(n)
		b.mu.Unlock()
		b.pressure()
		return err
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	if b.onWait != nil {
		b.onWait()
	}
	b.mu.Unlock()
	b.pressure()
	return b.await(ctx, w)
}

// OnPressure makes f run after every Acquire that leaves more than high
// bytes in use, or that cannot be granted at once: the budget runs low,
// and whoever can free memory (by flushing memtables) should, before
// every request waits or fails. f runs in the caller of Acquire, without
// the budget's lock; it must return at once (signal, not work). Call it
// before the budget is shared.
func (b *Budget) OnPressure(high int64, f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pressureAt, b.onPressure = high, f
}

func (b *Budget) pressure() {
	b.mu.Lock()
	f := b.onPressure
	b.mu.Unlock()
	if f != nil {
		f()
	}
}

func (b *Budget) exhaustedLocked(n int64) error {
	if len(b.waiters) > 0 {
		return fmt.Errorf("%w: %d of %d bytes in use, wanted %d, %d requests waiting ahead",
			ErrBackpressure, b.used, b.limit, n, len(b.waiters))
	}
	return fmt.Errorf("%w: %d of %d bytes in use, wanted %d", ErrBackpressure, b.used, b.limit, n)
}

// await blocks until w is granted or ctx is done. A grant that raced with
// the cancellation wins: the caller then holds the bytes and gets nil.
func (b *Budget) await(ctx context.Context, w *waiter) error {
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	default:
	}
	b.waiters = slices.DeleteFunc(b.waiters, func(x *waiter) bool { return x == w })
	b.grantLocked() // w may have blocked smaller requests behind it
	return fmt.Errorf("%w: gave up waiting for %d bytes (%d of %d in use): %w",
		ErrBackpressure, w.n, b.used, b.limit, ctx.Err())
}

// Release returns n bytes taken by Acquire and wakes the waiters that now
// fit, in order. Releasing more than is in use is an accounting bug and
// panics.
func (b *Budget) Release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n < 0 || n > b.used {
		panic(fmt.Sprintf("memtable: budget release of %d bytes, but %d are in use", n, b.used))
	}
	b.used -= n
	b.grantLocked()
}

// grantLocked serves waiters from the head of the line while they fit.
func (b *Budget) grantLocked() {
	for len(b.waiters) > 0 && b.used+b.waiters[0].n <= b.limit {
		w := b.waiters[0]
		b.waiters = slices.Delete(b.waiters, 0, 1)
		b.used += w.n
		close(w.ready)
	}
}

// Used is the number of bytes acquired and not yet released.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Waiting is the number of Acquire calls blocked in line (for metrics and
// tests).
func (b *Budget) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiters)
}
