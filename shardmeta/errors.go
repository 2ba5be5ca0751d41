package shardmeta

import (
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/rollwal/rollwal/errs"
)

// Category errors, checked with errors.Is. Every error this package returns
// for one of these conditions wraps exactly one of them and names the shard,
// the field and the values involved. Each carries its category of package errs (see docs/errors.md).
var (
	// ErrInvalidManifest: a manifest that is malformed or breaks an
	// invariant. Decode, Validate and Encode refuse it; stored ones fail
	// Claim and Load closed.
	ErrInvalidManifest = errs.New(errs.Corruption, "shardmeta: invalid manifest")
	// ErrInvalidTransition: a change of manifest that would move something
	// backwards (see CheckTransition).
	ErrInvalidTransition = errs.New(errs.InvalidInput, "shardmeta: invalid manifest transition")
	// ErrInvalidEpoch: the stored epoch counter is unparsable, zero, or
	// behind the manifest's writer_epoch. Claims fail closed until an
	// operator repairs it (deleting the key reseeds it from the manifest).
	ErrInvalidEpoch = errs.New(errs.Corruption, "shardmeta: invalid epoch")
	// ErrFenced: the claim lost ownership — the owner key (or the epoch key,
	// or the manifest) moved since the claim's revision. Stop writing and
	// never retry with the same Claim; claim anew for a new epoch.
	ErrFenced = errs.New(errs.NotOwner, "shardmeta: fenced")
	// ErrOwned: another owner holds the shard. The error is an *OwnedError.
	ErrOwned = errs.New(errs.NotOwner, "shardmeta: shard owned")
	// ErrNotApplied: an etcd request failed ambiguously, and reading back
	// proved it had not applied while the claim still holds. Retrying the
	// same operation is safe.
	ErrNotApplied = errs.New(errs.NotApplied, "shardmeta: not applied")
	// ErrUnknownOutcome: a request failed ambiguously and reading back failed
	// too. The write may or may not have applied; do not assume either.
	ErrUnknownOutcome = errs.New(errs.UnknownOutcome, "shardmeta: unknown outcome")
	// ErrInvalidName: a prefix, table or shard name outside
	// [A-Za-z0-9._-]{1,128}.
	ErrInvalidName = errs.New(errs.InvalidInput, "shardmeta: invalid name")
)

// OwnedError reports the owner found by a refused Claim. It wraps ErrOwned.
type OwnedError struct {
	Shard string
	// Owner is the decoded owner record; zero if Raw did not decode.
	Owner Owner
	// Raw is the owner key's value as stored.
	Raw string
	// Lease is the lease the owner key is bound to.
	Lease int64
	// Revision is the owner key's ModRevision. Watch from Revision+1 for its
	// DELETE (WaitOwnerGone does).
	Revision int64
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("%v: shard %q is held by %s (lease %x, owner key revision %d)",
		ErrOwned, e.Shard, e.Raw, e.Lease, e.Revision)
}

func (e *OwnedError) Unwrap() error { return ErrOwned }

func ownedError(shard string, kv *mvccpb.KeyValue) *OwnedError {
	e := &OwnedError{Shard: shard, Raw: string(kv.Value), Lease: kv.Lease, Revision: kv.ModRevision}
	_ = json.Unmarshal(kv.Value, &e.Owner) // informational; Raw is always kept
	return e
}

// invalidf returns an ErrInvalidManifest error with a formatted detail.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidManifest, fmt.Sprintf(format, args...))
}

// transitionf returns an ErrInvalidTransition error with a formatted detail.
func transitionf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidTransition, fmt.Sprintf(format, args...))
}
