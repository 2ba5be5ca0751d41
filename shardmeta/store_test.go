package shardmeta

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func claim(t *testing.T, s *Store, shard, writer string) *Claim {
	t.Helper()
	c, err := s.Claim(testCtx(t), shard, Owner{Writer: writer, Address: writer + ":7070"}, grant(t), nil)
	if err != nil {
		t.Fatalf("Claim(%s) by %s: %v", shard, writer, err)
	}
	return c
}

// flushNext returns c.Manifest with the active generation committed.
func flushNext(c *Claim, rows uint64) *Manifest {
	m := c.Manifest.Clone()
	g := m.CurrentGeneration
	first := max(m.ReplayCursor, lastStart(m)) + 1
	m.Flushed = append(m.Flushed, Generation{
		Number: g, File: fmt.Sprintf("gen/%06d-e%d.parquet", g, c.Epoch), Rows: int64(rows), Bytes: int64(rows) * 100,
		SeqFirst: first, SeqLast: first + rows - 1, Epoch: c.Epoch,
	})
	m.CurrentGeneration, m.ReplayCursor = g+1, first+rows-1
	return m
}

func lastStart(m *Manifest) uint64 {
	r, _ := m.LastEpoch()
	return r.StartPosition
}

func raw(t *testing.T, key string) (string, bool) {
	t.Helper()
	resp, err := server(t).Client().Get(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", false
	}
	return string(resp.Kvs[0].Value), true
}

func putRaw(t *testing.T, key, value string) {
	t.Helper()
	if _, err := server(t).Client().Put(testCtx(t), key, value); err != nil {
		t.Fatal(err)
	}
}

func deleteRaw(t *testing.T, key string) {
	t.Helper()
	if _, err := server(t).Client().Delete(testCtx(t), key); err != nil {
		t.Fatal(err)
	}
}

func TestClaimIncrementsEpochs(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	for want := uint64(1); want <= 3; want++ {
		c := claim(t, s, "s0", "w1")
		if c.Epoch != want || c.Manifest.WriterEpoch != want {
			t.Fatalf("claim %d: epoch %d, manifest writer_epoch %d", want, c.Epoch, c.Manifest.WriterEpoch)
		}
		if v, _ := raw(t, s.Keys().Epoch("s0")); v != fmt.Sprint(want) {
			t.Fatalf("epoch key = %q, want %d", v, want)
		}
		o, _ := raw(t, s.Keys().Owner("s0"))
		if wantOwner := fmt.Sprintf(`{"writer":"w1","epoch":%d,"address":"w1:7070"}`, want); o != wantOwner {
			t.Fatalf("owner key = %s, want %s", o, wantOwner)
		}
		m, rev, err := s.Load(ctx, "s0")
		if err != nil || rev != c.Token || !m.Equal(c.Manifest) {
			t.Fatalf("Load = %+v, %d, %v; want the claim's manifest at revision %d", m, rev, err, c.Token)
		}
		if last, _ := m.LastEpoch(); last.Epoch != want || last.StartGeneration != m.CurrentGeneration {
			t.Fatalf("last epoch record %+v", last)
		}
		if err := s.Commit(ctx, c, flushNext(c, 10)); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		if err := s.Release(ctx, c); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if _, ok := raw(t, s.Keys().Owner("s0")); ok {
			t.Fatal("owner key survives Release")
		}
		if err := s.Commit(ctx, c, flushNext(c, 1)); !errors.Is(err, ErrFenced) {
			t.Fatalf("Commit after Release: %v, want ErrFenced", err)
		}
		if err := s.Release(ctx, c); err != nil {
			t.Fatalf("second Release: %v", err)
		}
	}
	m, _, err := s.Load(ctx, "s0")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Epochs) != 3 || len(m.Flushed) != 3 || m.CurrentGeneration != 4 || m.ReplayCursor != 30 {
		t.Fatalf("after three epochs: %+v", m)
	}
}

func TestClaimSeedsEpochFromManifest(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	for range 2 {
		c := claim(t, s, "s0", "w1")
		if err := s.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	deleteRaw(t, s.Keys().Epoch("s0")) // the counter is lost; the manifest says 2
	c := claim(t, s, "s0", "w2")
	if c.Epoch != 3 {
		t.Fatalf("epoch after losing the counter = %d, want 3", c.Epoch)
	}
	if v, _ := raw(t, s.Keys().Epoch("s0")); v != "3" {
		t.Fatalf("epoch key = %q, want 3", v)
	}
}

// A counter above the manifest (bumped by hand) is honoured.
func TestClaimEpochAboveManifest(t *testing.T) {
	s := newStore(t)
	c := claim(t, s, "s0", "w1")
	if err := s.Release(testCtx(t), c); err != nil {
		t.Fatal(err)
	}
	putRaw(t, s.Keys().Epoch("s0"), "10")
	if c := claim(t, s, "s0", "w1"); c.Epoch != 11 {
		t.Fatalf("epoch = %d, want 11", c.Epoch)
	}
}

func TestClaimRefusedWhileOwned(t *testing.T) {
	s := newStore(t)
	c := claim(t, s, "s0", "w1")
	_, err := s.Claim(testCtx(t), "s0", Owner{Writer: "w2"}, grant(t), nil)
	var owned *OwnedError
	if !errors.Is(err, ErrOwned) || !errors.As(err, &owned) {
		t.Fatalf("second Claim: %v, want an *OwnedError", err)
	}
	if owned.Owner.Writer != "w1" || owned.Owner.Epoch != 1 || owned.Revision != c.Token || owned.Lease != int64(c.Lease) {
		t.Fatalf("OwnedError = %+v, claim %+v", owned, c)
	}
	if !strings.Contains(err.Error(), `"writer":"w1"`) {
		t.Fatalf("error %q does not show the owner", err)
	}
	if v, _ := raw(t, s.Keys().Epoch("s0")); v != "1" {
		t.Fatalf("refused claim moved the epoch to %s", v)
	}
}

func TestClaimConcurrent(t *testing.T) {
	s := newStore(t)
	const n = 8
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		claims []*Claim
		errs   []error
	)
	leases := make([]clientv3.LeaseID, n)
	for i := range leases {
		leases[i] = grant(t)
	}
	ctx := testCtx(t)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := s.Claim(ctx, "s0", Owner{Writer: fmt.Sprintf("w%d", i)}, leases[i], nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				claims = append(claims, c)
			}
		}()
	}
	wg.Wait()
	if len(claims) != 1 || claims[0].Epoch != 1 {
		t.Fatalf("%d claims succeeded (%+v), want exactly one of epoch 1", len(claims), claims)
	}
	for _, err := range errs {
		if !errors.Is(err, ErrOwned) {
			t.Errorf("losing claim: %v, want ErrOwned", err)
		}
	}
}

func TestCommitWithStaleTokenIsFenced(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	a := claim(t, s, "s0", "a")
	if err := s.Commit(ctx, a, flushNext(a, 5)); err != nil {
		t.Fatal(err)
	}
	deleteRaw(t, s.Keys().Owner("s0")) // a's lease expired
	b := claim(t, s, "s0", "b")
	if b.Epoch != 2 {
		t.Fatalf("b's epoch = %d, want 2", b.Epoch)
	}
	before, beforeRev, err := s.Load(ctx, "s0")
	if err != nil {
		t.Fatal(err)
	}

	err = s.Commit(ctx, a, flushNext(a, 5)) // the zombie
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie Commit: %v, want ErrFenced", err)
	}
	if !strings.HasPrefix(err.Error(), "shardmeta: fenced: ") {
		t.Errorf("fenced error reads %q", err)
	}
	after, afterRev, err := s.Load(ctx, "s0")
	if err != nil {
		t.Fatal(err)
	}
	if afterRev != beforeRev || !after.Equal(before) {
		t.Fatalf("zombie commit changed the manifest: %+v (rev %d) became %+v (rev %d)", before, beforeRev, after, afterRev)
	}
	if !errors.Is(a.Err(), ErrFenced) {
		t.Fatalf("a.Err() = %v, want sticky ErrFenced", a.Err())
	}
	if err := s.Commit(ctx, a, flushNext(a, 5)); !errors.Is(err, ErrFenced) {
		t.Fatalf("later zombie Commit: %v, want ErrFenced", err)
	}
	if err := s.Release(ctx, a); !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie Release: %v, want ErrFenced", err)
	}
	if _, ok := raw(t, s.Keys().Owner("s0")); !ok {
		t.Fatal("zombie Release deleted the new owner")
	}
	// The new owner is unaffected.
	if err := s.Commit(ctx, b, flushNext(b, 5)); err != nil {
		t.Fatalf("new owner's Commit: %v", err)
	}
}

// A takeover that overwrites the owner key (keeping its CreateRevision)
// still fences: the guard is on ModRevision.
func TestOverwrittenOwnerFences(t *testing.T) {
	s := newStore(t)
	a := claim(t, s, "s0", "a")
	if _, err := server(t).Client().Put(testCtx(t), s.Keys().Owner("s0"), `{"writer":"tool"}`, clientv3.WithLease(grant(t))); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(testCtx(t), a, flushNext(a, 1)); !errors.Is(err, ErrFenced) {
		t.Fatalf("Commit after overwrite: %v, want ErrFenced", err)
	}
}

// Anyone else writing the manifest or bumping the epoch fences the owner.
func TestForeignWritesFence(t *testing.T) {
	for _, key := range []string{"manifest", "epoch"} {
		t.Run(key, func(t *testing.T) {
			s := newStore(t)
			a := claim(t, s, "s0", "a")
			k := s.Keys().Shard("s0") + key
			v, _ := raw(t, k)
			putRaw(t, k, v) // same value, new revision
			err := s.Commit(testCtx(t), a, flushNext(a, 1))
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("Commit: %v, want ErrFenced", err)
			}
		})
	}
}

func TestCommitRefusesBadManifests(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	c := claim(t, s, "s0", "w")
	if err := s.Commit(ctx, c, flushNext(c, 5)); err != nil {
		t.Fatal(err)
	}
	invalid := flushNext(c, 5)
	invalid.ReplayCursor = invalid.Flushed[len(invalid.Flushed)-1].SeqLast - 1
	backwards := c.Manifest.Clone()
	backwards.SourceOffsets["src"] = 1 // a new source is fine...
	if err := s.Commit(ctx, c, backwards); err != nil {
		t.Fatal(err)
	}
	backwards = c.Manifest.Clone()
	backwards.SourceOffsets["src"] = 0 // ...going back is not
	otherEpoch := flushNext(c, 5)
	otherEpoch.WriterEpoch = 2
	otherEpoch.Epochs = append(otherEpoch.Epochs, EpochRecord{Epoch: 2, StartGeneration: otherEpoch.CurrentGeneration, StartPosition: otherEpoch.ReplayCursor})

	_, rev, _ := s.Load(ctx, "s0")
	for name, tc := range map[string]struct {
		m    *Manifest
		want error
	}{
		"invalid":     {invalid, ErrInvalidManifest},
		"backwards":   {backwards, ErrInvalidTransition},
		"other epoch": {otherEpoch, ErrInvalidTransition},
		"nil":         {nil, ErrInvalidManifest},
	} {
		if err := s.Commit(ctx, c, tc.m); !errors.Is(err, tc.want) {
			t.Errorf("%s: Commit = %v, want %v", name, err, tc.want)
		}
	}
	if _, after, _ := s.Load(ctx, "s0"); after != rev {
		t.Fatalf("refused commits wrote the manifest (revision %d -> %d)", rev, after)
	}
	if c.Err() != nil {
		t.Fatalf("refused commits fenced the claim: %v", c.Err())
	}
	if err := s.Commit(ctx, c, flushNext(c, 5)); err != nil {
		t.Fatalf("good commit after refused ones: %v", err)
	}
}

func TestClaimFailsClosedOnBadEpoch(t *testing.T) {
	for _, v := range []string{"abc", "", "0", "-1", "+1", "01", " 1", "1.0", "18446744073709551616"} {
		t.Run(fmt.Sprintf("%q", v), func(t *testing.T) {
			s := newStore(t)
			putRaw(t, s.Keys().Epoch("s0"), v)
			_, err := s.Claim(testCtx(t), "s0", Owner{Writer: "w"}, grant(t), nil)
			if !errors.Is(err, ErrInvalidEpoch) {
				t.Fatalf("Claim: %v, want ErrInvalidEpoch", err)
			}
			if got, _ := raw(t, s.Keys().Epoch("s0")); got != v {
				t.Fatalf("epoch key rewritten to %q", got)
			}
			if _, ok := raw(t, s.Keys().Owner("s0")); ok {
				t.Fatal("owner key written")
			}
		})
	}
}

func TestClaimFailsClosedOnRegressedEpoch(t *testing.T) {
	s := newStore(t)
	for range 3 {
		if err := s.Release(testCtx(t), claim(t, s, "s0", "w")); err != nil {
			t.Fatal(err)
		}
	}
	putRaw(t, s.Keys().Epoch("s0"), "2") // restored from an old backup
	_, err := s.Claim(testCtx(t), "s0", Owner{Writer: "w"}, grant(t), nil)
	if !errors.Is(err, ErrInvalidEpoch) || !strings.Contains(err.Error(), "below the manifest's writer_epoch 3") {
		t.Fatalf("Claim: %v, want ErrInvalidEpoch naming the regression", err)
	}
}

func TestGarbageManifestFailsClosed(t *testing.T) {
	for name, v := range map[string]string{
		"not json":       "garbage",
		"empty":          "",
		"future version": `{"version":2,"writer_epoch":0,"current_generation":1,"replay_cursor":0,"flushed":[],"epochs":[],"source_offsets":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			putRaw(t, s.Keys().Manifest("s0"), v)
			if _, _, err := s.Load(testCtx(t), "s0"); !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("Load: %v, want ErrInvalidManifest", err)
			}
			_, err := s.Claim(testCtx(t), "s0", Owner{Writer: "w"}, grant(t), nil)
			if !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("Claim: %v, want ErrInvalidManifest", err)
			}
			if got, _ := raw(t, s.Keys().Manifest("s0")); got != v {
				t.Fatalf("manifest rewritten to %q", got)
			}
			if _, ok := raw(t, s.Keys().Epoch("s0")); ok {
				t.Fatal("epoch key written")
			}
		})
	}
}

func TestLoadAbsentShard(t *testing.T) {
	s := newStore(t)
	m, rev, err := s.Load(testCtx(t), "never-claimed")
	if err != nil || rev != 0 || !m.Equal(NewManifest()) {
		t.Fatalf("Load = %+v, %d, %v; want NewManifest(), 0, nil", m, rev, err)
	}
}

func TestClaimPrepare(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	c := claim(t, s, "s0", "w")
	if err := s.Commit(ctx, c, flushNext(c, 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Without prepare the new epoch starts at the replay cursor.
	c = claim(t, s, "s0", "w")
	if last, _ := c.Manifest.LastEpoch(); last.StartPosition != 10 || last.StartGeneration != 2 {
		t.Fatalf("default epoch record %+v, want start_position 10, start_generation 2", last)
	}
	if err := s.Release(ctx, c); err != nil {
		t.Fatal(err)
	}

	setTail := func(tail uint64) func(*Manifest) error {
		return func(m *Manifest) error {
			m.Epochs[len(m.Epochs)-1].StartPosition = tail
			return nil
		}
	}
	c, err := s.Claim(ctx, "s0", Owner{Writer: "w"}, grant(t), setTail(17))
	if err != nil {
		t.Fatal(err)
	}
	if last, _ := c.Manifest.LastEpoch(); last.Epoch != 3 || last.StartPosition != 17 {
		t.Fatalf("prepared epoch record %+v", last)
	}
	if err := s.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Without prepare the floor is the older epoch's tail when it is higher.
	c = claim(t, s, "s0", "w")
	if last, _ := c.Manifest.LastEpoch(); last.StartPosition != 17 {
		t.Fatalf("default epoch record %+v, want start_position 17", last)
	}
	if err := s.Commit(ctx, c, flushNext(c, 10)); err != nil { // cursor 27
		t.Fatal(err)
	}
	if err := s.Release(ctx, c); err != nil {
		t.Fatal(err)
	}

	boom := errors.New("boom")
	for name, tc := range map[string]struct {
		prepare func(*Manifest) error
		want    error
	}{
		"error":               {func(*Manifest) error { return boom }, boom},
		"below cursor":        {setTail(20), ErrInvalidTransition},
		"below older epoch":   {setTail(16), ErrInvalidManifest},
		"changes the epoch":   {func(m *Manifest) error { m.WriterEpoch++; return nil }, ErrInvalidManifest},
		"rewrites a record":   {func(m *Manifest) error { m.Epochs[0].StartPosition = 1; return nil }, ErrInvalidTransition},
		"drops the new epoch": {func(m *Manifest) error { m.Epochs = m.Epochs[:len(m.Epochs)-1]; m.WriterEpoch--; return nil }, ErrInvalidTransition},
	} {
		_, err := s.Claim(ctx, "s0", Owner{Writer: "w"}, grant(t), tc.prepare)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Claim = %v, want %v", name, err, tc.want)
		}
	}
	if _, ok := raw(t, s.Keys().Owner("s0")); ok {
		t.Fatal("a refused prepare left an owner")
	}
}

func TestClaimArguments(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	if _, err := s.Claim(ctx, "s0", Owner{Writer: "w"}, clientv3.NoLease, nil); err == nil || !strings.Contains(err.Error(), "no lease") {
		t.Errorf("no lease: %v", err)
	}
	if _, err := s.Claim(ctx, "s0", Owner{}, grant(t), nil); err == nil || !strings.Contains(err.Error(), "Writer is empty") {
		t.Errorf("no writer: %v", err)
	}
	if _, err := s.Claim(ctx, "s/0", Owner{Writer: "w"}, grant(t), nil); !errors.Is(err, ErrInvalidName) {
		t.Errorf("bad shard: %v", err)
	}
	bad := NewStore(server(t).Client(), Keys{Prefix: "p", Table: "bad table"}, StoreOptions{})
	if _, _, err := bad.Load(ctx, "s0"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("bad table: %v", err)
	}
	// A lease the server does not know is a definitive refusal.
	revoked := grant(t)
	if _, err := server(t).Client().Revoke(ctx, revoked); err != nil {
		t.Fatal(err)
	}
	_, err := s.Claim(ctx, "s0", Owner{Writer: "w"}, revoked, nil)
	if err == nil || !strings.Contains(err.Error(), "lease not found") || errors.Is(err, ErrUnknownOutcome) {
		t.Errorf("revoked lease: %v", err)
	}
}

// Revoking the owner's lease deletes the owner key: the claim is fenced and
// a waiting successor proceeds.
func TestLeaseRevokeFencesAndWakesWaiter(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	a := claim(t, s, "s0", "a")
	gone := make(chan error, 1)
	go func() { gone <- s.WaitOwnerGone(ctx, "s0") }()
	select {
	case err := <-gone:
		t.Fatalf("WaitOwnerGone returned while owned: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := server(t).Client().Revoke(ctx, a.Lease); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-gone:
		if err != nil {
			t.Fatalf("WaitOwnerGone: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitOwnerGone did not return after the lease was revoked")
	}
	if err := s.Commit(ctx, a, flushNext(a, 1)); !errors.Is(err, ErrFenced) {
		t.Fatalf("Commit after revoke: %v, want ErrFenced", err)
	}
	if b := claim(t, s, "s0", "b"); b.Epoch != 2 {
		t.Fatalf("successor epoch %d", b.Epoch)
	}
	// Release of the revoked claim: the key is someone else's now.
	if err := s.Release(ctx, a); !errors.Is(err, ErrFenced) {
		t.Fatalf("Release: %v, want ErrFenced", err)
	}
}

func TestWaitOwnerGone(t *testing.T) {
	s := newStore(t)
	if err := s.WaitOwnerGone(testCtx(t), "s0"); err != nil {
		t.Fatalf("no owner: %v", err)
	}
	claim(t, s, "s0", "a")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.WaitOwnerGone(ctx, "s0"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("owned, short deadline: %v", err)
	}
}

// Release of an owner key that already expired is not an error.
func TestReleaseAfterExpiry(t *testing.T) {
	s := newStore(t)
	a := claim(t, s, "s0", "a")
	deleteRaw(t, s.Keys().Owner("s0"))
	if err := s.Release(testCtx(t), a); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !errors.Is(a.Err(), ErrFenced) {
		t.Fatalf("Err after Release = %v", a.Err())
	}
}
