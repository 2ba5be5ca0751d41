package memtable

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A bound on how long a test waits for something that must happen; a
// correct implementation needs microseconds.
const patience = 10 * time.Second

// watchedBudget returns a budget whose queued waiters are announced on the
// returned channel, so tests know a goroutine is blocked without sleeping.
func watchedBudget(limit int64) (*Budget, <-chan struct{}) {
	b := NewBudget(limit)
	queued := make(chan struct{}, 64)
	b.onWait = func() { queued <- struct{}{} }
	return b, queued
}

func acquireAsync(ctx context.Context, b *Budget, n int64) <-chan error {
	done := make(chan error, 1)
	go func() { done <- b.Acquire(ctx, n, true) }()
	return done
}

func receive(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(patience):
		t.Fatalf("%s: nothing after %v", what, patience)
	}
}

func result(t *testing.T, what string, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(patience):
		t.Fatalf("%s: Acquire has not returned after %v", what, patience)
		return nil
	}
}

func blocked(t *testing.T, what string, c <-chan error) {
	t.Helper()
	select {
	case err := <-c:
		t.Fatalf("%s: Acquire returned %v while it should wait", what, err)
	default:
	}
}

func TestBudgetAcquireWithoutWait(t *testing.T) {
	b := NewBudget(100)
	if err := b.Acquire(t.Context(), 60, false); err != nil {
		t.Fatal(err)
	}
	err := b.Acquire(t.Context(), 50, false)
	if !errors.Is(err, ErrBackpressure) {
		t.Fatalf("Acquire(50) with 60 of 100 used = %v, want ErrBackpressure", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "60 of 100 bytes in use, wanted 50") {
		t.Errorf("error %q does not name used, limit and wanted", msg)
	}
	if b.Used() != 60 {
		t.Errorf("a failed Acquire changed Used to %d", b.Used())
	}
	if err := b.Acquire(t.Context(), 40, false); err != nil || b.Used() != 100 {
		t.Fatalf("Acquire(40) = %v, used %d; want nil, 100 (exactly full)", err, b.Used())
	}
	b.Release(100)
	if err := b.Acquire(t.Context(), 0, false); err != nil {
		t.Errorf("Acquire(0) = %v", err)
	}
	if err := b.Acquire(t.Context(), -1, false); err == nil || errors.Is(err, ErrBackpressure) {
		t.Errorf("Acquire(-1) = %v, want a plain error", err)
	}
}

func TestBudgetOversizeRequestFailsAtOnce(t *testing.T) {
	b := NewBudget(100)
	for _, wait := range []bool{false, true} {
		err := b.Acquire(t.Context(), 101, wait)
		if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrBackpressure) {
			t.Errorf("wait=%t: Acquire(101) of 100 = %v, want ErrTooLarge and not ErrBackpressure", wait, err)
		}
		if err != nil && !strings.Contains(err.Error(), "wanted 101 bytes, the limit is 100") {
			t.Errorf("error %q does not name the numbers", err)
		}
	}
	if b.Used() != 0 || b.Waiting() != 0 {
		t.Errorf("used %d, waiting %d after refused requests", b.Used(), b.Waiting())
	}
}

func TestBudgetWaitUnblocksWhenEnoughIsReleased(t *testing.T) {
	b, queued := watchedBudget(100)
	if err := b.Acquire(t.Context(), 80, false); err != nil {
		t.Fatal(err)
	}
	done := acquireAsync(t.Context(), b, 50)
	receive(t, "waiter queued", queued)
	blocked(t, "80 of 100 used", done)

	b.Release(20) // 60 used: 50 more do not fit yet
	if b.Waiting() != 1 || b.Used() != 60 {
		t.Fatalf("waiting %d, used %d; want 1, 60", b.Waiting(), b.Used())
	}
	blocked(t, "60 of 100 used", done)

	b.Release(10) // 50 used: now they fit, granted inside Release
	if b.Waiting() != 0 || b.Used() != 100 {
		t.Fatalf("after the release that makes room: waiting %d, used %d; want 0, 100", b.Waiting(), b.Used())
	}
	if err := result(t, "granted", done); err != nil {
		t.Fatal(err)
	}
}

func TestBudgetServesWaitersInOrder(t *testing.T) {
	b, queued := watchedBudget(100)
	if err := b.Acquire(t.Context(), 50, false); err != nil {
		t.Fatal(err)
	}
	big := acquireAsync(t.Context(), b, 60)
	receive(t, "big queued", queued)
	small := acquireAsync(t.Context(), b, 10) // would fit, but big is ahead
	receive(t, "small queued", queued)
	blocked(t, "small behind big", small)
	if err := b.Acquire(t.Context(), 10, false); !errors.Is(err, ErrBackpressure) || !strings.Contains(err.Error(), "2 requests waiting ahead") {
		t.Errorf("a non-waiting Acquire overtook the line: %v", err)
	}

	b.Release(10) // 40 used: big (60) fits, small then does not
	if err := result(t, "big", big); err != nil {
		t.Fatal(err)
	}
	blocked(t, "small after big took the room", small)
	b.Release(10)
	if err := result(t, "small", small); err != nil {
		t.Fatal(err)
	}
	if b.Used() != 100 {
		t.Errorf("used %d, want 100", b.Used())
	}
}

func TestBudgetWaitEndsWithContext(t *testing.T) {
	b, queued := watchedBudget(100)
	if err := b.Acquire(t.Context(), 90, false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	head := acquireAsync(ctx, b, 50)
	receive(t, "head queued", queued)
	behind := acquireAsync(t.Context(), b, 10)
	receive(t, "behind queued", queued)
	b.Release(10) // 80 used: neither fits while the head waits

	cancel()
	err := result(t, "cancelled", head)
	if !errors.Is(err, ErrBackpressure) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v, want ErrBackpressure and context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "waiting for 50 bytes") {
		t.Errorf("error %q does not name the request", err)
	}
	// The cancelled head no longer blocks the request behind it.
	if err := result(t, "behind the cancelled head", behind); err != nil {
		t.Fatal(err)
	}
	if b.Used() != 90 || b.Waiting() != 0 {
		t.Errorf("used %d, waiting %d; want 90, 0", b.Used(), b.Waiting())
	}

	past, cancel2 := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer cancel2()
	if err := b.Acquire(past, 20, true); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrBackpressure) {
		t.Errorf("Acquire past its deadline = %v, want ErrBackpressure and DeadlineExceeded", err)
	}
	if err := b.Acquire(past, 10, true); err != nil {
		t.Errorf("Acquire that fits, past its deadline = %v, want nil (no waiting needed)", err)
	}
}

func TestBudgetReleaseOfMoreThanUsedPanics(t *testing.T) {
	b := NewBudget(100)
	if err := b.Acquire(t.Context(), 10, false); err != nil {
		t.Fatal(err)
	}
	mustPanic(t, "release of 11 bytes, but 10 are in use", func() { b.Release(11) })
	mustPanic(t, "release of -1 bytes", func() { b.Release(-1) })
	mustPanic(t, "must be positive", func() { NewBudget(0) })
}

// OnPressure is told when an Acquire leaves the budget above its mark or
// cannot be granted at once, and not otherwise.
func TestBudgetPressure(t *testing.T) {
	ctx := context.Background()
	b := NewBudget(100)
	calls := 0
	b.OnPressure(75, func() { calls++ })
	for _, c := range []struct {
		n     int64
		wait  bool
		calls int
	}{
		{70, false, 0}, // 70 in use: below the mark
		{5, false, 0},  // 75: at the mark
		{10, false, 1}, // 85: above
		{20, false, 2}, // refused
	} {
		b.Acquire(ctx, c.n, c.wait)
		if calls != c.calls {
			t.Fatalf("after Acquire(%d): %d calls, want %d", c.n, calls, c.calls)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if err := b.Acquire(wctx, 20, true); !errors.Is(err, ErrBackpressure) || calls != 3 {
		t.Fatalf("a waiting Acquire: %v, %d calls; want backpressure and 3 calls", err, calls)
	}
	b.Release(85)
	if b.Acquire(ctx, 10, false); calls != 3 {
		t.Fatalf("an Acquire far below the mark called OnPressure (%d calls)", calls)
	}
}
