package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Host serves many shards of one table from one process. The shards share
// one etcd lease, one memory budget and one set of metrics.
type Host struct {
	opts    Options
	budget  *memtable.Budget
	metrics *metrics

	// openMu serialises Open and Close and guards lease. Open holds it,
	// not mu, while it claims: a claim waits as long as another writer owns
	// the shard, and a standby must answer Shard and Shards meanwhile.
	openMu sync.Mutex
	lease  *lease
	// liveLease is lease for the scrapes of writer_lease_valid_seconds,
	// which must not wait for openMu (a claim holds it while it waits).
	liveLease atomic.Pointer[lease]
	// schemaChecked is set once the table's schema record holds the
	// configured columns (shardmeta.EnsureSchema); guarded by openMu.
	schemaChecked bool
	schemas       *schemas

	mu      sync.Mutex // guards shards and closing
	shards  map[string]*Shard
	closing bool

	// bg bounds background work (lease watchers, re-claims); Close cancels
	// it first, then waits for bgWG. bgMu guards bgClosed, so that no
	// goroutine is added to bgWG once Close waits for it.
	bg       context.Context
	bgCancel context.CancelFunc
	bgMu     sync.Mutex
	bgClosed bool
	bgWG     sync.WaitGroup

	// relief asks for a round of sealing memtables when the budget runs
	// low (pressure.go).
	relief chan struct{}
}

// NewHost validates opts and returns a host with no shards open.
func NewHost(opts Options) (*Host, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	bg, cancel := context.WithCancel(context.Background())
	h := &Host{opts: opts, budget: opts.newBudget(), metrics: newMetrics(opts.Registerer), shards: map[string]*Shard{},
		bg: bg, bgCancel: cancel}
	h.schemas = newSchemas(&h.opts)
	registerLeaseValid(opts.Registerer, func() time.Duration {
		if l := h.liveLease.Load(); l != nil {
			return l.validFor()
		}
		return 0
	})
	h.startRelief()
	return h, nil
}

// Open claims and opens a shard; opening an open shard returns it. The
// claim waits while another writer owns the shard (until ctx ends); the
// shards already open keep answering meanwhile.
func (h *Host) Open(ctx context.Context, name string) (*Shard, error) {
	h.openMu.Lock()
	defer h.openMu.Unlock()
	h.mu.Lock()
	s, open := h.shards[name]
	closing := h.closing
	h.mu.Unlock()
	switch {
	case closing:
		return nil, fmt.Errorf("%w: the host is closed", ErrClosed)
	case open:
		return s, nil
	}
	if err := h.checkSchema(ctx); err != nil {
		return nil, err
	}
	s, l, err := h.openOnLease(ctx, name)
	if err != nil {
		return nil, err
	}
	if h.opts.ReclaimOnFence {
		s.onFenced = h.reclaimInBackground
	}
	h.mu.Lock()
	h.shards[name] = s
	h.mu.Unlock()
	if l.isLost() { // the watcher of ensureLease may have listed the shards before s
		s.stop(fmt.Errorf("%w: shard %s: the writer's lease was lost", ErrFenced, name))
	}
	return s, nil
}

// CheckSchema holds the configured columns to the table's schema record
// (recording them for a new table) and starts following the record: from
// then on the host serves its current version, whatever changes. Open
// does it at the first claim; a process calls it at start, so that a
// standby configured with the columns of its day keeps to the table
// through changes made while it waits.
func (h *Host) CheckSchema(ctx context.Context) error {
	h.openMu.Lock()
	defer h.openMu.Unlock()
	return h.checkSchema(ctx)
}

// checkSchema holds the configured columns to the table's schema record
// before the first claim: a writer configured with other columns fails
// closed, naming the difference. The caller holds openMu.
func (h *Host) checkSchema(ctx context.Context) error {
	if h.schemaChecked {
		return nil
	}
	keys := shardmeta.Keys{Prefix: h.opts.Prefix, Table: h.opts.Table}
	rec, err := shardmeta.EnsureSchema(ctx, h.opts.Etcd, keys, h.opts.Schema, h.opts.RequestTimeout)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	h.schemas.adopt(rec)
	h.goBackground(func() { h.schemas.watch(h.bg) })
	h.schemaChecked = true
	return nil
}

// Schema is the table's schema: the current version once a shard is
// open, the configured columns before.
func (h *Host) Schema() *schema.Schema {
	if cur := h.schemas.current(); cur != nil {
		return cur.schema
	}
	return h.opts.Schema
}

// leaseAttempts bounds the claims of one Open that find the lease gone.
const leaseAttempts = 3

// openOnLease opens shard name with the host's lease. A claim can find that
// lease gone from etcd: it waited long for another owner, and on a loaded
// machine the keepalives did not keep up. The lease is then marked lost
// (which fences the shards bound to it: etcd dropped their owner keys with
// it) and the claim runs again with a new lease. The caller holds openMu.
func (h *Host) openOnLease(ctx context.Context, name string) (*Shard, *lease, error) {
	for attempt := 1; ; attempt++ {
		if err := h.ensureLease(ctx); err != nil {
			return nil, nil, err
		}
		l := h.lease
		s, err := openShard(ctx, &h.opts, name, l, h.budget, h.metrics, h.schemas)
		if err == nil || !leaseGone(err) || attempt == leaseAttempts || ctx.Err() != nil {
			return s, l, err
		}
		l.markLost(leaseExpired, "the lease no longer exists in etcd (found at claim)")
		h.opts.Logger.Warn("claim found the writer's lease gone; claiming again with a new lease", "shard", name, "err", err)
	}
}

// errLeaseLost stops a claim whose lease was lost while it waited.
var errLeaseLost = errors.New("engine: the writer's lease was lost")

func leaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, errLeaseLost)
}

// ensureLease grants the host's lease (or a new one after the last was
// lost) and fences every shard when it is lost. The caller holds openMu.
func (h *Host) ensureLease(ctx context.Context) error {
	if h.lease != nil && !h.lease.isLost() {
		return nil
	}
	if h.lease != nil {
		h.lease.stop() // marked lost from outside, its keepalive loop may still run
		h.lease = nil
		h.liveLease.Store(nil)
	}
	l, err := grantLease(ctx, h.opts.Etcd, h.opts.LeaseTTL, h.opts.LeaseMargin, h.opts.RequestTimeout, h.opts.Logger, h.metrics)
	if err != nil {
		return err
	}
	watch := func() {
		select {
		case <-l.lost:
		case <-h.bg.Done(): // Close: it closes the shards itself
			return
		}
		for _, s := range h.Shards() {
			if s.lease == l {
				s.stop(fmt.Errorf("%w: shard %s: the writer's lease was lost", ErrFenced, s.name))
			}
		}
	}
	if !h.goBackground(watch) {
		return errors.Join(fmt.Errorf("%w: the host is closed", ErrClosed), l.close())
	}
	h.lease = l
	h.liveLease.Store(l)
	return nil
}

// goBackground runs f in a goroutine that Close waits for; f must return
// soon after h.bg ends. Once Close began it runs nothing and reports false.
func (h *Host) goBackground(f func()) bool {
	h.bgMu.Lock()
	defer h.bgMu.Unlock()
	if h.bgClosed {
		return false
	}
	h.bgWG.Add(1)
	go func() {
		defer h.bgWG.Done()
		f()
	}()
	return true
}

// Reclaim closes shard name if it is open (a fenced shard commits nothing
// on close; its acknowledged rows are in the WAL) and claims it again with a
// new epoch, replaying what the old writer left.
func (h *Host) Reclaim(ctx context.Context, name string) (*Shard, error) {
	h.mu.Lock()
	old := h.shards[name]
	delete(h.shards, name)
	h.mu.Unlock()
	if old != nil {
		if err := old.Close(ctx); err != nil {
			h.opts.Logger.Warn("close fenced shard", "shard", name, "err", err)
		}
	}
	h.checkLeaseAlive(ctx)
	return h.Open(ctx, name)
}

// checkLeaseAlive asks etcd whether the host's lease still exists and
// marks it lost if not. A commit can find the shard fenced (its owner key
// gone with a revoked lease) before the keepalive loop, which runs every
// TTL/3, learns the lease is lost; a re-claim with it would fail with
// "requested lease not found" for good. A failed question changes nothing:
// the claim then fails or succeeds on its own.
func (h *Host) checkLeaseAlive(ctx context.Context) {
	h.openMu.Lock()
	l := h.lease
	h.openMu.Unlock()
	if l == nil || l.isLost() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, h.opts.RequestTimeout)
	defer cancel()
	resp, err := h.opts.Etcd.TimeToLive(rctx, l.id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		l.markLost(leaseExpired, "the lease no longer exists in etcd (found at re-claim)")
	case err == nil && resp.TTL <= 0:
		l.markLost(leaseExpired, "the lease no longer exists in etcd (found at re-claim)")
	}
}

// reclaimInBackground is a fenced shard's hook: it starts the re-claim in a
// goroutine that Close waits for. It never blocks on the host's locks.
func (h *Host) reclaimInBackground(old *Shard) {
	h.goBackground(func() { h.reclaimFenced(old) })
}

func (h *Host) reclaimFenced(old *Shard) {
	h.mu.Lock()
	current, closing := h.shards[old.name], h.closing
	h.mu.Unlock()
	if current != old || closing {
		return
	}
	ctx, cancel := context.WithTimeout(h.bg, 10*time.Minute)
	defer cancel()
	s, err := h.Reclaim(ctx, old.name)
	if err != nil {
		h.opts.Logger.Error("re-claim fenced shard", "shard", old.name, "err", err)
		return
	}
	h.opts.Logger.Info("re-claimed fenced shard", "shard", s.name, "epoch", s.Epoch())
}

// Shard returns an open shard.
func (h *Host) Shard(name string) (*Shard, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.shards[name]
	return s, ok
}

// Shards lists the open shards by name.
func (h *Host) Shards() []*Shard {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Shard, 0, len(h.shards))
	for _, s := range h.shards {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Close ends the background work and waits for it, closes every shard,
// then revokes the lease so successors can claim at once.
func (h *Host) Close(ctx context.Context) error {
	h.bgMu.Lock()
	h.bgClosed = true
	h.bgMu.Unlock()
	h.bgCancel()
	h.bgWG.Wait()   // a re-claim may wait for a running Open, as Close does
	h.openMu.Lock() // after a running Open: its ctx, not Close, bounds it
	defer h.openMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closing = true
	var errs []error
	for name, s := range h.shards {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shard %s: %w", name, err))
		}
		delete(h.shards, name)
	}
	if h.lease != nil {
		h.liveLease.Store(nil)
		if err := h.lease.close(); err != nil {
			errs = append(errs, err)
		}
		h.lease = nil
	}
	return errors.Join(errs...)
}

// Table is the name of the table whose shards the host holds.
func (h *Host) Table() string { return h.opts.Table }
