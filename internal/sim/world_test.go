package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/etcdembed"
	"github.com/rollwal/rollwal/internal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/internal/vfs"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/snapshot"
)

const (
	dataDir    = "/data"
	prefix     = "rollwal"
	snapPrefix = "simsnap"
	// opTimeout bounds every operation, so a stuck protocol (a claim that
	// waits forever for an owner key) fails the seed instead of hanging.
	opTimeout = 45 * time.Second
	// hostLeaseTTL is short so that an expiry costs the run little; the
	// engine's minimum is 1s and etcd's with the embedded server's ticks
	// about as much, but 1s leaves no room on two busy cores.
	hostLeaseTTL = 2 * time.Second
)

// config is what one seed's world looks like; drawn from the seed.
type config struct {
	shards, hosts, coords int
	flushBytes            int64
	// exclusionOff is the probability that a host incarnation runs with
	// DisableSourceExclusion.
	exclusionOff float64
	// noFlushOnClose is the probability that a host incarnation does not
	// flush when it closes a shard.
	noFlushOnClose float64
	// coordBudget is the merge coordinators' MemoryBudget: a tiny one
	// stages one generation per pass.
	coordBudget int64
}

func (c config) String() string {
	return fmt.Sprintf("shards=%d hosts=%d coordinators=%d flush_bytes=%d exclusion_off=%.1f no_flush_on_close=%.1f coord_budget=%d",
		c.shards, c.hosts, c.coords, c.flushBytes, c.exclusionOff, c.noFlushOnClose, c.coordBudget)
}

func drawConfig(rng *rand.Rand) config {
	return config{
		shards:         2 + rng.IntN(2),
		hosts:          2 + rng.IntN(2),
		coords:         1 + rng.IntN(2),
		flushBytes:     []int64{12 << 10, 48 << 10, 4 << 20}[rng.IntN(3)],
		exclusionOff:   []float64{0, 0, 0.5, 1}[rng.IntN(4)],
		noFlushOnClose: []float64{0, 0.5, 1}[rng.IntN(3)],
		coordBudget:    []int64{1, 64 << 10, 64 << 20}[rng.IntN(3)],
	}
}

// host is one writer process: an engine.Host with its own etcd client, so
// that cutting the client is a network partition of that process alone.
type host struct {
	slot, inc int
	name      string
	h         *engine.Host
	cli       *clientv3.Client
	exclOff   bool
	noFlush   bool
}

func (h *host) String() string {
	s := h.name
	if h.exclOff {
		s += "[no-exclusion]"
	}
	return s
}

// owned is a shard's current writer as the simulation assigned it.
type owned struct {
	host *host
	s    *engine.Shard
}

// zombie is a Shard object whose writer lost (or gave up) the shard and is
// still called.
type zombie struct {
	shard string
	s     *engine.Shard
	host  *host
	epoch uint64
	// succeeded is set once a successor claimed the shard: from then on the
	// zombie must acknowledge and commit nothing.
	succeeded bool
	why       string
}

// coord is a merge coordinator slot; c is nil while the slot has none.
type coord struct {
	slot int
	c    *publish.Coordinator
	// plan is a plan made by an earlier step and not yet staged.
	plan *publish.Plan
}

type stats struct {
	steps, appends, acks, unknowns, refusals, retries, flushes int
	crashes, merges, mergeCommits, fences, zombieCalls, claims int
	partitions, revokes, bumps, lags, droppedInBase            int
	// durableUnknowns are ErrUnknownOutcome: written, not acknowledged.
	durableUnknowns int
	// retriedCommitted are ids a retry stored again after their first
	// attempt had committed.
	retriedCommitted int
	// promptRetriedCommitted are those of them whose retry was prompt.
	promptRetriedCommitted int
}

// world is one seed's simulation.
type world struct {
	t     testing.TB
	seed  uint64
	steps int
	rng   *rand.Rand // one draw sequence per step, whatever the state
	aux   *rand.Rand // choices that depend on the state
	cfg   config
	ctx   context.Context

	srv   *etcdembed.Server
	cli   *clientv3.Client // the observer's: checks, revokes, faults
	table string
	keys  shardmeta.Keys
	meta  *shardmeta.Store
	snaps *snapshot.Etcd

	mem *vfs.MemFS
	inj *vfs.Injector
	fs  vfs.FS

	shards   []string
	hosts    []*host
	incs     int
	owner    map[string]*owned
	zombies  []*zombie
	coords   []*coord
	armed    bool
	step     int
	nextID   int
	offsets  map[string]int64
	clients  []*clientv3.Client
	m        *model
	st       stats
	trace    []string
	failures []string
	log      *slog.Logger
}

func newWorld(t testing.TB, srv *etcdembed.Server, seed uint64, steps int) *world {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	w := &world{
		t: t, seed: seed, steps: steps, rng: rng,
		aux: rand.New(rand.NewPCG(seed, 0xa0c)),
		ctx: context.Background(), srv: srv,
		table: etcdtest.Name(t, fmt.Sprintf("-%d", seed), 100),
		mem:   vfs.NewStrictMem(), inj: &vfs.Injector{},
		owner: map[string]*owned{}, offsets: map[string]int64{}, m: newModel(),
		log: slog.New(slog.DiscardHandler),
	}
	if *flagEngineLog {
		w.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	w.cfg = drawConfig(rng)
	w.fs = vfs.Inject(w.mem, w.inj)
	w.cli = w.newClient()
	w.keys = shardmeta.Keys{Prefix: prefix, Table: w.table}
	w.meta = shardmeta.NewStore(w.cli, w.keys, shardmeta.StoreOptions{RequestTimeout: 10 * time.Second})
	snaps, err := snapshot.NewEtcd(w.cli, snapPrefix, snapshot.EtcdOptions{})
	if err != nil {
		w.fatalf("snapshot store: %v", err)
	}
	w.snaps = snaps
	for i := range w.cfg.shards {
		w.shards = append(w.shards, fmt.Sprintf("s%d", i))
	}
	for i := range w.cfg.hosts {
		w.hosts = append(w.hosts, w.newHost(i))
	}
	for i := range w.cfg.coords {
		w.coords = append(w.coords, &coord{slot: i})
	}
	w.tracef("config %s table %s", w.cfg, w.table)
	return w
}

func (w *world) newClient() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: w.srv.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		w.fatalf("etcd client: %v", err)
	}
	w.clients = append(w.clients, cli)
	return cli
}

// newHost starts a new incarnation of a writer process in slot.
func (w *world) newHost(slot int) *host {
	w.incs++
	h := &host{slot: slot, inc: w.incs, name: fmt.Sprintf("h%d.%d", slot, w.incs), cli: w.newClient(),
		exclOff: w.aux.Float64() < w.cfg.exclusionOff, noFlush: w.aux.Float64() < w.cfg.noFlushOnClose}
	eh, err := engine.NewHost(engine.Options{
		DataDir: dataDir, FS: w.fs, Table: w.table, Prefix: prefix, Etcd: h.cli, WriterID: h.name,
		LeaseTTL: hostLeaseTTL, RequestTimeout: 5 * time.Second,
		WALSegmentSize: 64 << 10, FlushBytes: w.cfg.flushBytes, FlushAge: -1, MemoryBudget: 64 << 20,
		NoFlushOnClose: h.noFlush, DisableSourceExclusion: h.exclOff, Snapshots: w.snaps,
		Logger: w.log.With("host", h.name),
	})
	if err != nil {
		w.fatalf("new host: %v", err)
	}
	h.h = eh
	return h
}

func (w *world) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.ctx, opTimeout)
}

// tracef records what happened; the trace is printed when the seed fails.
func (w *world) tracef(format string, args ...any) {
	line := fmt.Sprintf("[%3d] ", w.step) + fmt.Sprintf(format, args...)
	w.trace = append(w.trace, line)
	if *flagTrace {
		w.t.Log(line)
	}
}

// violatef records a broken invariant; the seed stops after the step.
func (w *world) violatef(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.failures = append(w.failures, msg)
	w.tracef("VIOLATION: %s", msg)
}

// fatalf stops the seed for a failure of the simulation itself.
func (w *world) fatalf(format string, args ...any) {
	w.t.Helper()
	w.report()
	w.t.Fatalf("seed %d: "+format, append([]any{w.seed}, args...)...)
}

// report prints the trace and how to replay the seed.
func (w *world) report() {
	w.t.Helper()
	const tail = 400
	tr := w.trace
	if len(tr) > tail {
		tr = tr[len(tr)-tail:]
	}
	w.t.Logf("seed %d trace (last %d lines):\n%s", w.seed, len(tr), strings.Join(tr, "\n"))
	w.t.Logf("replay: %s", replayCommand(w.seed, w.steps))
}

// crashed reports whether a crash point was reached; then the caller must
// recover before touching anything else.
func (w *world) crashed() bool { return w.inj.Crashed() }

// ensureOwner returns the shard's writer, claiming the shard on a host
// (chosen by pick) when it has none or when its writer stopped.
func (w *world) ensureOwner(shard string, pick int) *owned {
	if o := w.owner[shard]; o != nil {
		if o.s.Status().Stopped == "" {
			return o
		}
		w.demote(shard, "stopped: "+o.s.Status().Stopped)
	}
	return w.claim(shard, w.hosts[pick%len(w.hosts)])
}

// demote turns the shard's writer into a zombie. If its owner key is still
// in place (a writer fenced by a moved epoch key keeps its lease), the
// writer is closed so that a successor can claim: nobody else would.
func (w *world) demote(shard, why string) {
	o := w.owner[shard]
	if o == nil {
		return
	}
	delete(w.owner, shard)
	z := &zombie{shard: shard, s: o.s, host: o.host, epoch: o.s.Epoch(), why: why}
	w.zombies = append(w.zombies, z)
	w.st.fences++
	if w.ownerKeyHeld(shard) {
		ctx, cancel := w.opCtx()
		err := o.s.Close(ctx)
		cancel()
		w.tracef("%s: close stopped writer %s epoch %d to free its owner key: %v", shard, o.host, z.epoch, err)
	}
}

func (w *world) ownerKeyHeld(shard string) bool {
	ctx, cancel := w.opCtx()
	defer cancel()
	resp, err := w.cli.Get(ctx, w.keys.Owner(shard))
	if err != nil {
		w.fatalf("read owner key: %v", err)
	}
	return len(resp.Kvs) > 0
}

// claim opens shard on h with a new epoch (Reclaim: the host may hold a
// closed or fenced Shard object of it). The caller made sure no live
// writer holds it, so a wait here is only for an expiring lease.
func (w *world) claim(shard string, h *host) *owned {
	ctx, cancel := w.opCtx()
	defer cancel()
	start := time.Now()
	s, err := h.h.Reclaim(ctx, shard)
	if err != nil {
		w.tracef("%s: claim on %s failed after %v: %v", shard, h, time.Since(start).Round(time.Millisecond), err)
		if !w.crashed() && !errors.Is(err, vfs.ErrInjected) {
			w.violatef("shard %s: claim on %s failed without a crash: %v", shard, h, err)
		}
		return nil
	}
	w.st.claims++
	for _, z := range w.zombies {
		if z.shard == shard {
			z.succeeded = true
		}
	}
	if err := w.m.claim(shard, s.Epoch()); err != nil {
		w.violatef("%v", err)
	}
	st := s.Status()
	w.tracef("%s: claimed by %s epoch %d (replayed into generation %d, %d memtable rows, wal tail %d) in %v",
		shard, h, s.Epoch(), st.CurrentGeneration, st.MemtableRows, st.WALTail, time.Since(start).Round(time.Millisecond))
	o := &owned{host: h, s: s}
	w.owner[shard] = o
	return o
}

// checkpoint reads every monotonic quantity and checks it against the
// last observation. Snapshots are read before manifests: a snapshot is
// persisted after the manifest commit that covers it.
func (w *world) checkpoint() {
	ctx, cancel := w.opCtx()
	defer cancel()
	for _, shard := range w.shards {
		for _, src := range w.sources(shard) {
			key := snapshot.Key{Table: w.table, Shard: shard, Source: src}
			snap, err := w.snaps.Get(ctx, key)
			if errors.Is(err, snapshot.ErrNotFound) {
				continue
			} else if err != nil {
				w.fatalf("read snapshot %s: %v", key, err)
			}
			for _, v := range w.m.observeSnapshot(key, snap.Offset) {
				w.violatef("%s", v)
			}
		}
	}
	for _, shard := range w.shards {
		m, _, err := w.meta.Load(ctx, shard)
		if err != nil {
			w.violatef("shard %s: manifest does not load: %v", shard, err)
			continue
		}
		for _, v := range w.m.observeManifest(shard, m) {
			w.violatef("%s", v)
		}
	}
	st, _, err := w.meta.LoadBaseState(ctx)
	if err != nil {
		w.violatef("base state does not load: %v", err)
		return
	}
	for _, v := range w.m.observeBase(st) {
		w.violatef("%s", v)
	}
}

func (w *world) sources(shard string) []string {
	return []string{"p0-" + shard, "p1-" + shard}
}

// revokeOwnerLeases revokes the lease of every owner key of the table:
// what lease expiry does to processes that died.
func (w *world) revokeOwnerLeases() {
	ctx, cancel := w.opCtx()
	defer cancel()
	for _, shard := range w.shards {
		resp, err := w.cli.Get(ctx, w.keys.Owner(shard))
		if err != nil {
			w.fatalf("read owner key: %v", err)
		}
		for _, kv := range resp.Kvs {
			if _, err := w.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !strings.Contains(err.Error(), "not found") {
				w.fatalf("revoke lease %x: %v", kv.Lease, err)
			}
		}
	}
}

// recover is what follows a crash of the shared storage: every writer and
// coordinator died with it. Their leases are revoked first, as expiry
// would, so nothing of the dead world commits; then the dead objects are
// closed (their filesystem calls all fail), the storage is replaced by
// what survived the crash, and new processes start.
func (w *world) recover() {
	w.st.crashes++
	w.tracef("CRASH at filesystem op %d: recovering on the crash clone", w.inj.Ops())
	w.revokeOwnerLeases()
	for _, c := range w.coords {
		if c.c != nil {
			c.c.Close()
			c.c, c.plan = nil, nil
		}
	}
	w.closeHosts(w.hosts)
	w.zombies = nil
	clear(w.owner)
	w.mem = w.mem.CrashClone()
	w.inj = &vfs.Injector{}
	w.fs = vfs.Inject(w.mem, w.inj)
	w.armed = false
	for i := range w.hosts {
		w.hosts[i] = w.newHost(i)
	}
}

func (w *world) closeHosts(hs []*host) {
	for _, h := range hs {
		ctx, cancel := w.opCtx()
		began := time.Now()
		err := h.h.Close(ctx)
		cancel()
		if err != nil || time.Since(began) > time.Second {
			w.tracef("close %s (%v): %v", h, time.Since(began).Round(time.Millisecond), err)
		}
		h.cli.Close()
		w.clients = slices.DeleteFunc(w.clients, func(c *clientv3.Client) bool { return c == h.cli })
	}
}

// close releases everything the world holds.
func (w *world) close() {
	for _, c := range w.coords {
		if c.c != nil {
			c.c.Close()
		}
	}
	w.closeHosts(w.hosts)
	for _, c := range w.clients {
		c.Close()
	}
}
