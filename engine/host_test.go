package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/vfs"
)

// syncBuffer is a log sink tests read while the host writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// within runs f and fails the test unless it returns within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// TestHostAnswersWhileOpenWaits: a host whose Open waits for another
// writer's owner key (a standby) still answers Shard, Shards and appends
// to the shards it has open; the Open completes once the owner goes, and a
// waiting Open ends with its ctx.
func TestHostAnswersWhileOpenWaits(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewStrictMem()
	opts := testOptions(fs, tableName(t, ""))
	a := openHost(t, opts)
	defer a.Close(ctx)
	mustOpen(t, a, "s0")

	var log syncBuffer
	bopts := opts
	bopts.Logger = slog.New(slog.NewTextHandler(&log, nil))
	b := openHost(t, bopts)
	defer b.Close(ctx)
	s1 := mustOpen(t, b, "s1")
	type opened struct {
		s   *Shard
		err error
	}
	res := make(chan opened, 1)
	octx, stopOpen := context.WithCancel(ctx)
	defer stopOpen() // before b.Close: a failed test must not leave Open waiting
	go func() {
		s, err := b.Open(octx, "s0")
		res <- opened{s, err}
	}()
	waitFor(t, "the standby's claim to wait for the owner", func() bool {
		return strings.Contains(log.String(), "waiting for its owner key to go")
	})
	within(t, 5*time.Second, "Shard, Shards and Append during a waiting Open", func() {
		if _, ok := b.Shard("s0"); ok {
			t.Error("s0 is open on the standby before it claimed it")
		}
		if s, ok := b.Shard("s1"); !ok || s != s1 {
			t.Error("s1 is not listed while s0's Open waits")
		}
		if n := len(b.Shards()); n != 1 {
			t.Errorf("Shards lists %d shards, want 1", n)
		}
		if _, err := s1.Append(ctx, rows("b", 0, 10), Source{}); err != nil {
			t.Errorf("append to s1 while s0's Open waits: %v", err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	select {
	case r := <-res:
		t.Fatalf("Open returned while another writer owns the shard: %v", r.err)
	default:
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if r.err != nil || r.s.Epoch() != 2 {
			t.Fatalf("Open after the owner closed: %v; want epoch 2", r.err)
		}
		if s, ok := b.Shard("s0"); !ok || s != r.s {
			t.Fatal("the opened shard is not listed")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Open did not claim within 20s of the owner's close")
	}

	// A waiting Open ends with its ctx and leaves the host usable.
	c := openHost(t, opts)
	defer c.Close(ctx)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.Open(cctx, "s1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open of an owned shard with a 300ms ctx: %v; want the deadline", err)
	}
	if len(c.Shards()) != 0 {
		t.Fatal("a failed Open left a shard listed")
	}
}

// TestClaimRegrantsExpiredLease: a claim that waited for another owner
// (long, on a loaded machine) can find the host's own lease gone: etcd
// answers "requested lease not found", or the keepalive gave it up first.
// The host grants a new lease and claims again; the open succeeds.
func TestClaimRegrantsExpiredLease(t *testing.T) {
	for _, keepaliveFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("keepalive-first=", keepaliveFirst), func(t *testing.T) {
			claimRegrantsExpiredLease(t, keepaliveFirst)
		})
	}
}

func claimRegrantsExpiredLease(t *testing.T, keepaliveFirst bool) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	a := openHost(t, opts)
	defer a.Close(ctx)
	mustOpen(t, a, "s0")

	var log syncBuffer
	bopts := opts
	bopts.Logger = slog.New(slog.NewTextHandler(&log, nil))
	// A TTL far above the test, so that B's keepalive, every TTL/3, does
	// not learn of the expiry unless the test says it did.
	bopts.LeaseTTL, bopts.LeaseMargin = time.Minute, 10*time.Second
	b := openHost(t, bopts)
	defer b.Close(ctx)
	mustOpen(t, b, "s1") // grants B's lease
	old := b.lease
	type opened struct {
		s   *Shard
		err error
	}
	res := make(chan opened, 1)
	octx, stopOpen := context.WithTimeout(ctx, 30*time.Second)
	defer stopOpen()
	go func() {
		s, err := b.Open(octx, "s0")
		res <- opened{s, err}
	}()
	waitFor(t, "B's claim of s0 to wait for A", func() bool {
		return strings.Contains(log.String(), "waiting for its owner key to go")
	})
	// The lease expires while the claim waits: on the server, or past its
	// local deadline while the server still holds it for a moment.
	if keepaliveFirst {
		old.markLost(leaseDeadline, "keepalives failed until the local deadline passed (test)")
	} else if _, err := etcdClient.Revoke(ctx, old.id); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("Open after the host's lease expired during the claim: %v; want a new lease and a claim with it", r.err)
	}
	if r.s.lease == old || !r.s.lease.valid() {
		t.Fatalf("the shard was claimed with lease %x (the expired one is %x), valid %v", int64(r.s.lease.id), int64(old.id), r.s.lease.valid())
	}
	if _, err := r.s.Append(ctx, rows("after", 0, 10), Source{}); err != nil {
		t.Fatalf("append to the shard claimed with the new lease: %v", err)
	}
}
