package sim

import (
	"context"
	"strings"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdFaults sits on one writer process's etcd client as a gRPC unary
// interceptor (the engine's claim tests do the same with lostAnswers).
// Armed, it lets the next matching transaction apply on the real etcd and
// then loses its answer (DeadlineExceeded), and fails the process's next
// few KV requests (transactions and reads: the read-backs that would
// resolve the outcome) with Unavailable, so the writer must recognise its
// own ambiguous claims, commits, drains and releases.
type etcdFaults struct {
	armed atomic.Bool
	match atomic.Int32 // a txnMatch
	then  atomic.Int32 // Unavailable answers after the lost one
	// unavailable is how many KV requests still fail.
	unavailable atomic.Int32
	// lost counts the answers lost, over the whole world; fired those of
	// this process.
	lost, fired *atomic.Int32
}

// injectedEtcdError reports whether err comes from an etcdFaults.
func injectedEtcdError(err error) bool { return strings.Contains(err.Error(), "(injected)") }

// txnMatch picks the transactions whose answer an armed etcdFaults loses.
type txnMatch int32

const (
	matchAnyTxn  txnMatch = iota
	matchClaim            // puts the owner key
	matchCommit           // puts the manifest, not the owner key
	matchRelease          // deletes the owner key
	numMatches
)

var matchNames = [numMatches]string{"any transaction", "a claim", "a manifest commit", "a release"}

func (m txnMatch) String() string { return matchNames[m] }

// arm loses the answer of the next transaction that m matches, then fails
// the next `then` KV requests.
func (f *etcdFaults) arm(m txnMatch, then int) {
	f.match.Store(int32(m))
	f.then.Store(int32(then))
	f.armed.Store(true)
}

func (f *etcdFaults) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if strings.HasPrefix(method, "/etcdserverpb.KV/") && f.takeUnavailable() {
		return status.Error(codes.Unavailable, "sim: etcd unavailable (injected)")
	}
	err := invoke(ctx, method, req, reply, cc, opts...)
	if txn, ok := req.(*pb.TxnRequest); ok && err == nil && f.armed.Load() && txnMatch(f.match.Load()).matches(txn) &&
		f.armed.CompareAndSwap(true, false) {
		f.unavailable.Store(f.then.Load())
		f.lost.Add(1)
		f.fired.Add(1)
		return status.Error(codes.DeadlineExceeded, "sim: the transaction applied but its answer was lost (injected)")
	}
	return err
}

func (f *etcdFaults) takeUnavailable() bool {
	for {
		n := f.unavailable.Load()
		if n <= 0 {
			return false
		}
		if f.unavailable.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (m txnMatch) matches(txn *pb.TxnRequest) bool {
	switch m {
	case matchClaim:
		return txnPuts(txn, "/owner")
	case matchCommit:
		return txnPuts(txn, "/manifest") && !txnPuts(txn, "/owner")
	case matchRelease:
		for _, op := range txn.Success {
			if d := op.GetRequestDeleteRange(); d != nil && strings.HasSuffix(string(d.Key), "/owner") {
				return true
			}
		}
		return false
	}
	return true
}

func txnPuts(txn *pb.TxnRequest, suffix string) bool {
	for _, op := range txn.Success {
		if p := op.GetRequestPut(); p != nil && strings.HasSuffix(string(p.Key), suffix) {
			return true
		}
	}
	return false
}

// etcdLost arms a writer process's etcd faults: its next transaction that
// the draw matches applies but its answer is lost, and its next few KV
// requests fail as unavailable. Then the process does what commits: a
// claim and a flush, a handoff away from it (its close flushes and
// releases), or a re-claim (a release and a claim). The fault stays armed
// until a matching transaction comes, whatever op sends it.
func (w *world) etcdLost(d draw) {
	h := w.hosts[d.b%len(w.hosts)]
	m, then := txnMatch(d.c%int(numMatches)), 1+d.d%4
	h.faults.arm(m, then)
	shard := w.shards[d.a%len(w.shards)]
	w.tracef("%s: etcd will lose the answer to %s of %s, then be unavailable for %d requests", shard, m, h, then)
	mine := func() *owned {
		if o := w.owner[shard]; o != nil && o.host == h && o.s.Status().Stopped == "" {
			return o
		}
		w.handoff(shard, h.slot, true)
		if o := w.owner[shard]; o != nil && o.host == h {
			return o
		}
		return nil
	}
	switch (d.c >> 3) % 3 {
	case 0:
		if o := mine(); o != nil && !w.crashed() {
			w.flush(shard, o)
		}
	case 1:
		if mine() != nil && !w.crashed() {
			w.handoff(shard, h.slot+1+d.d%2, true)
		}
	case 2:
		if mine() != nil && !w.crashed() {
			w.handoff(shard, h.slot, true)
		}
	}
}
