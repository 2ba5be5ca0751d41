package sim

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/publish"
)

var (
	flagSeed      = flag.Uint64("sim.seed", 0, "replay exactly this seed (0: run -sim.seeds seeds)")
	flagSeeds     = flag.Int("sim.seeds", 32, "number of seeds in the normal run")
	flagFirst     = flag.Uint64("sim.first", 1, "first seed of the normal run (0: a random one, printed)")
	flagSteps     = flag.Int("sim.steps", 100, "steps per seed")
	flagSoak      = flag.Duration("sim.soak", 0, "run new seeds until this much time has passed (also ROLLWAL_SIM_SOAK)")
	flagTrace     = flag.Bool("sim.trace", false, "log every step as it happens")
	flagEngineLog = flag.Bool("sim.enginelog", false, "send the engine's and coordinators' logs to stderr")
	flagWeights   = flag.String("sim.weights", "", "override op weights, e.g. 'race=20,stream=0' (0 disables an op; changes every seed's op sequence)")
	flagTear      = flag.Int("sim.tear", -1, "keep this percent of unsynced changes at every crash (-1: drawn per crash; 0: strict clones only)")
	flagCutoff    = flag.Bool("sim.cutoffonly", false, "every seed's coordinators ignore the replay ranges (publish.Options.DisableReplayRanges)")
)

// weights are the op weights of this run: opWeights, or -sim.weights over
// them.
func weights(t testing.TB) [numOps]int {
	ws := opWeights
	if *flagWeights == "" {
		return ws
	}
	for _, kv := range strings.Split(*flagWeights, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		i := slices.Index(opNames[:], name)
		n, err := strconv.Atoi(val)
		if !ok || i < 0 || err != nil || n < 0 {
			t.Fatalf("-sim.weights: %q is not op=weight with an op of %v", kv, opNames)
		}
		ws[i] = n
	}
	return ws
}

func replayCommand(seed uint64, steps int) string {
	cmd := fmt.Sprintf("go test ./internal/sim/ -run 'TestSimulation$' -count=1 -v -sim.seed %d -sim.steps %d", seed, steps)
	if *flagWeights != "" {
		cmd += fmt.Sprintf(" -sim.weights '%s'", *flagWeights)
	}
	if *flagTear >= 0 {
		cmd += fmt.Sprintf(" -sim.tear %d", *flagTear)
	}
	if *flagCutoff {
		cmd += " -sim.cutoffonly"
	}
	return cmd
}

// TestSimulation runs the seeded crash-and-failover simulation: see the
// package documentation for the world, the ops and the model.
func TestSimulation(t *testing.T) {
	srv := etcd.Server(t)
	soak := *flagSoak
	if env := os.Getenv("ROLLWAL_SIM_SOAK"); env != "" && soak == 0 {
		d, err := time.ParseDuration(env)
		if err != nil {
			t.Fatalf("ROLLWAL_SIM_SOAK=%q: %v", env, err)
		}
		soak = d
	}
	switch {
	case *flagSeed != 0:
		runSeed(t, srv, *flagSeed, *flagSteps)
	case soak > 0:
		runSoak(t, srv, soak)
	default:
		first := *flagFirst
		if first == 0 {
			first = 1 + rand.Uint64N(1<<40)
		}
		t.Logf("seeds %d..%d (rerun all with -sim.first %d -sim.seeds %d)", first, first+uint64(*flagSeeds)-1, first, *flagSeeds)
		start := time.Now()
		for i := range *flagSeeds {
			runSeed(t, srv, first+uint64(i), *flagSteps)
		}
		t.Logf("%d seeds in %v", *flagSeeds, time.Since(start).Round(time.Millisecond))
	}
}

// runSoak runs random seeds until d has passed (or the test's deadline is
// near) and reports how many ran and which failed.
func runSoak(t *testing.T, srv *etcdembed.Server, d time.Duration) {
	end := time.Now().Add(d)
	if dl, ok := t.Deadline(); ok && dl.Add(-2*time.Minute).Before(end) {
		end = dl.Add(-2 * time.Minute)
		t.Logf("soak shortened to the test deadline: ends at %v (run with -timeout 0 for the whole %v)", end.Format(time.TimeOnly), d)
	}
	start := time.Now()
	var ran int
	var failed []uint64
	for time.Now().Before(end) {
		seed := 1 + rand.Uint64N(1<<40)
		ran++
		if !runSeed(t, srv, seed, *flagSteps) {
			failed = append(failed, seed)
		}
	}
	result := "PASS"
	if len(failed) > 0 {
		result = fmt.Sprintf("FAIL (seeds %v)", failed)
	}
	t.Logf("soak: %d seeds of %d steps in %v: %s", ran, *flagSteps, time.Since(start).Round(time.Second), result)
}

// runSeed runs one seed as a subtest and reports whether it passed.
func runSeed(t *testing.T, srv *etcdembed.Server, seed uint64, steps int) bool {
	return t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
		if !testing.Verbose() {
			// A panic on one of the engine's own goroutines kills the
			// binary before the test can say which seed ran; this line,
			// shown when the package fails, does.
			fmt.Fprintf(os.Stderr, "sim: seed %d (%s)\n", seed, replayCommand(seed, steps))
		}
		start := time.Now()
		w := newWorld(t, srv, seed, steps)
		defer w.close()
		w.run()
		st := w.st
		st.lostAnswers = int(w.lostAnswers.Load())
		t.Logf("seed %d: %d steps, %d appends (%d acked, %d unknown of which %d written, %d refused, %d retries, %d retried ids already committed (%d by prompt retries), %d of them twice in the base), "+
			"%d with a session (%d in the background, %d refused for their sequence, %d acknowledged ones sent again), %d flushes, %d crashes (%d torn: %d paths kept unsynced changes, %d of them WAL segments), "+
			"%d merges (%d commits, %d dropped by the ID check), %d fences (%d revokes, %d partitions, %d epoch bumps), "+
			"%d claims, %d races (%d racing claims), %d kills, %d stalls, %d lost etcd answers, %d streams, %d zombie calls, %d lagged cursors, %d claims failed on a lease expired under load, %d schema changes; %s; %v",
			seed, st.steps, st.appends, st.acks, st.unknowns, st.durableUnknowns, st.refusals, st.retries, st.retriedCommitted, st.promptRetriedCommitted, w.m.retryDuplicates,
			st.sessionAppends, st.bgAppends, st.seqRefusals, st.lateSessionRetries, st.flushes, st.crashes, st.tornCrashes, st.tornFiles, st.tornWAL,
			st.merges, st.mergeCommits, st.droppedInBase, st.fences, st.revokes, st.partitions, st.bumps,
			st.claims, st.races, st.raceClaims, st.kills, st.stalls, st.lostAnswers, st.streams, st.zombieCalls, st.lags, st.expiredLeases, st.schemaChanges, w.cfg, time.Since(start).Round(time.Millisecond))
	})
}

// run performs the steps, then the final check; it fails the test at the
// first step that broke an invariant.
func (w *world) run() {
	for w.step = 1; w.step <= w.steps; w.step++ {
		d := w.drawStep()
		w.st.steps++
		began := time.Now()
		w.guard(d.op.String(), func() { w.runStep(d) })
		if took := time.Since(began); took > time.Second {
			w.tracef("%s took %v", d.op, took.Round(time.Millisecond))
		}
		w.stopExpired()
		if w.crashed() {
			w.recover()
		}
		w.checkpoint()
		if len(w.failures) > 0 {
			w.fail()
			return
		}
	}
	w.guard("finish", w.finish)
	if len(w.failures) > 0 {
		w.fail()
	}
}

// guard turns a panic of the code under test into a violation of this
// seed, so that the seed is reported and replayable instead of the whole
// test binary dying. (A panic on a background goroutine of the engine still
// kills the binary.)
func (w *world) guard(what string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			w.violatef("panic during %s: %v\n%s", what, r, debug.Stack())
		}
	}()
	fn()
}

func (w *world) fail() {
	w.t.Helper()
	w.report()
	for _, f := range w.failures {
		w.t.Errorf("seed %d: %s", w.seed, f)
	}
	w.t.Errorf("seed %d failed; replay with: %s", w.seed, replayCommand(w.seed, w.steps))
}

// finish brings the world to rest and checks the base against the model:
// a pending crash point is taken, every process is closed, a fresh writer
// claims and flushes every shard, and merges and drains run until nothing
// is left.
func (w *world) finish() {
	w.step = w.steps + 1
	w.tracef("FINISH")
	w.stopBackground(nil)
	if w.armed && !w.crashed() {
		w.inj.CrashAt(1) // the next filesystem op: crash now
	}
	if w.armed {
		w.recover()
	}
	for _, c := range w.coords {
		if c.c != nil {
			c.c.Close()
			c.c, c.plan = nil, nil
		}
	}
	w.closeHosts(w.hosts)
	w.zombies = nil
	w.clearOwners()
	for i := range w.hosts {
		w.hosts[i] = w.newHost(i)
	}
	verifier := w.hosts[0]
	ctx, cancel := context.WithTimeout(w.ctx, 2*opTimeout)
	defer cancel()
	for _, shard := range w.shards {
		if w.claim(shard, verifier) == nil {
			return
		}
	}
	w.resolveSessions()
	for _, shard := range w.shards {
		o := w.owner[shard]
		if o == nil {
			w.violatef("final flush of %s: no writer", shard)
			return
		}
		if _, err := o.s.Flush(ctx); err != nil {
			w.violatef("final flush of %s: %v", shard, err)
			return
		}
	}
	c := w.coordinator(0)
	if c == nil {
		return
	}
	for round := 0; ; round++ {
		res, err := c.c.RunOnce(ctx)
		w.noteMerge(c, "final run-once", res, err)
		if err != nil {
			return
		}
		drained := 0
		for _, shard := range w.shards {
			n, err := w.owner[shard].s.Drain(ctx)
			if err != nil {
				w.violatef("final drain of %s: %v", shard, err)
				return
			}
			drained += n
		}
		if res.Passes == 0 && drained == 0 {
			break
		}
		if round == 10 {
			w.violatef("merges and drains did not come to rest after %d rounds", round)
			return
		}
	}
	for _, shard := range w.shards {
		st := w.owner[shard].s.Status()
		if len(st.Flushed) != 0 || st.MemtableRows != 0 {
			w.violatef("shard %s at rest still holds %d flushed generations and %d memtable rows", shard, len(st.Flushed), st.MemtableRows)
		}
	}
	w.checkpoint()
	base := w.readBase(ctx)
	if base == nil {
		return
	}
	for _, v := range w.m.checkBase(base) {
		w.violatef("%s", v)
	}
	w.tracef("final base: %d distinct ids; model: %d ids", len(base), len(w.m.ids))
}

// readBase reads the base table the way an external reader does: through
// the latest readers' manifest, which must agree with the Iceberg table's
// current snapshot, whose own scan by iceberg-go must return the same ids.
func (w *world) readBase(ctx context.Context) map[string][]copyOf {
	st, err := w.loadBase(ctx)
	if err != nil {
		w.violatef("base: %v", err)
		return nil
	}
	baseDir := filepath.Join(dataDir, w.table, "base")
	rm, ok, err := publish.LatestReaderManifest(w.fs, baseDir)
	if w.store != nil {
		rm, ok, err = publish.LatestStoreReaderManifest(ctx, w.store, w.table)
	}
	if st.Version == 0 {
		if ok {
			w.violatef("a readers' manifest (version %d) exists for base version 0", rm.Version)
		}
		return map[string][]copyOf{}
	}
	if err != nil || !ok {
		w.violatef("readers' manifest of base version %d: ok=%v err=%v", st.Version, ok, err)
		return nil
	}
	var statePaths, readerPaths []string
	for _, f := range st.Files {
		statePaths = append(statePaths, f.Path)
	}
	for _, f := range rm.Files {
		readerPaths = append(readerPaths, f.Path)
	}
	slices.Sort(statePaths)
	slices.Sort(readerPaths)
	if rm.Version != st.Version || !slices.Equal(statePaths, readerPaths) || rm.IcebergMetadata != st.MetadataLocation {
		w.violatef("readers' manifest version %d names %d files and %s; the base at version %d has %d files and %s",
			rm.Version, len(rm.Files), rm.IcebergMetadata, st.Version, len(st.Files), st.MetadataLocation)
		return nil
	}
	out := map[string][]copyOf{}
	var rows int64
	for _, f := range rm.Files {
		meta, d, err := w.readBaseFile(ctx, baseDir, f.Path)
		if err != nil {
			w.violatef("base file %s: %v", f.Path, err)
			return nil
		}
		if int64(d.Rows.Len()) != f.Rows {
			w.violatef("base file %s holds %d rows; the readers' manifest says %d", f.Path, d.Rows.Len(), f.Rows)
		}
		for i, id := range d.Rows.IDs {
			out[id] = append(out[id], copyOf{file: f.Path, shard: meta.Shard, generation: meta.Generation, seq: d.Seq[i], epoch: d.Epoch[i]})
		}
		rows += int64(d.Rows.Len())
	}
	if rows != rm.Rows {
		w.violatef("base holds %d rows; the readers' manifest says %d", rows, rm.Rows)
	}
	w.checkIcebergScan(ctx, out)
	return out
}

// checkIcebergScan: iceberg-go's scan of the base table returns exactly the
// ids the files hold, as many times as they hold them.
func (w *world) checkIcebergScan(ctx context.Context, files map[string][]copyOf) {
	cat, err := catalog.New(catalog.Options{Client: w.cli, Prefix: catalog.BasePrefix(prefix, w.table), FS: w.mem, Store: w.store})
	if err != nil {
		w.violatef("catalog: %v", err)
		return
	}
	tbl, err := cat.LoadTable(ctx, catalog.BaseIdent(w.table))
	if err != nil {
		w.violatef("load the base table with iceberg-go: %v", err)
		return
	}
	at, err := tbl.Scan(table.WithSelectedFields("id")).ToArrowTable(ctx)
	if err != nil {
		w.violatef("scan the base table with iceberg-go: %v", err)
		return
	}
	defer at.Release()
	got := map[string]int{}
	for _, chunk := range at.Column(0).Data().Chunks() {
		col := chunk.(*array.String)
		for i := range col.Len() {
			got[col.Value(i)]++
		}
	}
	for id, copies := range files {
		if got[id] != len(copies) {
			w.violatef("iceberg-go scan: id %s %d times, the files hold it %d times", id, got[id], len(copies))
			return
		}
	}
	if len(got) != len(files) {
		w.violatef("iceberg-go scan: %d distinct ids, the files hold %d", len(got), len(files))
	}
}

func (w *world) readBaseFile(ctx context.Context, baseDir, rel string) (generation.Meta, generation.Data, error) {
	if w.store == nil {
		return generation.ReadStored(w.fs, filepath.Join(baseDir, filepath.FromSlash(rel)))
	}
	obj, err := w.store.Open(ctx, w.table+"/base/"+rel)
	if err != nil {
		return generation.Meta{}, generation.Data{}, err
	}
	defer obj.Close()
	b := make([]byte, obj.Size())
	if _, err := obj.ReadAt(b, 0); err != nil && err != io.EOF {
		return generation.Meta{}, generation.Data{}, err
	}
	return generation.ReadStoredFrom(bytes.NewReader(b), int64(len(b)), rel)
}
