package shardmeta

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// loseResponse makes the n-th transaction of kind op report a deadline
// although it ran, as when the response is lost on the way back.
func loseResponse(s *Store, op string, n int) *int {
	seen := 0
	s.testHookTxn = func(got string, err error) error {
		if got == op {
			if seen++; seen == n {
				return context.DeadlineExceeded
			}
		}
		return err
	}
	return &seen
}

func TestCommitLostResponseResolvesCommitted(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	c := claim(t, s, "s0", "w")
	loseResponse(s, "commit", 1)
	next := flushNext(c, 5)
	if err := s.Commit(ctx, c, next); err != nil {
		t.Fatalf("Commit with a lost response: %v, want nil (read back shows it applied)", err)
	}
	stored, rev, err := s.Load(ctx, "s0")
	if err != nil || !stored.Equal(next) || !c.Manifest.Equal(next) {
		t.Fatalf("stored %+v (%v), claim %+v, want %+v", stored, err, c.Manifest, next)
	}
	if c.manifestRev != rev {
		t.Fatalf("claim tracks manifest revision %d, stored %d", c.manifestRev, rev)
	}
	if err := s.Commit(ctx, c, flushNext(c, 5)); err != nil {
		t.Fatalf("next Commit: %v", err)
	}
}

func TestCommitNotAppliedIsRetryable(t *testing.T) {
	s := newStore(t)
	c := claim(t, s, "s0", "w")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	next := flushNext(c, 5)
	err := s.Commit(canceled, c, next)
	if !errors.Is(err, ErrNotApplied) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a canceled context: %v, want ErrNotApplied wrapping context.Canceled", err)
	}
	if c.Err() != nil {
		t.Fatalf("not-applied commit fenced the claim: %v", c.Err())
	}
	if err := s.Commit(testCtx(t), c, next); err != nil {
		t.Fatalf("retry: %v", err)
	}
}

// The first attempt, reported not applied, lands after all before the retry:
// the retry's guard fails, the read-back shows next, and that is success.
func TestCommitLateApplyRecognised(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	c := claim(t, s, "s0", "w")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	next := flushNext(c, 5)
	if err := s.Commit(canceled, c, next); !errors.Is(err, ErrNotApplied) {
		t.Fatal(err)
	}
	data, _ := next.Encode()
	putRaw(t, s.Keys().Manifest("s0"), string(data)) // the late apply
	if err := s.Commit(ctx, c, next); err != nil {
		t.Fatalf("retry after a late apply: %v", err)
	}
	if err := s.Commit(ctx, c, flushNext(c, 1)); err != nil {
		t.Fatalf("next Commit: %v", err)
	}
}

func TestCommitUnknownOutcome(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: server(t).Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s := newStore(t)
	s = NewStore(cli, s.Keys(), StoreOptions{RequestTimeout: time.Second})
	c := claim(t, s, "s0", "w")
	s.testHookTxn = func(string, error) error {
		cli.Close() // the read-back cannot happen either
		return context.DeadlineExceeded
	}
	err = s.Commit(testCtx(t), c, flushNext(c, 5))
	if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Commit: %v, want ErrUnknownOutcome wrapping the cause", err)
	}
}

func TestClaimLostResponseAdopted(t *testing.T) {
	s := newStore(t)
	loseResponse(s, "claim", 1)
	lease := grant(t)
	c, err := s.Claim(testCtx(t), "s0", Owner{Writer: "w"}, lease, nil)
	if err != nil {
		t.Fatalf("Claim with a lost response: %v", err)
	}
	resp, err := server(t).Client().Get(testCtx(t), s.Keys().Owner("s0"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatal(resp, err)
	}
	if c.Epoch != 1 || c.Token != resp.Kvs[0].ModRevision || c.Lease != lease || c.Manifest.WriterEpoch != 1 {
		t.Fatalf("adopted claim %+v, owner key %+v", c, resp.Kvs[0])
	}
	if err := s.Commit(testCtx(t), c, flushNext(c, 3)); err != nil {
		t.Fatalf("Commit on the adopted claim: %v", err)
	}
	// Another claimer with another lease is not fooled by the same value.
	if _, err := s.Claim(testCtx(t), "s0", Owner{Writer: "w"}, grant(t), nil); !errors.Is(err, ErrOwned) {
		t.Fatalf("second Claim: %v, want ErrOwned", err)
	}
}

func TestReleaseLostResponse(t *testing.T) {
	s := newStore(t)
	c := claim(t, s, "s0", "w")
	loseResponse(s, "release", 1)
	if err := s.Release(testCtx(t), c); err != nil {
		t.Fatalf("Release with a lost response: %v", err)
	}
	if _, ok := raw(t, s.Keys().Owner("s0")); ok {
		t.Fatal("owner key survives")
	}
}

// TestClaimRemovesItsOwnStaleOwnerKey: a writer's claim committed (so it
// was served) and its release never happened (etcd was down when the
// shard closed). A new claim of the same writer under the same lease finds
// that owner key: it is neither another writer's (wait for it to go: it
// never would, the lease is alive) nor a claim in progress (adopt it: the
// manifest moved since). The claim removes it and claims the next epoch.
func TestClaimRemovesItsOwnStaleOwnerKey(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	lease := grant(t)
	c, err := s.Claim(ctx, "s0", Owner{Writer: "w"}, lease, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, c, flushNext(c, 4)); err != nil {
		t.Fatal(err)
	}
	// No Release: the key stays, bound to the live lease.
	c2, err := s.Claim(ctx, "s0", Owner{Writer: "w"}, lease, nil)
	if err != nil {
		t.Fatalf("a new claim of the same writer over its own stale owner key: %v", err)
	}
	if c2.Epoch != c.Epoch+1 || c2.Manifest.CurrentGeneration != c.Manifest.CurrentGeneration {
		t.Fatalf("claimed epoch %d at generation %d; want epoch %d, generation %d", c2.Epoch, c2.Manifest.CurrentGeneration, c.Epoch+1, c.Manifest.CurrentGeneration)
	}
	if err := s.Commit(ctx, c, flushNext(c, 1)); !errors.Is(err, ErrFenced) {
		t.Fatalf("the stale claim's commit: %v, want ErrFenced", err)
	}
	// Another writer's key under another lease is still waited for.
	if _, err := s.Claim(ctx, "s0", Owner{Writer: "w"}, grant(t), nil); !errors.Is(err, ErrOwned) {
		t.Fatalf("a claim under another lease: %v, want ErrOwned", err)
	}
}
