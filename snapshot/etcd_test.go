package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// newEtcdStore returns an etcd backend on the package's embedded server,
// under a prefix of its own, wrapped for the conformance suite.
func newEtcdStore(t testing.TB, ttl time.Duration) *probedStore {
	t.Helper()
	cli := etcdServer(t).Client()
	s, err := NewEtcd(cli, fmt.Sprintf("rollwal-test/snap-%d-%d", runID, keySeq.Add(1)), EtcdOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return &probedStore{Store: s, ttl: ttl, remaining: func(ctx context.Context, key Key) (time.Duration, error) {
		resp, err := cli.Get(ctx, s.etcdKey(key))
		if err != nil || len(resp.Kvs) == 0 {
			return 0, fmt.Errorf("key %s: %v (%d kvs)", key, err, len(resp.Kvs))
		}
		if resp.Kvs[0].Lease == 0 {
			return 0, nil
		}
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
		if err != nil {
			return 0, err
		}
		return time.Duration(ttl.TTL) * time.Second, nil
	}}
}

func TestEtcdConformance(t *testing.T) {
	for _, ttl := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("ttl=%s", ttl), func(t *testing.T) {
			runConformance(t, func(t *testing.T) Store { return newEtcdStore(t, ttl) })
		})
	}
}

// faultKV commits transactions for real, then reports err as if the answer
// had been lost (applied=true), or reports err without sending.
type faultKV struct {
	clientv3.KV
	err     error
	applied bool
}

func (f *faultKV) Txn(ctx context.Context) clientv3.Txn { return &faultTxn{f.KV.Txn(ctx), f} }

type faultTxn struct {
	clientv3.Txn
	f *faultKV
}

func (x *faultTxn) If(c ...clientv3.Cmp) clientv3.Txn  { x.Txn = x.Txn.If(c...); return x }
func (x *faultTxn) Then(o ...clientv3.Op) clientv3.Txn { x.Txn = x.Txn.Then(o...); return x }
func (x *faultTxn) Else(o ...clientv3.Op) clientv3.Txn { x.Txn = x.Txn.Else(o...); return x }
func (x *faultTxn) Commit() (*clientv3.TxnResponse, error) {
	if x.f.applied {
		if _, err := x.Txn.Commit(); err != nil {
			return nil, err
		}
	}
	return nil, x.f.err
}

// TestEtcdUnknownOutcomeConverges: a transaction that applied but whose
// answer was lost is ErrUnknownOutcome, not "not applied"; its lease is kept
// (revoking it would delete the snapshot it may hold); persisting the same
// offset again succeeds, because the fence admits an equal offset.
func TestEtcdUnknownOutcomeConverges(t *testing.T) {
	ps := newEtcdStore(t, time.Hour)
	s := ps.Store.(*Etcd)
	key := testKey(t)
	mustPersist(t, s, key, snap(5, "five"))

	real := s.kv
	s.kv = &faultKV{KV: real, err: context.DeadlineExceeded, applied: true}
	err := s.Persist(ctxFor(t), key, snap(9, "nine"))
	if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Persist with a lost answer = %v; want ErrUnknownOutcome wrapping the deadline", err)
	}
	s.kv = real
	wantStored(t, s, key, snap(9, "nine")) // it did apply, and its lease was not revoked
	if left, err := ps.remaining(ctxFor(t), key); err != nil || left <= 0 {
		t.Fatalf("remaining TTL after the unknown outcome: %s, %v", left, err)
	}
	mustPersist(t, s, key, snap(9, "nine"))
	wantStored(t, s, key, snap(9, "nine"))
}

// TestEtcdDefiniteRefusalIsNotUnknown: an error etcd returns before its
// state machine ran (here InvalidArgument) is a plain failure.
func TestEtcdDefiniteRefusalIsNotUnknown(t *testing.T) {
	s := newEtcdStore(t, time.Hour).Store.(*Etcd)
	key := testKey(t)
	real := s.kv
	s.kv = &faultKV{KV: real, err: status.Error(codes.InvalidArgument, "injected")}
	err := s.Persist(ctxFor(t), key, snap(1, "x"))
	s.kv = real
	if err == nil || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("Persist refused by etcd = %v; want a definite error", err)
	}
	wantNotFound(t, s, key)
}

// TestEtcdLeasesDoNotPileUp: a lease per write, but the replaced version's
// lease is revoked after each write and an unused one after each refusal,
// so a key holds one lease however often it is written.
func TestEtcdLeasesDoNotPileUp(t *testing.T) {
	s := newEtcdStore(t, time.Hour)
	cli := etcdServer(t).Client()
	count := func() int {
		resp, err := cli.Leases(ctxFor(t))
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Leases)
	}
	before := count()
	key := testKey(t)
	for off := range int64(20) {
		mustPersist(t, s, key, snap(off, "x"))
		mustPersist(t, s, key, snap(off, "again"))
		if err := s.Persist(ctxFor(t), key, snap(off-1, "stale")); off > 0 && !errors.Is(err, ErrConflict) {
			t.Fatal(err)
		}
	}
	if got := count() - before; got != 1 {
		t.Errorf("after 60 persists of one key, %d new leases exist; want 1", got)
	}
	if err := s.Delete(ctxFor(t), key); err != nil {
		t.Fatal(err)
	}
	if got := count() - before; got != 0 {
		t.Errorf("after the delete, %d new leases exist; want 0", got)
	}
}

// TestEtcdCorruptRecordFailsClosed: a stored value that is not a snapshot
// record is refused by Get and Persist alike (never read as offset 0); Delete
// clears it.
func TestEtcdCorruptRecordFailsClosed(t *testing.T) {
	s := newEtcdStore(t, 0).Store.(*Etcd)
	cli := etcdServer(t).Client()
	for name, raw := range map[string]string{
		"garbage":         "not json",
		"no offset":       `{"version":1}`,
		"null offset":     `{"version":1,"offset":null}`,
		"negative offset": `{"version":1,"offset":-3}`,
		"unknown field":   `{"version":1,"offset":3,"epoch":2}`,
		"other version":   `{"version":2,"offset":3}`,
		"trailing data":   `{"version":1,"offset":3} {}`,
	} {
		key := testKey(t)
		if _, err := cli.Put(ctxFor(t), s.etcdKey(key), raw); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctxFor(t), key); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Get = %v; want ErrCorrupt", name, err)
		}
		if err := s.Persist(ctxFor(t), key, snap(100, "x")); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Persist = %v; want ErrCorrupt", name, err)
		}
		if err := s.Delete(ctxFor(t), key); err != nil {
			t.Fatal(err)
		}
		mustPersist(t, s, key, snap(1, "fresh"))
	}
}

// TestEtcdExpiryEndsProtection pins the TTL boundary: once the snapshot's
// lease expires the key is absent, and a lower offset lands.
func TestEtcdExpiryEndsProtection(t *testing.T) {
	s := newEtcdStore(t, time.Second)
	key := testKey(t)
	mustPersist(t, s, key, snap(10, "ten"))
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := s.Get(ctxFor(t), key)
		if errors.Is(err, ErrNotFound) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("snapshot with a 1s TTL still there after 15s (err %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mustPersist(t, s, key, snap(3, "after expiry"))
	wantStored(t, s, key, snap(3, "after expiry"))
}

func TestNewEtcdRejectsBadOptions(t *testing.T) {
	cli := etcdServer(t).Client()
	for _, prefix := range []string{"", "/x", "x/", "a//b", "a/../b", "sp ace"} {
		if _, err := NewEtcd(cli, prefix, EtcdOptions{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("prefix %q: %v; want ErrInvalid", prefix, err)
		}
	}
	if _, err := NewEtcd(cli, "p", EtcdOptions{TTL: -time.Second}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative TTL: %v; want ErrInvalid", err)
	}
	if _, err := NewEtcd(nil, "p", EtcdOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil client: %v; want ErrInvalid", err)
	}
}

// FuzzDecodeEtcd: a stored value never panics the decoder; what it accepts
// is a valid snapshot that survives an encode/decode round trip.
func FuzzDecodeEtcd(f *testing.F) {
	for _, s := range []Snapshot{{Offset: 0}, snap(7, "seven"), {Offset: 1 << 62, Value: []byte{0, 1}, Metadata: map[string]string{"k": ""}}} {
		b, err := encodeEtcd(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"version":1,"offset":null}`))
	f.Add([]byte(`{"version":1,"offset":1e3}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		key := Key{"t", "s", "x"}
		s, err := decodeEtcd(key, &mvccpb.KeyValue{Key: []byte("k"), Value: raw})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error %v is not ErrCorrupt", err)
			}
			return
		}
		if s.Offset < 0 {
			t.Fatalf("decoded a negative offset %d", s.Offset)
		}
		b, err := encodeEtcd(s)
		if err != nil {
			return // e.g. metadata that is not valid UTF-8 cannot be persisted
		}
		s2, err := decodeEtcd(key, &mvccpb.KeyValue{Key: []byte("k"), Value: b})
		if err != nil || s2.Offset != s.Offset || !bytes.Equal(s2.Value, s.Value) || !maps.Equal(s2.Metadata, s.Metadata) {
			t.Fatalf("round trip: %+v -> %+v, %v", s, s2, err)
		}
	})
}
