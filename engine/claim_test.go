package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// lostAnswers is a gRPC interceptor over a real etcd: the first claim
// transaction (the one that puts the owner key) applies, but its answer is
// lost (a deadline); then the next few requests fail as if etcd were
// unavailable, so the claim must be retried whole with no memory of its
// first attempt.
type lostAnswers struct {
	// match picks the transactions whose answer is lost (the first one
	// only); nil: claim transactions.
	match       func(*pb.TxnRequest) bool
	claimsLost  atomic.Int32 // matching transactions whose answer was lost
	unavailable atomic.Int32 // requests still to fail with Unavailable
	// down, once set, fails every transaction with Unavailable until the
	// test clears it; stayDown sets it after the lost answer.
	down     atomic.Bool
	stayDown bool
}

func (l *lostAnswers) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == "/etcdserverpb.KV/Txn" && (l.down.Load() || l.unavailable.Add(-1) >= 0) {
		return status.Error(codes.Unavailable, "injected: etcd unavailable")
	}
	err := invoke(ctx, method, req, reply, cc, opts...)
	match := l.match
	if match == nil {
		match = putsOwner
	}
	if txn, ok := req.(*pb.TxnRequest); ok && err == nil && match(txn) && l.claimsLost.Add(1) == 1 {
		if l.stayDown {
			l.down.Store(true)
		} else {
			l.unavailable.Store(3)
		}
		return status.Error(codes.DeadlineExceeded, "injected: the claim applied but its answer was lost")
	}
	return err
}

func putsOwner(txn *pb.TxnRequest) bool { return puts(txn, "/owner") }

// putsManifestOnly matches a manifest commit of an owner (not a claim).
func putsManifestOnly(txn *pb.TxnRequest) bool { return puts(txn, "/manifest") && !puts(txn, "/owner") }

func puts(txn *pb.TxnRequest, suffix string) bool {
	for _, op := range txn.Success {
		if p := op.GetRequestPut(); p != nil && strings.HasSuffix(string(p.Key), suffix) {
			return true
		}
	}
	return false
}

// faultyClient is a client of the package's etcd through faults.
func faultyClient(t *testing.T, faults *lostAnswers) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: etcdEndpoints, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(faults.intercept)},
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestClaimRecognisesItsOwnAmbiguousClaim: a claim transaction applies but
// its answer is lost, and the reads that would resolve it fail as well, so
// the engine retries the whole claim. The retry finds an owner key under its
// own lease: that is its own claim, not another writer's, and it must adopt
// it at once rather than wait for the key's DELETE (which, with its own
// lease kept alive, would never come). The shard is then served.
func TestClaimRecognisesItsOwnAmbiguousClaim(t *testing.T) {
	faults := &lostAnswers{}
	cli := faultyClient(t, faults)
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.Etcd = cli
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	h := openHost(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer h.Close(context.Background())
	s, err := h.Open(ctx, "s0")
	if err != nil {
		t.Fatalf("open after an ambiguous claim: %v (claim answers lost: %d)", err, faults.claimsLost.Load())
	}
	if n := faults.claimsLost.Load(); n != 1 {
		t.Fatalf("%d claim transactions ran, want exactly 1: the first one applied and must be adopted, not repeated", n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP writer_claims_total Claims of the shard, by result (claimed, adopted, failed).
# TYPE writer_claims_total counter
writer_claims_total{result="adopted",shard="s0"} 1
`), "writer_claims_total"); err != nil {
		t.Fatalf("the adopted claim's metrics: %v", err)
	}
	wantSample(t, "the adopted claim", reg, 1, "writer_shard_owned", "shard", "s0")
	if _, err := s.Append(ctx, rows("r", 0, 3), Source{}); err != nil {
		t.Fatalf("append to the adopted claim: %v", err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatalf("flush through the adopted claim: %v", err)
	}
	got, _ := committed(t, opts.FS, opts, "s0")
	if len(got) != 3 {
		t.Fatalf("committed %d ids, want 3", len(got))
	}
}

// TestDrainRecognisesItsOwnAmbiguousCommit: a drain's manifest commit
// applies but its answer is lost and the read-back fails too (unknown
// outcome). The next commit, a flush, must first repeat that drain byte for
// byte and so recognise it as done, instead of taking the manifest it finds
// for another writer's and fencing itself.
func TestDrainRecognisesItsOwnAmbiguousCommit(t *testing.T) {
	ctx := context.Background()
	faults := &lostAnswers{}
	faults.claimsLost.Store(1) // disarmed until the drain: only the first match is lost
	faults.match, faults.stayDown = putsManifestOnly, true
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.RequestTimeout = time.Second // how long the read-back of the lost commit tries
	opts.Etcd = faultyClient(t, faults)
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	for i := range 2 {
		if _, err := s.Append(ctx, rows("g", 10*i, 10), Source{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	setWatermark(t, opts, "s0", 2)
	faults.claimsLost.Store(0) // arm
	_, first := s.Drain(ctx)
	faults.down.Store(false)
	if faults.claimsLost.Load() == 0 || !errors.Is(first, shardmeta.ErrUnknownOutcome) {
		t.Fatalf("drain: %v, want an unknown outcome (%d commits lost)", first, faults.claimsLost.Load())
	}
	if _, err := s.Append(ctx, rows("g", 20, 10), Source{}); err != nil {
		t.Fatalf("append after a drain of unknown outcome: %v", err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatalf("flush after a drain of unknown outcome (%v): %v", first, err)
	}
	if got := s.Manifest().Flushed; len(got) != 1 || got[0].Number != 3 {
		t.Fatalf("after the flush the manifest holds %+v, want generation 3 alone", got)
	}
}
