package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

// Plan is what one merge pass will publish: per shard, the flushed
// generations above the watermark, ascending. It is valid only against the
// base state it was made at (StateRevision).
type Plan struct {
	// BaseVersion and StateRevision pin the base state the plan was made
	// at (after its cutoff write); LockRevision is the coordinator's lock.
	BaseVersion   uint64
	StateRevision int64
	LockRevision  int64
	// Shards holds one entry per shard with something to merge, by name.
	Shards []ShardPlan
	// SchemaVersion is the version of the table's schema the pass
	// publishes in (the current one when the plan was made), and Schema
	// that version's schema, with field ids: every staged row is converted
	// to it, and the commit makes it the Iceberg table's current schema.
	SchemaVersion int
	Schema        *schema.Schema
	nextFieldID   int
}

// passSchema is the schema the plan's pass publishes in.
func (p *Plan) passSchema() passSchema {
	return passSchema{version: p.SchemaVersion, schema: p.Schema, nextFieldID: p.nextFieldID}
}

// ShardPlan is one shard's part of a plan.
type ShardPlan struct {
	Shard string
	// Epoch is the manifest's writer_epoch; Watermark, Cutoff the merge
	// state the plan was made with (Cutoff as persisted).
	Epoch, Watermark, Cutoff uint64
	// Precise reports that every epoch change since the last observed epoch
	// has provenance, so only replay ranges (not the whole backlog) need
	// the ID check.
	Precise     bool
	Generations []PlannedGeneration
}

// PlannedGeneration is one generation to merge.
type PlannedGeneration struct {
	shardmeta.Generation
	// Path is the generation file's path under DataDir. With
	// Options.Store, Stage reads the object
	// layout.GenerationKey(table, shard, File) instead.
	Path string
	// IDCheck: the generation may hold rows already in the base; its rows
	// are checked against the base's ids. Reason says why.
	IDCheck bool
	Reason  string
}

// generationCount is the number of generations the plan holds.
func (p *Plan) generationCount() int {
	n := 0
	for _, sp := range p.Shards {
		n += len(sp.Generations)
	}
	return n
}

// rowCount is the rows the plan's generations hold, as their manifests
// record them.
func (p *Plan) rowCount() int64 {
	var n int64
	for _, sp := range p.Shards {
		for _, g := range sp.Generations {
			n += g.Rows
		}
	}
	return n
}

// generations returns the planned generations of shard.
func (p *Plan) generations(shard string) []PlannedGeneration {
	for _, sp := range p.Shards {
		if sp.Shard == shard {
			return sp.Generations
		}
	}
	return nil
}

// Empty reports whether the plan has nothing to merge.
func (p *Plan) Empty() bool {
	for _, s := range p.Shards {
		if len(s.Generations) > 0 {
			return false
		}
	}
	return true
}

// Plan reads base/state and every shard manifest, applies the cutoff rule
// per shard (see the package documentation), persists the shards'
// {observed_epoch, cutoff} — guarded by the lock and the base state's
// revision — and only then returns the plan. Any shard that cannot be
// planned fails the whole plan (ErrInvalidState naming the shard); nothing
// is written then.
//
// The plan's schema is the table's current schema record, read first: a
// generation listed with a newer version (the record moved on since) has
// the record read once more.
func (c *Coordinator) Plan(ctx context.Context) (*Plan, error) {
	ps, err := c.loadPassSchema(ctx)
	if err != nil {
		return nil, err
	}
	st, rev, err := c.store.LoadBaseState(ctx)
	if err != nil {
		return nil, stateErr(err)
	}
	shards, err := c.listShards(ctx)
	if err != nil {
		return nil, err
	}
	next := st.Clone()
	plan := &Plan{LockRevision: c.lockRev}
	for _, name := range shards {
		m, _, err := c.store.Load(ctx, name)
		if err != nil {
			return nil, manifestErr(name, err)
		}
		ms, had := st.Shards[name]
		sp, nms, err := c.planShard(name, m, ms, had)
		if err != nil {
			return nil, err
		}
		if had || nms.ObservedEpoch != nil {
			next.Shards[name] = nms
		}
		if len(sp.Generations) > 0 {
			plan.Shards = append(plan.Shards, sp)
		}
	}
	old, err := st.Encode()
	if err != nil {
		return nil, err
	}
	data, err := next.Encode()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(old, data) || rev == 0 {
		if rev, err = c.putState(ctx, rev, data, nil, nil); err != nil {
			return nil, err
		}
	}
	if ps, err = c.planSchema(ctx, plan, ps); err != nil {
		return nil, err
	}
	plan.SchemaVersion, plan.Schema, plan.nextFieldID = ps.version, ps.schema, ps.nextFieldID
	plan.BaseVersion, plan.StateRevision = next.Version, rev
	c.metrics.plans.Inc()
	return plan, nil
}

// planSchema is ps, or the record read again when a planned generation is
// in a newer version than ps (the record moved on while the manifests
// were read). A generation newer than the record read again names a
// version the table does not have: fail closed.
func (c *Coordinator) planSchema(ctx context.Context, plan *Plan, ps passSchema) (passSchema, error) {
	newest, shard, gen := 0, "", uint64(0)
	for _, sp := range plan.Shards {
		for _, g := range sp.Generations {
			if v := generationVersion(g.Generation); v > newest {
				newest, shard, gen = v, sp.Shard, g.Number
			}
		}
	}
	if newest <= ps.version {
		return ps, nil
	}
	ps, err := c.loadPassSchema(ctx)
	if err != nil {
		return ps, err
	}
	if newest > ps.version {
		return ps, fmt.Errorf("%w: shard %q generation %d is in schema version %d, the table's current version is %d",
			ErrInvalidState, shard, gen, newest, ps.version)
	}
	return ps, nil
}

// planShard applies the cutoff rule to one shard and lists its plan.
func (c *Coordinator) planShard(name string, m *shardmeta.Manifest, ms shardmeta.ShardMergeState, had bool) (ShardPlan, shardmeta.ShardMergeState, error) {
	e, cur := m.WriterEpoch, m.CurrentGeneration
	var maxF uint64
	if n := len(m.Flushed); n > 0 {
		maxF = m.Flushed[n-1].Number
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: shard %q: %s", ErrInvalidState, name, fmt.Sprintf(format, args...))
	}
	if ms.ObservedEpoch != nil && ms.Cutoff == nil {
		return ShardPlan{}, ms, fail("observed_epoch %d has no cutoff (writer epoch has no replay boundary)", *ms.ObservedEpoch)
	}
	if ms.ObservedEpoch != nil && *ms.ObservedEpoch > e {
		return ShardPlan{}, ms, fail("observed epoch %d is above the manifest's writer_epoch %d (moved backwards)", *ms.ObservedEpoch, e)
	}
	if ms.Watermark >= cur {
		return ShardPlan{}, ms, fail("watermark %d is not below current_generation %d", ms.Watermark, cur)
	}
	var k uint64
	if ms.Cutoff != nil {
		k = *ms.Cutoff
	}
	precise := true
	switch {
	case e == 0:
		// Never claimed: nothing flushed, nothing to observe.
		return ShardPlan{Shard: name}, ms, nil
	case ms.ObservedEpoch == nil:
		// Legacy (a cutoff without an epoch) or never planned: one
		// conservative transition.
		k, precise = max(k, maxF, cur), false
		c.metrics.transitions.WithLabelValues("conservative").Inc()
		c.log.Info("first observed epoch: conservative cutoff", "shard", name, "epoch", e, "cutoff", k, "legacy", had && ms.Cutoff != nil)
	case *ms.ObservedEpoch < e:
		if !c.opts.DisableReplayRanges && provenanceComplete(m, *ms.ObservedEpoch, e) {
			c.metrics.transitions.WithLabelValues("precise").Inc()
			c.log.Info("epoch change with provenance: replay ranges only", "shard", name, "from", *ms.ObservedEpoch, "to", e, "cutoff", k)
		} else {
			k, precise = max(k, maxF, cur), false
			c.metrics.transitions.WithLabelValues("conservative").Inc()
			c.log.Info("epoch change without full provenance: conservative cutoff", "shard", name, "from", *ms.ObservedEpoch, "to", e, "cutoff", k)
		}
	}
	nms := shardmeta.ShardMergeState{Watermark: ms.Watermark, ObservedEpoch: &e, Cutoff: &k}
	sp := ShardPlan{Shard: name, Epoch: e, Watermark: ms.Watermark, Cutoff: k, Precise: precise}
	genDir := layout.GenDir(c.opts.DataDir, c.opts.Table, name)
	for _, g := range m.Flushed {
		if g.Number <= ms.Watermark {
			continue // merged; the owner drains it
		}
		pg := PlannedGeneration{Generation: g, Path: filepath.Join(genDir, g.File)}
		switch {
		case g.Number <= k:
			pg.IDCheck, pg.Reason = true, fmt.Sprintf("generation %d <= cutoff %d", g.Number, k)
		case !c.opts.DisableReplayRanges:
			pg.IDCheck, pg.Reason = inReplayRange(m, g)
		}
		sp.Generations = append(sp.Generations, pg)
	}
	return sp, nms, nil
}

// provenanceComplete reports whether the manifest records every epoch in
// (from, to]: only then are the replay ranges known for all of them.
func provenanceComplete(m *shardmeta.Manifest, from, to uint64) bool {
	want := from + 1
	for _, r := range m.Epochs {
		if r.Epoch <= from {
			continue
		}
		if r.Epoch != want {
			return false
		}
		want++
	}
	return want == to+1
}

// inReplayRange reports whether generation g may hold replayed rows: it
// lies in a recorded [start_generation, replay_end_generation] range, or
// (while that range is still open) it was flushed by an epoch and covers a
// WAL position at or below the WAL tail that epoch inherited — replayed
// rows keep their positions, new rows get positions above the tail. A
// generation of an epoch without a record is checked.
func inReplayRange(m *shardmeta.Manifest, g shardmeta.Generation) (bool, string) {
	for _, r := range m.Epochs {
		if r.ReplayEndGeneration != 0 && g.Number >= r.StartGeneration && g.Number <= r.ReplayEndGeneration {
			return true, fmt.Sprintf("generation %d in the replay range [%d, %d] of epoch %d", g.Number, r.StartGeneration, r.ReplayEndGeneration, r.Epoch)
		}
	}
	i := slices.IndexFunc(m.Epochs, func(r shardmeta.EpochRecord) bool { return r.Epoch == g.Epoch })
	if i < 0 {
		return true, fmt.Sprintf("generation %d was flushed by epoch %d, which has no provenance record", g.Number, g.Epoch)
	}
	if r := m.Epochs[i]; g.SeqFirst <= r.StartPosition {
		return true, fmt.Sprintf("generation %d starts at position %d, at or below the tail %d inherited by epoch %d (replayed rows)", g.Number, g.SeqFirst, r.StartPosition, r.Epoch)
	}
	return false, ""
}

// listShards returns the shards with a manifest, sorted.
func (c *Coordinator) listShards(ctx context.Context) ([]string, error) {
	rctx, cancel := c.rpc(ctx)
	defer cancel()
	prefix := c.keys.Root() + "shards/"
	resp, err := c.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("publish: list shards: %w", err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), prefix)
		if name, ok := strings.CutSuffix(rest, "/manifest"); ok && !strings.Contains(name, "/") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// putState writes base/state guarded by the lock and the state's revision
// and returns the new revision. A table commit, when given, rides in the
// same transaction (its guard and its record put), so the table and the
// state change together or not at all. A lost response is resolved by
// reading the state back, which decides the table too.
func (c *Coordinator) putState(ctx context.Context, rev int64, data []byte, hook func(error) error, tc *catalog.PreparedCommit) (int64, error) {
	key, lock := c.keys.BaseState(), c.keys.BaseLock()
	var resp *clientv3.TxnResponse
	var err error
	if hook != nil && c.testHookBeforeCommitTxn != nil {
		err = c.testHookBeforeCommitTxn()
	}
	if err == nil {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(lock), "=", c.lockRev),
			clientv3.Compare(clientv3.ModRevision(key), "=", rev)}
		ops := []clientv3.Op{clientv3.OpPut(key, string(data))}
		if tc != nil {
			cmps, ops = append(cmps, tc.Cmps...), append(ops, tc.Ops...)
		}
		rctx, cancel := c.rpc(ctx)
		resp, err = c.cli.Txn(rctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(lock)).Commit()
		cancel()
	}
	if hook != nil {
		err = hook(err)
	}
	if err != nil {
		got, grev, rerr := c.readRaw(ctx)
		if c.testHookReadBack != nil {
			rerr = c.testHookReadBack(rerr)
		}
		switch {
		case rerr != nil:
			return 0, fmt.Errorf("%w: write base state: %v; reading back: %v", ErrUnknownOutcome, err, rerr)
		case bytes.Equal(got, data) && grev > rev:
			return grev, nil
		case grev == rev:
			return 0, fmt.Errorf("%w: write base state: %v (read back: unchanged)", ErrNotApplied, err)
		}
		return 0, fmt.Errorf("%w: write base state: %v (read back: state moved to revision %d)", ErrBaseMoved, err, grev)
	}
	if !resp.Succeeded {
		return 0, c.guardFailed(resp)
	}
	return resp.Header.Revision, nil
}

func (c *Coordinator) guardFailed(resp *clientv3.TxnResponse) error {
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 || kvs[0].ModRevision != c.lockRev {
		c.metrics.commits.WithLabelValues("lock_lost").Inc()
		return fmt.Errorf("%w: %s no longer holds revision %d", ErrLockLost, c.keys.BaseLock(), c.lockRev)
	}
	c.metrics.commits.WithLabelValues("moved").Inc()
	return ErrBaseMoved
}

// readRaw reads base/state's bytes and revision (0 when absent).
func (c *Coordinator) readRaw(ctx context.Context) ([]byte, int64, error) {
	rctx, cancel := c.rpc(ctx)
	defer cancel()
	resp, err := c.cli.Get(rctx, c.keys.BaseState())
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// manifestErr names the shard whose manifest could not be loaded, and
// marks a refused one (malformed) as ErrInvalidState; an etcd that did not
// answer is not damage, and the next pass tries again.
func manifestErr(shard string, err error) error {
	if errors.Is(err, shardmeta.ErrInvalidManifest) {
		return fmt.Errorf("%w: shard %q: %w", ErrInvalidState, shard, err)
	}
	return fmt.Errorf("publish: shard %q: %w", shard, err)
}

// stateErr marks a refused stored base state as ErrInvalidState.
func stateErr(err error) error {
	if errors.Is(err, shardmeta.ErrInvalidBaseState) {
		return fmt.Errorf("%w: %w", ErrInvalidState, err)
	}
	return err
}
