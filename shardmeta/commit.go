package shardmeta

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Commit replaces the shard's manifest with next, as the claim's owner:
//
//	txn  If   ModRevision(owner) == Token, ModRevision(epoch) == Token,
//	          ModRevision(manifest) == the revision of the claim's last commit
//	     Then manifest = next
//
// next must pass Validate, keep writer_epoch at the claim's epoch, and pass
// CheckTransition from c.Manifest; otherwise nothing is written. On success
// c.Manifest becomes (a copy of) next.
//
// A false guard means fenced: the owner key moved (lease expired or revoked,
// another claim), or the epoch or manifest key was written by someone else.
// Commit then returns ErrFenced, and so does every later Commit on c.
//
// When the request fails ambiguously (deadline, cancellation, lost
// connection), Commit reads the keys back (with a fresh deadline, even if
// ctx ended) and decides:
//
//   - the manifest equals next byte for byte: committed, return nil;
//   - the owner or epoch key moved: ErrFenced;
//   - the manifest is unchanged and the owner still ours: ErrNotApplied
//     wrapping the cause. Retrying the same next is safe: the manifest guard
//     lets at most one of the attempts apply, and a late-applying first
//     attempt is recognised (the manifest equals next) as success;
//   - the manifest changed to something else: ErrFenced;
//   - the read itself fails: ErrUnknownOutcome.
func (s *Store) Commit(ctx context.Context, c *Claim, next *Manifest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fenced != nil {
		return c.fenced
	}
	data, err := checkCommit(c, next)
	if err != nil {
		return err
	}
	k := s.keys
	rctx, cancel := s.rpc(ctx)
	resp, err := s.cli.Txn(rctx).If(
		clientv3.Compare(clientv3.ModRevision(k.Owner(c.Shard)), "=", c.Token),
		clientv3.Compare(clientv3.ModRevision(k.Epoch(c.Shard)), "=", c.Token),
		clientv3.Compare(clientv3.ModRevision(k.Manifest(c.Shard)), "=", c.manifestRev),
	).Then(
		clientv3.OpPut(k.Manifest(c.Shard), string(data)),
	).Else(s.snapshotOps(c.Shard)...).Commit()
	cancel()
	if err = s.hook("commit", err); err != nil {
		return s.resolveCommit(ctx, c, next, data, classify("commit", c.Shard, err))
	}
	if resp.Succeeded {
		c.Manifest, c.manifestRev = next.Clone(), resp.Header.Revision
		return nil
	}
	return s.judgeCommit(c, next, data, snapshotFrom(resp.Responses), nil)
}

func checkCommit(c *Claim, next *Manifest) ([]byte, error) {
	if next == nil {
		return nil, fmt.Errorf("%w: shard %q: nil manifest", ErrInvalidManifest, c.Shard)
	}
	if next.WriterEpoch != c.Epoch {
		return nil, fmt.Errorf("%w: shard %q: the claim of epoch %d commits writer_epoch %d; only Claim changes it",
			ErrInvalidTransition, c.Shard, c.Epoch, next.WriterEpoch)
	}
	if err := next.Validate(); err != nil {
		return nil, fmt.Errorf("shardmeta: commit shard %q: %w", c.Shard, err)
	}
	if err := CheckTransition(c.Manifest, next); err != nil {
		return nil, fmt.Errorf("shardmeta: commit shard %q: %w", c.Shard, err)
	}
	return next.Encode()
}

// resolveCommit decides the outcome of a failed commit request.
func (s *Store) resolveCommit(ctx context.Context, c *Claim, next *Manifest, data []byte, cause error) error {
	var amb *ambiguousError
	if !errors.As(cause, &amb) {
		return cause // rejected before it could apply
	}
	snap, err := s.readSnapshot(context.WithoutCancel(ctx), c.Shard)
	if err != nil {
		return fmt.Errorf("%w: shard %q epoch %d: commit failed (%w) and reading back failed (%w)",
			ErrUnknownOutcome, c.Shard, c.Epoch, amb.err, err)
	}
	return s.judgeCommit(c, next, data, snap, amb.err)
}

// judgeCommit decides from a snapshot whether next is committed, the claim
// is fenced, or (cause != nil) the request did not apply.
func (s *Store) judgeCommit(c *Claim, next *Manifest, data []byte, snap *snapshot, cause error) error {
	holds := modRev(snap.owner) == c.Token && modRev(snap.epoch) == c.Token
	switch {
	case snap.manifest != nil && bytes.Equal(snap.manifest.Value, data):
		c.Manifest, c.manifestRev = next.Clone(), snap.manifest.ModRevision
		if !holds {
			s.fenced(c, snap) // committed before the fence; later commits fail
		}
		return nil
	case !holds:
		return s.fenced(c, snap)
	case modRev(snap.manifest) == c.manifestRev && cause != nil:
		return fmt.Errorf("%w: shard %q epoch %d: the manifest is unchanged and the claim holds; retry: %w",
			ErrNotApplied, c.Shard, c.Epoch, cause)
	default:
		err := fmt.Errorf("%w: shard %q epoch %d (token %d): the manifest was written by someone else (revision %d, last committed %d)",
			ErrFenced, c.Shard, c.Epoch, c.Token, modRev(snap.manifest), c.manifestRev)
		s.log.Warn("shard fenced", "shard", c.Shard, "epoch", c.Epoch, "err", err)
		return c.fence(err)
	}
}

// fenced records and returns the ErrFenced error for a snapshot in which the
// owner or epoch key moved.
func (s *Store) fenced(c *Claim, snap *snapshot) error {
	err := fmt.Errorf("%w: shard %q epoch %d (token %d): owner key revision %d, epoch key revision %d; the shard has another owner or none",
		ErrFenced, c.Shard, c.Epoch, c.Token, modRev(snap.owner), modRev(snap.epoch))
	s.log.Warn("shard fenced", "shard", c.Shard, "epoch", c.Epoch, "err", err)
	return c.fence(err)
}

// Release gives the shard up: it deletes the owner key if its ModRevision is
// still the claim's Token, so a successor can claim at once. The lease is
// the caller's and is left alone. Release returns nil when the owner key is
// gone afterwards (also when it had expired already), ErrFenced when another
// owner holds the shard, and ErrNotApplied / ErrUnknownOutcome as Commit
// does. After Release, Commit on c fails with ErrFenced.
func (s *Store) Release(ctx context.Context, c *Claim) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return nil
	}
	owner := s.keys.Owner(c.Shard)
	rctx, cancel := s.rpc(ctx)
	resp, err := s.cli.Txn(rctx).If(
		clientv3.Compare(clientv3.ModRevision(owner), "=", c.Token),
	).Then(
		clientv3.OpDelete(owner),
	).Else(s.snapshotOps(c.Shard)...).Commit()
	cancel()
	if err = s.hook("release", err); err != nil {
		return s.resolveRelease(ctx, c, classify("release", c.Shard, err))
	}
	if resp.Succeeded {
		return s.released(c)
	}
	return s.judgeRelease(c, snapshotFrom(resp.Responses), nil)
}

func (s *Store) resolveRelease(ctx context.Context, c *Claim, cause error) error {
	var amb *ambiguousError
	if !errors.As(cause, &amb) {
		return cause
	}
	snap, err := s.readSnapshot(context.WithoutCancel(ctx), c.Shard)
	if err != nil {
		return fmt.Errorf("%w: shard %q epoch %d: release failed (%w) and reading back failed (%w)",
			ErrUnknownOutcome, c.Shard, c.Epoch, amb.err, err)
	}
	return s.judgeRelease(c, snap, amb.err)
}

func (s *Store) judgeRelease(c *Claim, snap *snapshot, cause error) error {
	switch {
	case snap.owner == nil:
		return s.released(c)
	case snap.owner.ModRevision == c.Token && cause != nil:
		return fmt.Errorf("%w: shard %q epoch %d: the owner key is still ours; retry: %w",
			ErrNotApplied, c.Shard, c.Epoch, cause)
	default:
		return s.fenced(c, snap)
	}
}

func (s *Store) released(c *Claim) error {
	c.released = true
	c.fence(fmt.Errorf("%w: shard %q epoch %d (token %d): the claim was released", ErrFenced, c.Shard, c.Epoch, c.Token))
	s.log.Info("shard released", "shard", c.Shard, "epoch", c.Epoch, "token", c.Token)
	return nil
}
