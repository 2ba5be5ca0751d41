package shardmeta

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Claim is a writer's ownership of one shard for one epoch. Commit and
// Release serialise on it and may be called from any goroutine; read
// Manifest only between them (from the goroutine that commits).
type Claim struct {
	Shard string
	// Epoch is the writer epoch this claim holds; immutable.
	Epoch uint64
	// Token is the revision of the claim transaction, which is the owner
	// key's ModRevision (and the epoch key's). Every later write is guarded
	// by it; immutable.
	Token int64
	// Manifest is the manifest as last committed through this claim. Do not
	// modify it: build the next one from Manifest.Clone().
	Manifest *Manifest
	// Lease is the lease the owner key is bound to.
	Lease clientv3.LeaseID
	// Adopted is set when the claim was recognised by reading back: an
	// earlier claim transaction of ours failed ambiguously but had applied.
	// Immutable.
	Adopted bool

	mu          sync.Mutex
	manifestRev int64 // ModRevision of the manifest key as last committed
	fenced      error // sticky: set once the claim is lost or released
	released    bool
}

// Err returns nil while the claim may commit, and the sticky ErrFenced error
// once it learned it lost the shard or was released.
func (c *Claim) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fenced
}

func (c *Claim) fence(err error) error {
	if c.fenced == nil {
		c.fenced = err
	}
	return err
}

// claimPlan is one attempt's intended writes.
type claimPlan struct {
	epoch         uint64
	next          *Manifest
	manifestValue []byte
	ownerValue    []byte
}

// Claim makes the caller the shard's owner for a new epoch:
//
//	read    epoch (e, rev eR), owner, manifest (m, rev mR) at one revision
//	txn     If   owner absent (CreateRevision 0), ModRevision(epoch) == eR,
//	             ModRevision(manifest) == mR
//	        Then epoch    = max(e, m.writer_epoch) + 1
//	             owner    = Owner JSON, bound to lease
//	             manifest = m with writer_epoch = the new epoch and a new
//	                        EpochRecord{start_generation: current_generation,
//	                        start_position: set by prepare}, less the
//	                        epoch records nothing needs any more
//	                        (PruneEpochs, after prepare)
//
// The transaction's revision is the claim's Token. prepare, if not nil, is
// called with the new manifest before the transaction; it may modify it
// (normally only the new record's StartPosition, the WAL tail, which starts
// at the lowest value accepted: max(replay_cursor, the previous epoch's
// start_position)) and may be called more than once
// if the keys move. The result must pass Validate and CheckTransition.
//
// Claim fails with an *OwnedError (ErrOwned) while an owner exists — call
// WaitOwnerGone and claim again — and fails closed with ErrInvalidEpoch or
// ErrInvalidManifest when the stored epoch or manifest is unparsable or the
// epoch counter is behind the manifest's writer_epoch. An absent epoch key
// is reseeded from the manifest, so epochs stay monotonic even if the
// counter is lost. lease must not be clientv3.NoLease.
//
// When a claim transaction fails ambiguously, the next read recognises the
// owner key if that transaction applied after all (same lease, same value)
// and adopts it. If the attempts run out meanwhile, the error wraps
// ErrUnknownOutcome: the owner key may still appear bound to lease, so
// revoke the lease rather than reuse it.
func (s *Store) Claim(ctx context.Context, shard string, owner Owner, lease clientv3.LeaseID, prepare func(m *Manifest) error) (*Claim, error) {
	if err := s.check(shard); err != nil {
		return nil, err
	}
	if lease == clientv3.NoLease {
		return nil, fmt.Errorf("shardmeta: claim shard %q: no lease; an owner key without one would never expire", shard)
	}
	if owner.Writer == "" {
		return nil, fmt.Errorf("shardmeta: claim shard %q: Owner.Writer is empty", shard)
	}
	var pending [][]byte // owner values of transactions with unknown outcome
	for range maxClaimAttempts {
		c, err := s.claimOnce(ctx, shard, owner, lease, prepare, &pending)
		if !errors.Is(err, errMoved) {
			return c, unknownIf(pending, c, err)
		}
	}
	return nil, unknownIf(pending, nil, fmt.Errorf(
		"shardmeta: claim shard %q: the epoch or manifest key moved during each of %d attempts", shard, maxClaimAttempts))
}

// errMoved: the claim guard failed because the epoch or manifest key moved.
var errMoved = errors.New("shardmeta: epoch or manifest moved")

// unknownIf marks a failed Claim as of unknown outcome when an earlier
// attempt's outcome stayed unknown.
func unknownIf(pending [][]byte, c *Claim, err error) error {
	if err == nil || c != nil || len(pending) == 0 || errors.As(err, new(*OwnedError)) {
		return err
	}
	return fmt.Errorf("%w: an earlier claim transaction may still apply: %w", ErrUnknownOutcome, err)
}

func (s *Store) claimOnce(ctx context.Context, shard string, owner Owner, lease clientv3.LeaseID,
	prepare func(*Manifest) error, pending *[][]byte) (*Claim, error) {
	snap, err := s.readSnapshot(ctx, shard)
	if err != nil {
		return nil, err
	}
	if snap.owner != nil {
		if !isOurs(snap.owner, owner, lease, *pending) {
			return nil, ownedError(shard, snap.owner)
		}
		if adoptable(snap) {
			return s.adopt(shard, snap)
		}
		if err := s.dropStaleOwner(ctx, shard, snap.owner); err != nil {
			return nil, err
		}
		return nil, errMoved // plan again on what is there now
	}
	p, err := planClaim(shard, snap, owner, prepare)
	if err != nil {
		return nil, err
	}
	c, err := s.claimTxn(ctx, shard, snap, p, lease)
	var amb *ambiguousError
	if errors.As(err, &amb) {
		*pending = append(*pending, p.ownerValue)
		return nil, errMoved // read again: the next snapshot decides
	}
	if err == nil {
		// The engine logs the claim at info, with the WAL it opens.
		s.log.Debug("shard claimed", "shard", shard, "epoch", c.Epoch, "token", c.Token,
			"start_generation", c.Manifest.CurrentGeneration, "writer", owner.Writer)
	}
	return c, err
}

// planClaim computes the new epoch and manifest from a snapshot, failing
// closed on an unparsable or regressed epoch and an undecodable manifest.
func planClaim(shard string, snap *snapshot, owner Owner, prepare func(*Manifest) error) (*claimPlan, error) {
	e, err := parseEpoch(shard, snap.epoch)
	if err != nil {
		return nil, err
	}
	cur, err := decodeStored(shard, snap.manifest)
	if err != nil {
		return nil, err
	}
	if snap.epoch != nil && e < cur.WriterEpoch {
		return nil, fmt.Errorf("%w: shard %q: epoch key holds %d, below the manifest's writer_epoch %d: the counter regressed (restored from an old backup?); refusing to claim (deleting the epoch key reseeds it from the manifest)",
			ErrInvalidEpoch, shard, e, cur.WriterEpoch)
	}
	if max(e, cur.WriterEpoch) == math.MaxUint64 {
		return nil, fmt.Errorf("%w: shard %q: epoch %d cannot be incremented", ErrInvalidEpoch, shard, uint64(math.MaxUint64))
	}
	p := &claimPlan{epoch: max(e, cur.WriterEpoch) + 1, next: cur.Clone()}
	p.next.WriterEpoch = p.epoch
	p.next.Epochs = append(p.next.Epochs, EpochRecord{
		Epoch: p.epoch, StartGeneration: cur.CurrentGeneration, StartPosition: startFloor(cur),
	})
	if prepare != nil {
		if err := prepare(p.next); err != nil {
			return nil, fmt.Errorf("shardmeta: claim shard %q: prepare: %w", shard, err)
		}
	}
	p.next.PruneEpochs()
	if err := checkClaimManifest(shard, cur, p); err != nil {
		return nil, err
	}
	if p.manifestValue, err = p.next.Encode(); err != nil {
		return nil, err
	}
	p.ownerValue, err = json.Marshal(Owner{Writer: owner.Writer, Epoch: p.epoch, Address: owner.Address})
	return p, err
}

// startFloor is the lowest start_position a new epoch may record: the WAL
// tail is never below the replay cursor nor below an older epoch's tail.
func startFloor(m *Manifest) uint64 {
	last, _ := m.LastEpoch()
	return max(m.ReplayCursor, last.StartPosition)
}

func checkClaimManifest(shard string, cur *Manifest, p *claimPlan) error {
	next := p.next
	if err := next.Validate(); err != nil {
		return fmt.Errorf("shardmeta: claim shard %q: prepared manifest: %w", shard, err)
	}
	if err := CheckTransition(cur, next); err != nil {
		return fmt.Errorf("shardmeta: claim shard %q: prepared manifest: %w", shard, err)
	}
	last, _ := next.LastEpoch()
	added := 0
	for _, r := range next.Epochs {
		if r.Epoch > cur.WriterEpoch {
			added++
		}
	}
	switch {
	case next.WriterEpoch != p.epoch || added != 1:
		return fmt.Errorf("%w: shard %q: prepare changed the claimed epoch %d (writer_epoch %d, %d epoch records added, want 1)",
			ErrInvalidTransition, shard, p.epoch, next.WriterEpoch, added)
	case last.StartPosition < cur.ReplayCursor:
		return fmt.Errorf("%w: shard %q: start_position %d of epoch %d is below replay_cursor %d; the WAL tail cannot be below what is committed",
			ErrInvalidTransition, shard, last.StartPosition, p.epoch, cur.ReplayCursor)
	}
	return nil
}

func (s *Store) claimTxn(ctx context.Context, shard string, snap *snapshot, p *claimPlan, lease clientv3.LeaseID) (*Claim, error) {
	k := s.keys
	rctx, cancel := s.rpc(ctx)
	defer cancel()
	resp, err := s.cli.Txn(rctx).If(
		clientv3.Compare(clientv3.CreateRevision(k.Owner(shard)), "=", 0),
		clientv3.Compare(clientv3.ModRevision(k.Epoch(shard)), "=", modRev(snap.epoch)),
		clientv3.Compare(clientv3.ModRevision(k.Manifest(shard)), "=", modRev(snap.manifest)),
	).Then(
		clientv3.OpPut(k.Epoch(shard), strconv.FormatUint(p.epoch, 10)),
		clientv3.OpPut(k.Owner(shard), string(p.ownerValue), clientv3.WithLease(lease)),
		clientv3.OpPut(k.Manifest(shard), string(p.manifestValue)),
	).Else(
		clientv3.OpGet(k.Owner(shard)),
	).Commit()
	if err = s.hook("claim", err); err != nil {
		return nil, classify("claim", shard, err)
	}
	if !resp.Succeeded {
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 && kvs[0].Lease != int64(lease) {
			return nil, ownedError(shard, kvs[0])
		}
		// No owner, or one under our own lease: an earlier attempt of ours
		// applied after all; the next read adopts it.
		return nil, errMoved
	}
	rev := resp.Header.Revision
	return &Claim{Shard: shard, Epoch: p.epoch, Token: rev, Manifest: p.next.Clone(), Lease: lease, manifestRev: rev}, nil
}

// isOurs reports whether an owner key was written by one of our own claim
// attempts: one whose outcome stayed unknown in this Claim (pending), or,
// since a Claim may be retried whole after such an attempt and no other
// writer can bind a key to our lease, any owner key under our lease naming
// our writer.
func isOurs(kv *mvccpb.KeyValue, owner Owner, lease clientv3.LeaseID, pending [][]byte) bool {
	if kv.Lease != int64(lease) {
		return false
	}
	for _, v := range pending {
		if bytes.Equal(kv.Value, v) {
			return true
		}
	}
	var o Owner
	return json.Unmarshal(kv.Value, &o) == nil && o.Writer == owner.Writer
}

// adopt turns a snapshot showing our own earlier, ambiguously failed claim
// transaction into a Claim. The three keys were written by that one
// transaction, so they share its revision unless something wrote since.
func (s *Store) adopt(shard string, snap *snapshot) (*Claim, error) {
	tok := snap.owner.ModRevision
	e, err := parseEpoch(shard, snap.epoch)
	if err != nil {
		return nil, err
	}
	m, err := decodeStored(shard, snap.manifest)
	if err != nil {
		return nil, err
	}
	s.log.Info("shard claimed (outcome resolved by reading back)", "shard", shard, "epoch", e, "token", tok)
	return &Claim{Shard: shard, Epoch: e, Token: tok, Manifest: m, Lease: clientv3.LeaseID(snap.owner.Lease), Adopted: true, manifestRev: tok}, nil
}

// adoptable reports whether an owner key of ours is the claim transaction
// as it applied, untouched since: the owner, epoch and manifest keys all
// at its revision.
func adoptable(snap *snapshot) bool {
	tok := snap.owner.ModRevision
	return snap.owner.CreateRevision == tok && modRev(snap.epoch) == tok && modRev(snap.manifest) == tok
}

// dropStaleOwner deletes an owner key of ours that is not a claim in
// progress: an earlier claim of this writer, under the same lease, that
// committed since (so it was served) and whose release failed when its
// shard closed or its open failed. Left alone it would hold the shard for
// as long as the lease lives, against every writer, this one included.
func (s *Store) dropStaleOwner(ctx context.Context, shard string, kv *mvccpb.KeyValue) error {
	s.log.Warn("removing an owner key of an earlier claim of this writer that was never released",
		"shard", shard, "revision", kv.ModRevision, "lease", kv.Lease, "owner", string(kv.Value))
	rctx, cancel := s.rpc(ctx)
	defer cancel()
	key := s.keys.Owner(shard)
	_, err := s.cli.Txn(rctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision),
		clientv3.Compare(clientv3.LeaseValue(key), "=", kv.Lease),
	).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return classify("remove stale owner key of", shard, err) // the next read decides
	}
	return nil
}

// WaitOwnerGone returns once the shard has no owner: at once if the owner
// key is absent, otherwise when a watch from the read revision sees its
// DELETE (lease expiry or revocation, or a Release). It never waits on a
// local clock. It returns ctx's error when ctx ends first.
func (s *Store) WaitOwnerGone(ctx context.Context, shard string) error {
	if err := s.check(shard); err != nil {
		return err
	}
	key := s.keys.Owner(shard)
	for {
		rctx, cancel := s.rpc(ctx)
		resp, err := s.cli.Get(rctx, key)
		cancel()
		if err != nil {
			return fmt.Errorf("shardmeta: wait for owner of shard %q: %w", shard, err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		gone, err := s.watchDelete(ctx, key, resp.Header.Revision+1)
		if gone || err != nil {
			return err
		}
		// The watch ended without a verdict (compaction, reconnect): read again.
	}
}

func (s *Store) watchDelete(ctx context.Context, key string, from int64) (bool, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.cli.Watch(wctx, key, clientv3.WithRev(from)) {
		if wr.CompactRevision != 0 {
			return false, nil
		}
		if err := wr.Err(); err != nil {
			return false, fmt.Errorf("shardmeta: watch %s: %w", key, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return true, nil
			}
		}
	}
	if ctx.Err() != nil {
		return false, fmt.Errorf("shardmeta: wait for %s to go: %w", key, context.Cause(ctx))
	}
	return false, nil
}
