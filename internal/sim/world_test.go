package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/snapshot"
	"github.com/rollwal/rollwal/vfs"
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
	// sessions is the share of appends sent with a producer session.
	sessions float64
	// pureCutoff runs the coordinators with DisableReplayRanges: only the
	// cutoff, extended at every epoch change, decides the ID check.
	pureCutoff bool
	// objectStore puts generations in an object store (a file:// one on
	// storage of its own, which no crash touches): writers upload and
	// delete, coordinators read from it.
	objectStore bool
	// objectWAL puts the WALs in that store too (engine.WALObject): a
	// killed writer's syncer may still create objects, as a zombie's.
	objectWAL bool
}

func (c config) String() string {
	return fmt.Sprintf("shards=%d hosts=%d coordinators=%d flush_bytes=%d exclusion_off=%.1f no_flush_on_close=%.1f coord_budget=%d sessions=%.1f pure_cutoff=%v object_store=%v object_wal=%v",
		c.shards, c.hosts, c.coords, c.flushBytes, c.exclusionOff, c.noFlushOnClose, c.coordBudget, c.sessions, c.pureCutoff, c.objectStore, c.objectWAL)
}

func drawConfig(rng *rand.Rand) config {
	c := config{
		shards:         2 + rng.IntN(2),
		hosts:          2 + rng.IntN(2),
		coords:         1 + rng.IntN(2),
		flushBytes:     []int64{12 << 10, 48 << 10, 4 << 20}[rng.IntN(3)],
		exclusionOff:   []float64{0, 0, 0.5, 1}[rng.IntN(4)],
		noFlushOnClose: []float64{0, 0.5, 1}[rng.IntN(3)],
		coordBudget:    []int64{1, 64 << 10, 64 << 20}[rng.IntN(3)],
		sessions:       []float64{0.3, 0.7, 1}[rng.IntN(3)],
		pureCutoff:     rng.IntN(4) == 0,
		objectStore:    rng.IntN(2) == 0,
	}
	c.objectWAL = c.objectStore && rng.IntN(2) == 0
	return c
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
	// fs is the process's view of the storage (stalls, death); faults
	// sits on its etcd client (lost answers).
	fs *procFS
	// store is the process's view of the object store (nil without one):
	// it dies with the process, as fs does, so that a killed writer's
	// object WAL acknowledges nothing more either.
	store  objstore.Store
	bucket *procFS
	faults *etcdFaults
	// temp: an extra process of a claim race, in no slot.
	temp bool
	// closed: the process was closed (it may still be named somewhere).
	closed bool
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
	// sessionAppends were sent with a producer session, bgAppends of them
	// from background goroutines; seqRefusals were refused with a
	// sequence error; lateSessionRetries resent an acknowledged batch.
	sessionAppends, bgAppends, seqRefusals, lateSessionRetries int
	// races are claim races (raceClaims their claimants), kills writer
	// processes killed, stalls processes stalled, lostAnswers etcd answers
	// lost after they applied, streams background producer runs,
	// tornCrashes crashes whose clone kept part of the unsynced data.
	races, raceClaims, kills, stalls, lostAnswers, streams, tornCrashes int
	// schemaChanges are schema versions applied while writers served.
	schemaChanges int
	// expiredLeases are claims that failed because their own lease expired
	// while they waited (see claimFailed).
	expiredLeases int
	// tornFiles are paths whose crash clone kept unsynced changes (torn,
	// holed, renamed, created or removed), tornWAL those of WAL segments.
	tornFiles, tornWAL int
}

// differences counts the paths whose bytes (or presence) differ between
// two filesystems, and of them the WAL segments.
func differences(a, b *vfs.MemFS) (paths, wal int) {
	ta, tb := readTree(a), readTree(b)
	for p, x := range ta {
		if y, ok := tb[p]; !ok || x != y {
			paths++
			if strings.HasSuffix(p, ".wal") {
				wal++
			}
		}
	}
	for p := range tb {
		if _, ok := ta[p]; !ok {
			paths++
			if strings.HasSuffix(p, ".wal") {
				wal++
			}
		}
	}
	return paths, wal
}

// readTree reads every file of fs: path → contents.
func readTree(fs *vfs.MemFS) map[string]string {
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		names, _ := fs.List(dir)
		for _, n := range names {
			p := filepath.Join(dir, n)
			if info, err := fs.Stat(p); err == nil && info.IsDir() {
				out[p] = "<dir>"
				walk(p)
				continue
			}
			if f, err := fs.Open(p); err == nil {
				data, _ := io.ReadAll(f)
				f.Close()
				out[p] = string(data)
			}
		}
	}
	walk("/")
	return out
}

// world is one seed's simulation.
type world struct {
	t     testing.TB
	seed  uint64
	steps int
	rng   *rand.Rand // one draw sequence per step, whatever the state
	// weights are the op mix of this run (weights in sim_test.go).
	weights [numOps]int
	aux     *rand.Rand // choices that depend on the state
	cfg     config
	ctx     context.Context

	srv   *etcdembed.Server
	cli   *clientv3.Client // the observer's: checks, revokes, faults
	table string
	keys  shardmeta.Keys
	meta  *shardmeta.Store
	snaps *snapshot.Etcd

	mem *vfs.MemFS
	inj *vfs.Injector
	fs  vfs.FS
	// bucket is the object store's storage, which no crash touches.
	bucket *vfs.MemFS
	// store, when the seed puts generations in one (config.objectStore).
	store objstore.Store

	shards []string
	hosts  []*host
	incs   int
	// schemaChanges counts the simChanges applied.
	schemaChanges int
	owner         map[string]*owned
	zombies       []*zombie
	coords        []*coord
	armed         bool
	step          int
	nextID        int
	offsets       map[string]int64
	clients       []*clientv3.Client
	m             *model
	st            stats
	trace         []string
	failures      []string
	log           *slog.Logger

	// views publish each shard's writer to producers on other goroutines.
	views map[string]*shardView
	// producers are each shard's producer sessions.
	producers map[string][]*producer
	// bgs are the producers appending from their own goroutines now.
	bgs []*background
	// tear is the UnsyncedDataPercent of the armed crash's clone.
	tear int
	// crashAtWALSync, set, crashes the storage at the next sync of a WAL
	// segment, whoever makes it: its records are written and unsynced.
	crashAtWALSync atomic.Bool
	// closing are killed processes being closed in the background.
	closing sync.WaitGroup
	// lostAnswers counts the etcd answers the writers' faults lost.
	lostAnswers atomic.Int32
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
		views: map[string]*shardView{}, producers: map[string][]*producer{},
		log: slog.New(slog.DiscardHandler), weights: weights(t),
	}
	if *flagEngineLog {
		w.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	w.cfg = drawConfig(rng)
	w.cfg.pureCutoff = w.cfg.pureCutoff || *flagCutoff
	w.fs = vfs.Inject(w.mem, w.inj)
	if w.cfg.objectStore {
		w.bucket = vfs.NewStrictMem()
		w.store = w.openStore(w.bucket)
	}
	w.cli = w.newClient()
	w.keys = shardmeta.Keys{Prefix: prefix, Table: w.table}
	w.meta = shardmeta.NewStore(w.cli, w.keys, shardmeta.StoreOptions{RequestTimeout: 10 * time.Second})
	snaps, err := snapshot.NewEtcd(w.cli, snapPrefix, snapshot.EtcdOptions{})
	if err != nil {
		w.fatalf("snapshot store: %v", err)
	}
	w.snaps = snaps
	for i := range w.cfg.shards {
		shard := fmt.Sprintf("s%d", i)
		w.shards = append(w.shards, shard)
		w.views[shard] = &shardView{}
		for j := range producersPerShard {
			w.producers[shard] = append(w.producers[shard], &producer{id: fmt.Sprintf("sess-%s-%d", shard, j), shard: shard, src: fmt.Sprintf("sp%d-%s", j, shard)})
		}
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

func (w *world) newClient(opts ...grpc.DialOption) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: w.srv.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop(), DialOptions: opts})
	if err != nil {
		w.fatalf("etcd client: %v", err)
	}
	w.clients = append(w.clients, cli)
	return cli
}

// newHost starts a new incarnation of a writer process in slot (-1: an
// extra process of a claim race).
func (w *world) newHost(slot int) *host {
	w.incs++
	faults := &etcdFaults{lost: &w.lostAnswers, fired: new(atomic.Int32)}
	h := &host{slot: slot, inc: w.incs, name: fmt.Sprintf("h%d.%d", slot, w.incs), fs: newProcFS(w.fs), faults: faults,
		cli:     w.newClient(grpc.WithChainUnaryInterceptor(faults.intercept)),
		exclOff: w.aux.Float64() < w.cfg.exclusionOff, noFlush: w.aux.Float64() < w.cfg.noFlushOnClose, temp: slot < 0}
	if h.temp {
		h.name = fmt.Sprintf("x.%d", w.incs)
	}
	if w.bucket != nil {
		h.bucket = newProcFS(w.bucket)
		h.store = w.openStore(h.bucket)
	}
	inj := w.inj
	h.fs.beforeSync = func(name string) {
		if strings.HasSuffix(name, ".wal") && w.crashAtWALSync.CompareAndSwap(true, false) {
			inj.CrashAt(1) // the next op: this sync, or one racing it
		}
	}
	eh, err := engine.NewHost(engine.Options{
		DataDir: dataDir, FS: h.fs, Table: w.table, Prefix: prefix, Etcd: h.cli, WriterID: h.name,
		LeaseTTL: hostLeaseTTL, RequestTimeout: 5 * time.Second,
		WALSegmentSize: 64 << 10, FlushBytes: w.cfg.flushBytes, FlushAge: -1, MemoryBudget: 64 << 20,
		NoFlushOnClose: h.noFlush, DisableSourceExclusion: h.exclOff, Snapshots: w.snaps,
		Logger: w.log.With("host", h.name), Schema: w.tableSchema(), Store: h.store, WALBackend: w.walBackend(),
	})
	if err != nil {
		w.fatalf("new host: %v", err)
	}
	// As serve does at start: a process holds its columns to the table's
	// then, and follows the record from there.
	ctx, cancel := w.opCtx()
	defer cancel()
	if err := eh.CheckSchema(ctx); err != nil {
		w.tracef("%s: schema check: %v", h, err)
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
	w.setOwner(shard, nil)
	z := &zombie{shard: shard, s: o.s, host: o.host, epoch: o.s.Epoch(), why: why}
	w.zombies = append(w.zombies, z)
	w.st.fences++
	if w.ownerKeyHeld(shard) {
		ctx, cancel := w.opCtx()
		err := o.s.Close(ctx)
		cancel()
		w.tracef("%s: close stopped writer %s epoch %d to free its owner key: %v", shard, o.host, z.epoch, err)
		w.checkReleased(shard, o.host, "close")
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
		w.claimFailed(shard, h, start, err)
		return nil
	}
	w.noteClaim(shard, h, s, start)
	o := &owned{host: h, s: s}
	w.setOwner(shard, o)
	return o
}

// claimFailed judges a failed claim: only a crash, an injected filesystem
// error, or, on a process whose etcd answers the simulation lost, an
// injected etcd error in its chain explains one (never a hang). One more:
// a claim that waited at least a lease TTL (for another writer's key to go)
// may find its own lease expired when keepalives were starved — on two
// busy cores, the soak niced below other work — and fails with "requested
// lease not found"; the next claim takes a new lease. It is counted.
func (w *world) claimFailed(shard string, h *host, start time.Time, err error) {
	took := time.Since(start)
	w.tracef("%s: claim on %s failed after %v: %v", shard, h, took.Round(time.Millisecond), err)
	switch {
	case w.crashed(), errors.Is(err, vfs.ErrInjected):
	case h.faults.fired.Load() > 0 && injectedEtcdError(err):
	case errors.Is(err, rpctypes.ErrLeaseNotFound) && took >= hostLeaseTTL:
		w.st.expiredLeases++
		w.tracef("%s: the lease of %s expired while its claim waited %v (keepalives starved)", shard, h, took.Round(time.Millisecond))
	default:
		w.violatef("shard %s: claim on %s failed without a crash: %v", shard, h, err)
	}
	w.checkReleased(shard, h, "failed open")
}

// noteClaim records a claim that returned: every zombie of the shard now
// has a successor, and the epoch must be above every earlier one.
func (w *world) noteClaim(shard string, h *host, s *engine.Shard, start time.Time) {
	w.st.claims++
	for _, z := range w.zombies {
		if z.shard == shard {
			z.succeeded = true
		}
	}
	if err := w.m.claim(shard, s.Epoch()); err != nil {
		w.violatef("%v", err)
	}
	w.m.claimedAt[shard] = append(w.m.claimedAt[shard], claimTime{epoch: s.Epoch(), at: time.Now()})
	w.views[shard].noteEpoch(s.Epoch())
	st := s.Status()
	w.tracef("%s: claimed by %s epoch %d (replayed into generation %d, %d memtable rows, wal tail %d) in %v",
		shard, h, s.Epoch(), st.CurrentGeneration, st.MemtableRows, st.WALTail, time.Since(start).Round(time.Millisecond))
}

// setOwner makes o (nil: none) the shard's writer, for the simulation and
// for the producers on other goroutines.
func (w *world) setOwner(shard string, o *owned) {
	if o == nil {
		delete(w.owner, shard)
		w.views[shard].cur.Store(nil)
		return
	}
	w.owner[shard] = o
	w.views[shard].cur.Store(o.s)
}

func (w *world) clearOwners() {
	for _, shard := range w.shards {
		w.setOwner(shard, nil)
	}
}

// shardView is a shard's writer as producers on other goroutines see it.
type shardView struct {
	cur atomic.Pointer[engine.Shard]
	// maxEpoch is the highest epoch a claim of the shard returned: a
	// writer below it has a successor.
	maxEpoch atomic.Uint64
}

func (v *shardView) noteEpoch(e uint64) {
	for {
		cur := v.maxEpoch.Load()
		if e <= cur || v.maxEpoch.CompareAndSwap(cur, e) {
			return
		}
	}
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
		w.checkObjects(ctx, shard, m)
		for _, v := range w.m.observeManifest(shard, m) {
			w.violatef("%s", v)
		}
	}
	st, err := w.loadBase(ctx)
	if err != nil {
		w.violatef("base does not load: %v", err)
		return
	}
	for _, v := range w.m.observeBase(st) {
		w.violatef("%s", v)
	}
}

// sources are the upstream sources of a shard's appends: two for the
// appends without a session, one per producer session.
func (w *world) sources(shard string) []string {
	out := []string{"p0-" + shard, "p1-" + shard}
	for _, p := range w.producers[shard] {
		out = append(out, p.src)
	}
	return out
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
	w.tracef("CRASH at filesystem op %d: recovering on a crash clone keeping %d%% of the unsynced changes", w.inj.Ops(), w.tear)
	w.stopBackground(nil)
	for _, h := range w.hosts {
		if h.bucket != nil {
			h.bucket.kill() // the bucket survives; the processes do not
		}
	}
	w.revokeOwnerLeases()
	for _, c := range w.coords {
		if c.c != nil {
			c.c.Close()
			c.c, c.plan = nil, nil
		}
	}
	w.closeHosts(w.hosts)
	w.zombies = nil
	w.clearOwners()
	clone := w.mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: w.tear,
		RNG: rand.New(rand.NewPCG(w.seed, uint64(w.st.crashes)))})
	if w.tear > 0 {
		w.st.tornCrashes++
		files, wal := differences(w.mem.CrashClone(), clone)
		w.st.tornFiles += files
		w.st.tornWAL += wal
		w.tracef("the crash clone keeps unsynced changes of %d paths (%d WAL segments) that a strict one forgets", files, wal)
	}
	w.mem = clone
	w.inj = &vfs.Injector{}
	w.fs = vfs.Inject(w.mem, w.inj)
	w.armed = false
	w.crashAtWALSync.Store(false)
	for i := range w.hosts {
		w.hosts[i] = w.newHost(i)
	}
}

func (w *world) closeHosts(hs []*host) {
	for _, h := range hs {
		if h.closed {
			continue
		}
		h.closed = true
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
	w.stopBackground(nil)
	w.closing.Wait()
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

// checkReleased runs once h's writer of shard closed, or h's open of it
// failed: the shard's owner key must no longer name h, or no other process
// could claim the shard while h lives (the bug of
// TestFailedOpenLeavesItsOwnerKey). The process is then restarted, as an
// operator would, which frees the key with its lease.
func (w *world) checkReleased(shard string, h *host, what string) {
	if w.crashed() || h.closed {
		return
	}
	if s, ok := h.h.Shard(shard); ok && s.Status().Stopped == "" {
		return
	}
	ctx, cancel := w.opCtx()
	resp, err := w.cli.Get(ctx, w.keys.Owner(shard))
	cancel()
	if err != nil {
		w.fatalf("read owner key: %v", err)
	}
	var o shardmeta.Owner
	if len(resp.Kvs) == 0 || json.Unmarshal(resp.Kvs[0].Value, &o) != nil || o.Writer != h.name {
		return
	}
	w.violatef("shard %s: the owner key of epoch %d still names %s after its %s: no other process can claim the shard while it lives",
		shard, o.Epoch, h.name, what)
	if h.temp {
		w.closeHosts([]*host{h})
		return
	}
	w.restartHost(h.slot)
}

// loadBase reads the committed base (base/state and the Iceberg snapshot
// committed with it) as publish.LoadBase does for readers, from the
// storage itself: an observer is not a process, so no fault of the
// injector may hit it (or be consumed by it).
func (w *world) loadBase(ctx context.Context) (*publish.Base, error) {
	return publish.LoadBase(ctx, publish.Options{Etcd: w.cli, Prefix: prefix, Table: w.table, DataDir: dataDir, FS: w.mem, Schema: simSchema, Store: w.store})
}

// simSchema is the rollout schema with a list and a list of structs, so
// that nested values go through every crash, race and replay too.
var simSchema = func() *schema.Schema {
	cols := append([]schema.Column(nil), schema.Rollout().Columns...)
	for _, c := range []struct{ name, typ string }{{"tokens", "list<int32>"}, {"messages", "list<struct<role: string, content: string?>>"}} {
		col, err := schema.ParseColumnType(c.typ)
		if err != nil {
			panic(err)
		}
		col.Name, col.Nullable = c.name, c.name == "messages"
		cols = append(cols, col)
	}
	s, err := schema.New(cols)
	if err != nil {
		panic(err)
	}
	return s
}()

func (w *world) walBackend() engine.WALBackend {
	if w.cfg.objectWAL {
		return engine.WALObject
	}
	return engine.WALLocal
}

// openStore opens a file:// store on fs.
func (w *world) openStore(fs vfs.FS) objstore.Store {
	st, err := objstore.Open(w.ctx, "file:///bucket", objstore.Options{FS: fs})
	if err != nil {
		w.fatalf("object store: %v", err)
	}
	return st
}
