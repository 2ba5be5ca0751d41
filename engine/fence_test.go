package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rollwal/rollwal/vfs"
)

// TestLostLeaseFences: once the writer's lease is gone on the server, the
// shard acknowledges nothing and commits nothing more; a new host claims the
// next epoch at once, and the fenced writer's unacknowledged rows never show
// up in a committed generation.
func TestLostLeaseFences(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewStrictMem()
	opts := testOptions(fs, tableName(t, ""))
	opts.LeaseTTL = 2 * time.Second
	a := openHost(t, opts)
	defer a.Close(ctx)
	sa := mustOpen(t, a, "s0")
	if _, err := sa.Append(ctx, rows("a", 0, 10), Source{}); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdClient.Revoke(ctx, a.lease.id); err != nil {
		t.Fatal(err)
	}
	// The next keepalive learns the lease is gone (within TTL/3). Appends
	// that reached the WAL first end with an unknown outcome: those ids may
	// be replayed by the successor; the others must never appear.
	unknown, lateAcked := map[string]bool{}, map[string]bool{}
	i := 0
	waitFor(t, "the zombie to see it is fenced", func() bool {
		id := "late-" + itoa(i)
		_, err := sa.Append(ctx, rows("late", i, 1), Source{})
		i++
		if errors.Is(err, ErrUnknownOutcome) {
			unknown[id] = true
		}
		if err == nil { // acknowledged before the keepalive learned of the revoke
			lateAcked[id] = true
		}
		return errors.Is(err, ErrFenced)
	})
	if _, err := sa.Append(ctx, rows("late", 100, 5), Source{}); !errors.Is(err, ErrFenced) {
		t.Fatalf("append after fencing: %v; want ErrFenced", err)
	}
	if _, err := sa.Flush(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("flush after fencing: %v; want ErrFenced", err)
	}

	b := openHost(t, opts)
	defer b.Close(ctx)
	sb := mustOpen(t, b, "s0")
	if sb.Epoch() != 2 {
		t.Fatalf("successor epoch %d, want 2", sb.Epoch())
	}
	if _, err := sb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ids, m := committed(t, fs, opts, "s0")
	acked := 0
	for id, n := range ids {
		switch {
		case n != 1:
			t.Fatalf("id %s committed %d times", id, n)
		case id[0] == 'a' || lateAcked[id]:
			acked++
		case !unknown[id]:
			t.Fatalf("row %s, refused by the fenced writer, is committed", id)
		}
	}
	if acked != 10+len(lateAcked) || m.WriterEpoch != 2 {
		t.Fatalf("%d acknowledged ids at epoch %d; want %d at epoch 2", acked, m.WriterEpoch, 10+len(lateAcked))
	}
}

// TestReclaimOnFence: with the policy on, a host whose lease was lost claims
// its shard again with a new epoch, and the rows acknowledged before the
// fence are still there.
func TestReclaimOnFence(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewStrictMem()
	opts := testOptions(fs, tableName(t, ""))
	opts.LeaseTTL, opts.ReclaimOnFence = 2*time.Second, true
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	if _, err := s.Append(ctx, rows("before", 0, 10), Source{}); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdClient.Revoke(ctx, h.lease.id); err != nil {
		t.Fatal(err)
	}
	var next *Shard
	waitFor(t, "the shard to be claimed again", func() bool {
		next, _ = h.Shard("s0")
		return next != nil && next != s && next.Epoch() == 2
	})
	if _, err := next.Append(ctx, rows("after", 0, 10), Source{}); err != nil {
		t.Fatalf("append after the re-claim: %v", err)
	}
	ids := memtableIDs(next)
	for _, prefix := range []string{"before", "after"} {
		for _, r := range rows(prefix, 0, 10) {
			if ids[r["id"].(string)] != 1 {
				t.Fatalf("id %s: %d copies after the re-claim", r["id"], ids[r["id"].(string)])
			}
		}
	}
}
