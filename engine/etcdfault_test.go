package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/internal/etcdcluster"
	"github.com/rollwal/rollwal/vfs"
)

// producers append unique rows to a shard until stopped, recording every
// acknowledged id and when the last acknowledgement returned.
type producers struct {
	mu      sync.Mutex
	acked   map[string]bool
	lastAck time.Time
	count   atomic.Int64
	errs    []error
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startProducers(s *Shard, n int) *producers {
	p := &producers{acked: map[string]bool{}, stop: make(chan struct{})}
	for i := range n {
		p.wg.Add(1)
		go p.run(s, i)
	}
	return p
}

func (p *producers) run(s *Shard, i int) {
	defer p.wg.Done()
	for k := 0; ; k++ {
		select {
		case <-p.stop:
			return
		default:
		}
		batch := rows(fmt.Sprintf("p%d-%d", i, k), 0, 8)
		_, err := s.Append(context.Background(), batch, Source{})
		p.mu.Lock()
		if err == nil {
			p.lastAck = time.Now()
			for _, r := range batch {
				p.acked[r["id"].(string)] = true
			}
		} else {
			p.errs = append(p.errs, err)
		}
		p.mu.Unlock()
		if err != nil {
			if errors.Is(err, ErrFenced) || errors.Is(err, ErrStopped) {
				return
			}
			continue
		}
		p.count.Add(1)
	}
}

// progress waits until n more appends were acknowledged.
func (p *producers) progress(t *testing.T, n int64, during string) {
	t.Helper()
	target := p.count.Load() + n
	waitFor(t, fmt.Sprintf("%d acknowledged appends %s", n, during), func() bool { return p.count.Load() >= target })
}

func (p *producers) halt() {
	close(p.stop)
	p.wg.Wait()
}

// TestEtcdFaultsCostLatencyNotCorrectness: leader loss, member restarts and
// a paused member of the 3-member cluster during appends slow the writer
// down but lose nothing and do not fence it; every acknowledged row is
// there afterwards.
func TestEtcdFaultsCostLatencyNotCorrectness(t *testing.T) {
	ctx := context.Background()
	cl := etcdcluster.Start(t, etcdcluster.Options{})
	opts := Options{
		DataDir: t.TempDir(), FS: vfs.Default, Table: tableName(t, ""), Etcd: keepAliveClient(t, cl),
		LeaseTTL: 3 * time.Second, RequestTimeout: time.Second, FlushBytes: 128 << 10, FlushAge: -1,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	p := startProducers(s, 4)
	// Each phase needs acknowledgements and a manifest commit, which needs
	// an etcd quorum: the writer must get through every fault.
	phase := func(during string) {
		t.Helper()
		p.progress(t, 300, during)
		n := len(s.Manifest().Flushed)
		waitFor(t, "a generation committed "+during, func() bool { return len(s.Manifest().Flushed) > n })
	}
	phase("before any fault")
	leader, err := cl.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustDo(t, cl.Kill(leader))
	phase("with the leader killed")
	mustDo(t, cl.Restart(leader))
	phase("after the old leader restarted")
	// A follower of the leader now: the kill elected a new one, which may
	// be the member after the old leader (pausing it would be a leader
	// loss, which the lease may not outlive).
	if leader, err = cl.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	follower := (leader + 1) % 3
	mustDo(t, cl.Pause(follower))
	phase("with a follower paused")
	mustDo(t, cl.Resume(follower))
	mustDo(t, cl.Kill(follower))
	mustDo(t, cl.Restart(follower))
	phase("after a follower restarted")
	p.halt()
	if _, err := s.Flush(ctx); err != nil {
		t.Fatalf("flush after the faults: %v", err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(p.errs) > 0 {
		t.Fatalf("%d appends failed during the faults, first: %v", len(p.errs), p.errs[0])
	}
	verifyAcked(t, opts, p.acked)
}

// TestCutOffWriterFences: a writer cut off from every member stops
// acknowledging no later than its lease deadline (last keepalive sent +
// TTL − margin) and goes fenced.
func TestCutOffWriterFences(t *testing.T) {
	cl := etcdcluster.Start(t, etcdcluster.Options{})
	opts := Options{
		DataDir: t.TempDir(), FS: vfs.Default, Table: tableName(t, ""), Etcd: cl.Client(t),
		LeaseTTL: 2 * time.Second, RequestTimeout: time.Second, FlushAge: -1,
	}
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	p := startProducers(s, 2)
	p.progress(t, 20, "before the cut")
	for i := range 3 {
		mustDo(t, cl.Pause(i))
	}
	// Every keepalive that could still succeed was sent before this instant.
	cut := time.Now()
	waitFor(t, "the cut-off writer to go fenced", func() bool { return errors.Is(s.err(), ErrFenced) })
	p.halt()
	for i := range 3 {
		mustDo(t, cl.Resume(i))
	}
	bound := cut.Add(opts.LeaseTTL)
	if p.lastAck.After(bound) {
		t.Fatalf("an append was acknowledged %v after the cut; the lease allows at most %v", p.lastAck.Sub(cut), opts.LeaseTTL)
	}
	t.Logf("last acknowledgement %v after the cut; fenced: %v", p.lastAck.Sub(cut), s.err())
	h.Close(context.Background())
}

// keepAliveClient is a client to every member whose gRPC keepalives notice
// a hung (paused) member within a second, so the balancer stops sending it
// requests, as production clients do with etcdclient's keepalive settings.
func keepAliveClient(t *testing.T, cl *etcdcluster.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cl.Endpoints(), DialTimeout: 5 * time.Second,
		DialKeepAliveTime: 500 * time.Millisecond, DialKeepAliveTimeout: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// verifyAcked reopens the shard and checks every acknowledged id is in
// exactly one committed generation or the replayed memtable.
func verifyAcked(t *testing.T, opts Options, acked map[string]bool) {
	t.Helper()
	ctx := context.Background()
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	inGen, _ := committed(t, opts.FS, opts, "s0")
	inMem := memtableIDs(s)
	for id := range acked {
		if inGen[id]+inMem[id] != 1 {
			t.Fatalf("acknowledged id %s: %d committed, %d in the memtable", id, inGen[id], inMem[id])
		}
	}
	t.Logf("%d acknowledged ids all present once", len(acked))
}
