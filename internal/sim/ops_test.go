package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

type opKind int

const (
	opAppend opKind = iota
	opRetry
	opFlush
	opDrain
	opMerge
	opHandoff
	opEpochBump
	opRestartHost
	opCrash
	opRevoke
	opPartition
	opZombie
	opLagCursor
	opRace
	opStream
	opEtcdLost
	opRetryAcked
	opStall
	opSchemaChange
	numOps
)

var opNames = [numOps]string{"append", "retry", "flush", "drain", "merge", "handoff", "epoch-bump",
	"restart-host", "crash", "revoke", "partition", "zombie", "lag-cursor",
	"race", "stream", "etcd-lost", "retry-acked", "stall", "schema-change"}

func (k opKind) String() string { return opNames[k] }

// opWeights is the op mix. A partition costs a lease TTL of wall time, so
// it is rare; appends dominate so that every other op has rows to act on.
var opWeights = [numOps]int{
	opAppend: 34, opRetry: 5, opFlush: 12, opDrain: 3, opMerge: 12, opHandoff: 4, opEpochBump: 3,
	opRestartHost: 3, opCrash: 5, opRevoke: 2, opPartition: 1, opZombie: 6, opLagCursor: 2,
	opRace: 4, opStream: 3, opEtcdLost: 3, opRetryAcked: 4, opStall: 2, opSchemaChange: 1,
}

// draw is everything one step takes from the seed's generator, drawn whole
// whatever the state, so that the op sequence of a seed does not depend on
// timing: a state that differs between two runs changes what an op does,
// never which ops follow.
type draw struct {
	op         opKind
	a, b, c, d int
}

func (w *world) drawStep() draw {
	total := 0
	for _, wt := range w.weights {
		total += wt
	}
	n := w.rng.IntN(total)
	var op opKind
	for op = 0; op < numOps; op++ {
		if n < w.weights[op] {
			break
		}
		n -= w.weights[op]
	}
	const r = 1 << 30
	return draw{op: op, a: w.rng.IntN(r), b: w.rng.IntN(r), c: w.rng.IntN(r), d: w.rng.IntN(r)}
}

// runStep performs one drawn op.
func (w *world) runStep(d draw) {
	shard := w.shards[d.a%len(w.shards)]
	switch d.op {
	case opAppend:
		if o := w.ensureOwner(shard, d.b); o != nil {
			if p := w.pickProducer(shard, d.b>>4, nil); p != nil && float64((d.a>>8)%10) < 10*w.cfg.sessions {
				w.appendSession(o, p, d)
				break
			}
			b := w.newBatch(shard, 1+d.c%16, d.d, d.b)
			if w.send(o.s, b, o.host, false, false) == acked && d.d%8 == 0 {
				// The response is lost on its way (a timeout, a dropped
				// connection): the producer knows nothing and will retry,
				// though the writer acknowledged.
				w.tracef("%s: the response to %s..%s is lost: the producer will retry", shard, b.ids()[0], b.ids()[len(b.rows)-1])
				w.m.retryable = append(w.m.retryable, b)
			}
		}
	case opRetry:
		if (d.c>>4)%2 == 1 || !w.retrySession(d) {
			w.retry(d)
		}
	case opFlush:
		if o := w.ensureOwner(shard, d.b); o != nil {
			w.flush(shard, o)
		}
	case opDrain:
		if o := w.ensureOwner(shard, d.b); o != nil {
			ctx, cancel := w.opCtx()
			n, err := o.s.Drain(ctx)
			cancel()
			w.tracef("%s: drain by epoch %d: %d generations: %v", shard, o.s.Epoch(), n, err)
			w.writerErr(shard, "drain", err)
		}
	case opMerge:
		w.merge(d)
	case opHandoff:
		w.handoff(shard, d.b, d.c%2 == 0)
	case opEpochBump:
		w.epochBump(shard, d)
	case opRestartHost:
		w.restartHost(d.b % len(w.hosts))
	case opCrash:
		if !w.armed {
			w.armCrash(shard, d)
		}
	case opRevoke:
		w.revoke(d)
	case opPartition:
		w.partition(d)
	case opZombie:
		w.zombieCall(d)
	case opLagCursor:
		w.lagCursor(shard, d)
	case opRace:
		w.race(d)
	case opStream:
		if w.startBackground(shard, 1+d.b%2, w.step+1+d.c%6) != nil {
			w.st.streams++
		}
	case opEtcdLost:
		w.etcdLost(d)
	case opRetryAcked:
		w.retryAcked(d)
	case opStall:
		h := w.hosts[d.b%len(w.hosts)]
		n, pause := int64(1+d.c%40), time.Duration(20+d.d%200)*time.Millisecond
		h.fs.stall(n, pause)
		w.st.stalls++
		w.tracef("%s will stall %v at its filesystem call %d from now", h, pause, n)
	case opSchemaChange:
		w.changeSchema()
	}
}

// newBatch makes n rows with fresh ids; the payload size varies so that
// the WAL rolls segments and small memtables fill.
func (w *world) newBatch(shard string, n, size, source int) *batch {
	return w.newBatchFrom(shard, n, size, w.sources(shard)[source%2])
}

// newBatchFrom is newBatch with the next offset of the source src.
func (w *world) newBatchFrom(shard string, n, size int, src string) *batch {
	rows := make([]schema.Row, n)
	for i := range rows {
		w.nextID++
		id := fmt.Sprintf("id-%06d", w.nextID)
		rows[i] = schema.Row{
			"id": id, "prompt": "prompt of " + id,
			"completion": strings.Repeat("c", 40+(size+i*37)%600),
			"reward":     float64(w.nextID%97) / 7,
		}
		if i%3 == 0 {
			rows[i]["metadata"] = map[string]any{"n": w.nextID}
		}
		rows[i]["tokens"] = []int32{int32(w.nextID), int32(i), int32(size)}[:w.nextID%4]
		if i%2 == 0 {
			rows[i]["messages"] = []any{map[string]any{"role": "user", "content": id}, map[string]any{"role": "assistant"}}
		}
	}
	w.offsets[src]++
	return &batch{shard: shard, rows: rows, src: engine.Source{Name: src, Offset: w.offsets[src]}}
}

func (w *world) appendFresh(s *engine.Shard, shard string, h *host, isZombie bool, d draw) {
	b := w.newBatch(shard, 1+d.c%16, d.d, d.b)
	w.send(s, b, h, isZombie, false)
}

// send appends b and records the outcome of every id in it.
func (w *world) send(s *engine.Shard, b *batch, h *host, isZombie, retry bool) outcome {
	w.st.appends++
	var committed map[string]bool // of an earlier attempt, before this retry
	if retry {
		committed = w.committedIDs(b.shard, b.ids())
	}
	ctx, cancel := w.opCtx()
	res, err := s.Append(ctx, b.rows, b.src)
	cancel()
	out := classifyAppend(err)
	a := attempt{step: w.step, shard: b.shard, epoch: s.Epoch(), zombie: isZombie, retry: retry, outcome: out}
	if err != nil {
		a.err = err.Error()
	}
	w.m.record(b, a)
	ids := b.ids()
	w.tracef("%s: append %s..%s (%d rows, %s@%d) to %s epoch %d%s: %s stored=%d dup=%d gen=%d seq=%d..%d",
		b.shard, ids[0], ids[len(ids)-1], len(ids), b.src.Name, b.src.Offset, h, s.Epoch(),
		map[bool]string{true: " (zombie)", false: ""}[isZombie], a.outcomeText(), res.Stored, res.Duplicates, res.Generation, res.FirstSeq, res.LastSeq)
	switch out {
	case acked:
		w.st.acks++
		if res.Stored+res.Duplicates != len(ids) {
			w.violatef("shard %s: append of %d rows acknowledged %d stored + %d duplicates", b.shard, len(ids), res.Stored, res.Duplicates)
		}
		if retry && res.Stored > 0 {
			w.retryMayDuplicate(b, committed)
		}
	case unknown:
		if retry {
			w.retryMayDuplicate(b, committed)
		}
		w.st.unknowns++
		if errors.Is(err, engine.ErrUnknownOutcome) {
			w.st.durableUnknowns++
		}
		w.m.retryable = append(w.m.retryable, b)
	case refused:
		w.st.refusals++
	}
	if !isZombie {
		w.writerErr(b.shard, "append", err)
	}
	return out
}

func (a attempt) outcomeText() string {
	if a.err == "" {
		return a.outcome.String()
	}
	return a.outcome.String() + " (" + a.err + ")"
}

// classifyAppend maps an append's error to what the producer may assume.
// ErrUnknownOutcome wraps the fencing error that caused it, so it is
// tested first; a refusal is only an error the writer returns before its
// WAL write.
func classifyAppend(err error) outcome {
	switch {
	case err == nil:
		return acked
	case errors.Is(err, engine.ErrUnknownOutcome):
		return unknown
	case errors.Is(err, engine.ErrFenced), errors.Is(err, engine.ErrClosed), errors.Is(err, engine.ErrBatchTooLarge),
		errors.Is(err, engine.ErrBackpressure), errors.Is(err, schema.ErrInvalidRow):
		return refused
	}
	return unknown
}

// writerErr reacts to an error of the shard's writer: a stopped writer is
// replaced by the next op that needs the shard; an error that no fault of
// the simulation explains is a violation.
func (w *world) writerErr(shard, what string, err error) {
	if err == nil {
		return
	}
	switch {
	case w.crashed() || errors.Is(err, vfs.ErrInjected):
	case errors.Is(err, engine.ErrFenced), errors.Is(err, engine.ErrUnknownOutcome), errors.Is(err, engine.ErrClosed):
	case errors.Is(err, shardmeta.ErrNotApplied), errors.Is(err, shardmeta.ErrUnknownOutcome):
	default:
		w.violatef("shard %s: %s failed without a fault to explain it: %v", shard, what, err)
	}
	if o := w.owner[shard]; o != nil && o.s.Status().Stopped != "" {
		w.demote(shard, what+": "+err.Error())
	}
}

// retryMayDuplicate runs after a retry without a session stored rows anew
// (the writer held none of those ids in its memtables) or ended with an
// unknown outcome (it may have stored them). If an earlier attempt was
// already committed (in a flushed generation or the base) when the retry
// was sent, the retry came after the window in which retries are
// deduplicated: the id may end up twice, which docs/guarantees.md does not
// promise against for rows without a session.
func (w *world) retryMayDuplicate(b *batch, found map[string]bool) {
	for _, id := range b.ids() {
		if found[id] {
			w.m.ids[id].committedBeforeRetry = true
			w.st.retriedCommitted++
		}
	}
	if len(found) > 0 {
		w.tracef("%s: the retry (prompt: %v) may have stored %d ids again whose first attempt was already committed (not deduplicated without a session, as documented)",
			b.shard, b.prompt, len(found))
		if b.prompt {
			w.st.promptRetriedCommitted += len(found)
		}
	}
}

// committedIDs reports which of ids are in the shard's committed
// generations or in the base.
func (w *world) committedIDs(shard string, ids []string) map[string]bool {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	found := map[string]bool{}
	look := func(path string) {
		// The storage itself, not through the injector: this is the
		// checker looking, and it must see even after a crash point.
		_, d, err := generation.ReadStored(w.mem, path)
		if err != nil {
			return // drained meanwhile: then it is in the base, read next
		}
		for _, id := range d.Rows.IDs {
			if want[id] {
				found[id] = true
			}
		}
	}
	ctx, cancel := w.opCtx()
	defer cancel()
	if m, _, err := w.meta.Load(ctx, shard); err == nil {
		for _, g := range m.Flushed {
			look(filepath.Join(dataDir, w.table, "shards", shard, "gen", g.File))
		}
	}
	if st, err := w.loadBase(ctx); err == nil {
		for _, f := range st.Files {
			if w.store != nil {
				if _, d, err := w.readBaseFile(ctx, "", f.Path); err == nil {
					for _, id := range d.Rows.IDs {
						if want[id] {
							found[id] = true
						}
					}
				}
				continue
			}
			look(filepath.Join(dataDir, w.table, "base", filepath.FromSlash(f.Path)))
		}
	}
	return found
}

// retryPromptly sends again, at once, the batches whose outcome became
// unknown during this op (those after index from of the retryable list), to
// the shard's writer now: what docs/guarantees.md tells a producer to do.
// Older ones wait for the late retry op.
func (w *world) retryPromptly(from, pick int) {
	pending := w.m.retryable[from:]
	w.m.retryable = w.m.retryable[:from:from]
	for _, b := range pending {
		if w.crashed() {
			w.m.retryable = append(w.m.retryable, b)
			continue
		}
		o := w.ensureOwner(b.shard, pick)
		if o == nil {
			w.m.retryable = append(w.m.retryable, b)
			continue
		}
		w.st.retries++
		b.prompt = true
		w.send(o.s, b, o.host, false, true)
		b.prompt = false
	}
}

// retry sends again, late, a batch whose outcome was unknown to its
// producer, with the same ids, to the shard's current writer: a lost
// response, or a batch whose prompt retry failed too.
func (w *world) retry(d draw) {
	if len(w.m.retryable) == 0 {
		return
	}
	i := d.b % len(w.m.retryable)
	b := w.m.retryable[i]
	o := w.ensureOwner(b.shard, d.c)
	if o == nil {
		return
	}
	w.m.retryable = append(w.m.retryable[:i], w.m.retryable[i+1:]...)
	w.st.retries++
	w.send(o.s, b, o.host, false, true)
}

func (w *world) flush(shard string, o *owned) {
	w.st.flushes++
	ctx, cancel := w.opCtx()
	g, err := o.s.Flush(ctx)
	cancel()
	w.tracef("%s: flush by %s epoch %d: last committed generation %d: %v", shard, o.host, o.s.Epoch(), g, err)
	w.writerErr(shard, "flush", err)
}

// handoff moves the shard to another writer the orderly way: close (which
// flushes unless the host says not to and releases the owner key), then
// claim elsewhere. The closed Shard object stays callable as a zombie.
func (w *world) handoff(shard string, pick int, keepZombie bool) {
	o := w.owner[shard]
	if o != nil {
		ctx, cancel := w.opCtx()
		err := o.s.Close(ctx)
		cancel()
		w.tracef("%s: close by %s epoch %d: %v", shard, o.host, o.s.Epoch(), err)
		w.writerErr(shard, "close", err)
		w.setOwner(shard, nil)
		w.checkReleased(shard, o.host, "close")
		if keepZombie {
			w.zombies = append(w.zombies, &zombie{shard: shard, s: o.s, host: o.host, epoch: o.s.Epoch(), why: "closed"})
		}
	}
	if !w.crashed() {
		w.claim(shard, w.hosts[pick%len(w.hosts)])
	}
}

// epochBump writes the shard's epoch counter ahead, as an operator (or a
// claim that died after its transaction) would. The current writer is
// fenced at its next commit; with d.c odd the shard is handed over at
// once, otherwise the writer finds out by itself.
func (w *world) epochBump(shard string, d draw) {
	ctx, cancel := w.opCtx()
	defer cancel()
	key := w.keys.Epoch(shard)
	resp, err := w.cli.Get(ctx, key)
	if err != nil {
		w.fatalf("read epoch: %v", err)
	}
	var cur uint64
	if len(resp.Kvs) > 0 {
		fmt.Sscan(string(resp.Kvs[0].Value), &cur)
	}
	next := cur + 1 + uint64(d.b%3)
	if _, err := w.cli.Put(ctx, key, fmt.Sprint(next)); err != nil {
		w.fatalf("bump epoch: %v", err)
	}
	w.st.bumps++
	w.tracef("%s: epoch counter bumped %d → %d", shard, cur, next)
	if d.c%2 == 1 {
		w.handoff(shard, d.d, true)
	}
}

// restartHost closes a writer process gracefully and starts a new one in
// its slot; its shards are claimed again by whichever op needs them next.
func (w *world) restartHost(slot int) {
	old := w.hosts[slot]
	for shard, o := range w.owner {
		if o.host == old {
			w.setOwner(shard, nil)
		}
	}
	w.closeHosts([]*host{old})
	w.hosts[slot] = w.newHost(slot)
	w.tracef("restarted %s as %s", old, w.hosts[slot])
}

// revoke revokes a writer's lease (an operator, or etcd losing it). Its
// shards are zombies from then on; the simulation waits, boundedly, until
// they know it (a keepalive finds the lease gone within a third of the
// TTL) before anyone claims, because a lease revoked behind a writer's back
// is not an expiry: the writer's local deadline would still let it
// acknowledge. Appends meanwhile are legitimately acknowledged and must
// survive.
func (w *world) revoke(d draw) {
	h := w.hosts[d.b%len(w.hosts)]
	var shards []string
	for _, shard := range w.shards {
		if o := w.owner[shard]; o != nil && o.host == h {
			shards = append(shards, shard)
		}
	}
	if len(shards) == 0 {
		return
	}
	ctx, cancel := w.opCtx()
	defer cancel()
	resp, err := w.cli.Get(ctx, w.keys.Owner(shards[0]))
	if err != nil || len(resp.Kvs) == 0 {
		w.tracef("revoke: no owner key for %s (%v)", shards[0], err)
		return
	}
	older := len(w.m.retryable)
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	if _, err := w.cli.Revoke(ctx, lease); err != nil {
		w.tracef("revoke lease %x: %v", lease, err)
	}
	w.st.revokes++
	w.tracef("revoked lease %x of %s (shards %v)", lease, h, shards)
	var zs []*zombie
	for _, shard := range shards {
		o := w.owner[shard]
		w.setOwner(shard, nil)
		z := &zombie{shard: shard, s: o.s, host: h, epoch: o.s.Epoch(), why: "lease revoked"}
		zs = append(zs, z)
		w.zombies = append(w.zombies, z)
		w.st.fences++
	}
	p := w.startPressure(zs)
	for _, z := range zs {
		// The engine has no notification of a lost lease, so this polls,
		// bounded by three TTLs; a few appends go in while the writer
		// still believes in its lease.
		deadline := time.NewTimer(3 * hostLeaseTTL)
		tick := time.NewTicker(20 * time.Millisecond)
		for polls := 0; z.s.Status().Stopped == ""; polls++ {
			if polls%10 == 0 {
				w.appendFresh(z.s, z.shard, h, true, d)
				continue
			}
			select {
			case <-tick.C:
				continue
			case <-deadline.C:
			}
			break
		}
		tick.Stop()
		deadline.Stop()
		if z.s.Status().Stopped == "" {
			w.violatef("shard %s: writer %s still not fenced %v after its lease was revoked", z.shard, h, 3*hostLeaseTTL)
		}
	}
	w.stopPressure(p, nil)
	for _, shard := range shards {
		if !w.crashed() {
			w.claim(shard, w.hosts[(d.c+len(shard))%len(w.hosts)])
		}
	}
	w.retryPromptly(older, d.d)
}

// partition cuts a writer process off etcd (its client is closed). Its
// lease then expires on the server a TTL after the last keepalive, while
// its local deadline ended earlier by the margin: between the two it
// acknowledges nothing. The successor's claim waits for the expiry; from
// then on the zombie must acknowledge and commit nothing.
func (w *world) partition(d draw) {
	slot := d.b % len(w.hosts)
	h := w.hosts[slot]
	var shards []string
	for _, shard := range w.shards {
		if o := w.owner[shard]; o != nil && o.host == h {
			shards = append(shards, shard)
		}
	}
	if len(shards) == 0 {
		return
	}
	w.st.partitions++
	older := len(w.m.retryable)
	h.cli.Close()
	w.tracef("partitioned %s from etcd (shards %v)", h, shards)
	var zs []*zombie
	for _, shard := range shards {
		o := w.owner[shard]
		w.setOwner(shard, nil)
		z := &zombie{shard: shard, s: o.s, host: h, epoch: o.s.Epoch(), why: "partitioned"}
		zs = append(zs, z)
		w.zombies = append(w.zombies, z)
		w.st.fences++
		// Before the expiry: an ack here is legitimate and must survive.
		w.appendFresh(o.s, shard, h, true, d)
	}
	p := w.startPressure(zs)
	w.hosts[slot] = w.newHost(slot)
	claimed := map[string]time.Time{}
	for i, shard := range shards {
		if w.crashed() {
			break
		}
		if w.claim(shard, w.hosts[(d.c+i)%len(w.hosts)]) != nil {
			claimed[shard] = time.Now()
		}
	}
	w.stopPressure(p, claimed)
	if w.crashed() {
		return
	}
	w.retryPromptly(older, d.d)
	for _, z := range zs {
		w.callZombie(z, d)
	}
	// Closing a process cut off from etcd costs a request timeout per etcd
	// call (release, revoke), retried: seconds of wall time that prove
	// nothing more. It is closed in the background; its zombies answer
	// ErrClosed from then on.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_ = h.h.Close(ctx)
	}()
}

// zombieCall calls a zombie: an append, a flush or a drain.
func (w *world) zombieCall(d draw) {
	if len(w.zombies) == 0 {
		return
	}
	w.callZombie(w.zombies[d.b%len(w.zombies)], d)
}

func (w *world) callZombie(z *zombie, d draw) {
	w.st.zombieCalls++
	switch d.c % 3 {
	case 0, 1:
		var out outcome
		if p := w.pickProducer(z.shard, d.b, nil); p != nil && (d.d>>4)%2 == 0 {
			out = w.sendSession(z.s, w.nextSessionBatch(p, d), z.host, true)
		} else {
			out = w.send(z.s, w.newBatch(z.shard, 1+d.d%8, d.d, d.b), z.host, true, false)
		}
		if out == acked && z.succeeded {
			w.violatef("shard %s: zombie %s of epoch %d acknowledged an append after a successor claimed the shard (%s)",
				z.shard, z.host, z.epoch, z.why)
		}
	case 2:
		before := w.loadManifest(z.shard)
		ctx, cancel := w.opCtx()
		var err error
		what := "flush"
		if d.d%2 == 0 {
			_, err = z.s.Flush(ctx)
		} else {
			what = "drain"
			_, err = z.s.Drain(ctx)
		}
		cancel()
		after := w.loadManifest(z.shard)
		w.tracef("%s: zombie %s epoch %d %s: %v", z.shard, z.host, z.epoch, what, err)
		if z.succeeded && before != nil && after != nil {
			for _, g := range after.Flushed {
				if g.Epoch == z.epoch && !hasGeneration(before, g.Number) {
					w.violatef("shard %s: zombie %s of epoch %d committed generation %d after a successor claimed the shard",
						z.shard, z.host, z.epoch, g.Number)
				}
			}
		}
	}
}

func hasGeneration(m *shardmeta.Manifest, n uint64) bool {
	for _, g := range m.Flushed {
		if g.Number == n {
			return true
		}
	}
	return false
}

func (w *world) loadManifest(shard string) *shardmeta.Manifest {
	ctx, cancel := w.opCtx()
	defer cancel()
	m, _, err := w.meta.Load(ctx, shard)
	if err != nil {
		return nil
	}
	return m
}

// lagCursor is the incident the merge-side cutoff exists for: a shard whose
// generations are all merged and drained gets its replay cursor set back,
// so that the next writer replays WAL records of generations that were
// already published. Source-side exclusion skips them; with it disabled,
// only the merge's ID check keeps them out of the base twice.
func (w *world) lagCursor(shard string, d draw) {
	o := w.ensureOwner(shard, d.b)
	if o == nil {
		return
	}
	w.flush(shard, o)
	if w.crashed() || w.owner[shard] == nil {
		return
	}
	c := w.coordinator(d.c % len(w.coords))
	if c == nil {
		return
	}
	ctx, cancel := w.opCtx()
	defer cancel()
	res, err := c.c.RunOnce(ctx)
	w.noteMerge(c, "run-once (for lag)", res, err)
	if err != nil {
		return
	}
	if n, err := o.s.Drain(ctx); err != nil || w.crashed() {
		w.tracef("%s: drain before lag: %d: %v", shard, n, err)
		return
	}
	if len(o.s.Manifest().Flushed) != 0 {
		return
	}
	w.handoffClose(shard)
	if w.crashed() {
		return
	}
	m, rev, err := w.meta.Load(ctx, shard)
	if err != nil || len(m.Flushed) != 0 || m.ReplayCursor == 0 {
		return
	}
	// Only a cursor the shard really had: a record boundary. A cursor
	// inside a record is a state the writer cannot produce, and replay
	// (which reads a straddling record whole) rightly refuses to build on it.
	var earlier []uint64
	for _, c := range w.m.cursors[shard] {
		if c < m.ReplayCursor {
			earlier = append(earlier, c)
		}
	}
	old := m.ReplayCursor
	m.ReplayCursor = 0
	if len(earlier) > 0 {
		m.ReplayCursor = earlier[d.d%len(earlier)]
	}
	data, err := m.Encode()
	if err != nil {
		w.fatalf("encode lagged manifest: %v", err)
	}
	resp, err := w.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(w.keys.Manifest(shard)), "=", rev)).
		Then(clientv3.OpPut(w.keys.Manifest(shard), string(data))).Commit()
	if err != nil || !resp.Succeeded {
		w.tracef("%s: lag cursor: manifest moved (%v)", shard, err)
		return
	}
	w.st.lags++
	w.m.lagFaults[shard] = true
	w.tracef("%s: FAULT replay cursor set back %d → %d", shard, old, m.ReplayCursor)
}

// handoffClose closes the shard's writer without claiming it elsewhere.
func (w *world) handoffClose(shard string) {
	o := w.owner[shard]
	if o == nil {
		return
	}
	ctx, cancel := w.opCtx()
	err := o.s.Close(ctx)
	cancel()
	w.setOwner(shard, nil)
	w.tracef("%s: close by %s epoch %d: %v", shard, o.host, o.s.Epoch(), err)
	w.writerErr(shard, "close", err)
	w.checkReleased(shard, o.host, "close")
}

// coordinator returns the coordinator of slot, taking the lock over from
// another slot's coordinator (closed, which releases it) if needed.
func (w *world) coordinator(slot int) *coord {
	c := w.coords[slot]
	if c.c != nil {
		return c
	}
	for _, o := range w.coords {
		if o.c != nil {
			o.c.Close()
			o.c, o.plan = nil, nil
		}
	}
	ctx, cancel := w.opCtx()
	defer cancel()
	pc, err := publish.New(ctx, publish.Options{
		Etcd: w.cli, Prefix: prefix, Table: w.table, DataDir: dataDir, FS: w.fs,
		LeaseTTL: 5 * time.Second, RequestTimeout: 10 * time.Second, MemoryBudget: w.cfg.coordBudget,
		DisableReplayRanges: w.cfg.pureCutoff, Logger: w.log.With("coordinator", slot), Schema: w.tableSchema(), Store: w.store,
	})
	if err != nil {
		w.tracef("coordinator %d: new: %v", slot, err)
		if !w.crashed() && !errors.Is(err, vfs.ErrInjected) {
			w.violatef("coordinator %d: new failed without a crash: %v", slot, err)
		}
		return nil
	}
	c.c = pc
	w.tracef("coordinator %d took the lock (revision %d)", slot, pc.LockRevision())
	return c
}

// merge runs one merge op on a coordinator slot, in one of its variants.
func (w *world) merge(d draw) {
	c := w.coordinator(d.b % len(w.coords))
	if c == nil {
		return
	}
	w.st.merges++
	ctx, cancel := w.opCtx()
	defer cancel()
	if c.plan != nil {
		// A plan made steps ago, while writers went on: stage and commit
		// it now. It may be stale; it must then be refused, not applied.
		p := c.plan
		c.plan = nil
		staged, err := c.c.Stage(ctx, p)
		if err == nil {
			err = c.c.Commit(ctx, staged)
			w.noteStaged(staged, err)
		}
		w.noteMerge(c, "stage+commit of an old plan", publish.Result{}, err)
		return
	}
	switch d.c % 6 {
	case 0, 1:
		res, err := c.c.RunOnce(ctx)
		w.noteMerge(c, "run-once", res, err)
	case 2:
		staged, err := w.planStage(ctx, c)
		if staged != nil {
			err = c.c.Commit(ctx, staged)
			w.noteStaged(staged, err)
		}
		w.noteMerge(c, "plan+stage+commit", publish.Result{}, err)
	case 3:
		// Dies between stage and commit: the staged files are garbage
		// the next coordinator removes.
		staged, err := w.planStage(ctx, c)
		w.noteMerge(c, "plan+stage then die", publish.Result{}, err)
		if staged != nil {
			c.c.Close()
			c.c = nil
		}
	case 4:
		p, err := c.c.Plan(ctx)
		if err == nil {
			c.plan = p
		}
		w.noteMerge(c, "plan only (stage later)", publish.Result{}, err)
	case 5:
		w.zombieCoordinator(ctx, c, d)
	}
}

// zombieCoordinator: a coordinator stages, loses its lock (its lease is
// revoked), a successor takes over and merges, and then the old one
// commits what it staged: that commit must be refused.
func (w *world) zombieCoordinator(ctx context.Context, c *coord, d draw) {
	staged, err := w.planStage(ctx, c)
	w.noteMerge(c, "plan+stage before losing the lock", publish.Result{}, err)
	if staged == nil {
		return
	}
	old := c.c
	if _, err := w.cli.Revoke(ctx, old.Lease()); err != nil {
		w.tracef("revoke coordinator lease: %v", err)
	}
	c.c = nil
	w.tracef("coordinator %d: lock lease %x revoked with a staged result", c.slot, old.Lease())
	next := w.coordinator((c.slot + 1 + d.d%2) % len(w.coords))
	if next != nil {
		res, err := next.c.RunOnce(ctx)
		w.noteMerge(next, "run-once by the successor", res, err)
	}
	err = old.Commit(ctx, staged)
	w.tracef("coordinator %d (zombie): commit after losing the lock: %v", c.slot, err)
	if err == nil && stagedAnything(staged) {
		w.violatef("coordinator %d committed after its lock was revoked", c.slot)
	}
	old.Close()
}

func stagedAnything(s *publish.Staged) bool {
	for _, p := range s.Parts {
		if len(p.Files) > 0 || len(p.Generations) > 0 {
			return true
		}
	}
	return false
}

func (w *world) planStage(ctx context.Context, c *coord) (*publish.Staged, error) {
	p, err := c.c.Plan(ctx)
	if err != nil {
		return nil, err
	}
	if p.Empty() {
		return nil, nil
	}
	return c.c.Stage(ctx, p)
}

func (w *world) noteStaged(s *publish.Staged, commitErr error) {
	if commitErr == nil {
		w.st.mergeCommits++
		w.st.droppedInBase += int(s.DroppedInBase)
	}
}

// noteMerge records a merge result and judges its error: refusals of a
// stale plan and crashes are expected; anything else is a violation (a
// coordinator failing closed on state the system made itself can never
// publish again).
func (w *world) noteMerge(c *coord, what string, res publish.Result, err error) {
	w.tracef("coordinator %d: %s: passes=%d generations=%d read=%d staged=%d dropped=%d version=%d: %v",
		c.slot, what, res.Passes, res.Generations, res.RowsRead, res.RowsStaged, res.Dropped, res.Version, err)
	w.st.mergeCommits += res.Passes
	w.st.droppedInBase += int(res.Dropped)
	switch {
	case err == nil:
	case w.crashed() || errors.Is(err, vfs.ErrInjected):
	case errors.Is(err, publish.ErrBaseMoved), errors.Is(err, publish.ErrStalePrefix), errors.Is(err, publish.ErrNotApplied):
	case errors.Is(err, publish.ErrLockLost):
		if c.c != nil {
			c.c.Close()
			c.c, c.plan = nil, nil
		}
	case errors.Is(err, os.ErrNotExist):
		w.violatef("coordinator %d: %s: a file the plan names is gone: %v", c.slot, what, err)
	default:
		w.violatef("coordinator %d: %s failed without a fault to explain it: %v", c.slot, what, err)
	}
}

// armCrash arms a crash at one of the next 80 mutating filesystem ops
// (an append costs about two, a flush ten, a merge pass a few dozen), or,
// one time in three, at the next sync of a WAL segment while producers
// append to the shard: the records of the group commit it was to make
// durable are written and unsynced, and what the clone keeps of them is a
// torn tail, a hole, or all of them.
func (w *world) armCrash(shard string, d draw) {
	// How much of the unsynced data the storage keeps: none (the
	// strictest), a random part (torn appends, holes, lost and kept
	// renames), or all (only the processes died).
	burst := (d.c>>3)%3 == 0 && w.ensureOwner(shard, d.d) != nil && !w.crashed() && w.startBackground(shard, 2, w.step) != nil
	w.tear = []int{0, 0, 25, 50, 80, 100}[d.c%6]
	if burst {
		w.tear = []int{25, 50, 80, 100}[d.c%4]
	}
	if *flagTear >= 0 {
		w.tear = min(*flagTear, 100)
	}
	at := w.inj.Ops() + 1 + int64(d.b%80)
	if burst {
		at = w.inj.Ops() + 400 // should no WAL sync come
		w.crashAtWALSync.Store(true)
	}
	w.inj.CrashAt(at)
	w.armed = true
	w.tracef("crash armed at filesystem op %d (now %d%s), keeping %d%% of the unsynced changes",
		at, w.inj.Ops(), map[bool]string{true: ", or at the next WAL sync while producers append", false: ""}[burst], w.tear)
	for deadline := time.Now().Add(300 * time.Millisecond); burst && !w.crashed() && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
}
