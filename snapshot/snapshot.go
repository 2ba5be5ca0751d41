package snapshot

import (
	"context"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/rollwal/rollwal/errs"
)

// Limits on what a Store accepts. They are checked before any request is
// sent; a value beyond them is ErrInvalid.
const (
	// MaxKeyPartLen bounds each of Key.Table, Key.Shard and Key.Source, in
	// bytes.
	MaxKeyPartLen = 512
	// MaxValueLen bounds Snapshot.Value. etcd refuses requests above 1.5 MiB
	// by default and Cassandra warns on large partitions; a snapshot is a
	// resume point, not a data blob.
	MaxValueLen = 1 << 20
	// MaxMetadataLen bounds the sum of the lengths of Snapshot.Metadata's
	// keys and values, in bytes.
	MaxMetadataLen = 64 << 10
)

// Category errors, checked with errors.Is. Each carries its category of package errs (see docs/errors.md).
var (
	// ErrConflict: the persist would have moved the stored offset backwards
	// and changed nothing. The error is a *ConflictError carrying the stored
	// offset. The caller is behind: it is a zombie, or another writer is
	// ahead of it. Recover from the stored snapshot; never retry blindly.
	ErrConflict = errs.New(errs.Conflict, "snapshot: conflict")
	// ErrUnknownOutcome: the write was sent and no answer came back (a
	// timeout, a lost connection, a CAS write timeout). It may or may not
	// have applied, now or later — never treat it as "not applied". Persist
	// the same offset again (or a higher one): the fence admits an equal
	// offset, so a retry of one's own landed write succeeds.
	ErrUnknownOutcome = errs.New(errs.UnknownOutcome, "snapshot: unknown outcome")
	// ErrNotFound: no snapshot is stored under the key (never written,
	// deleted, or expired).
	ErrNotFound = errs.New(errs.NotFound, "snapshot: not found")
	// ErrInvalid: a key, snapshot or option outside the contract. Nothing
	// was sent.
	ErrInvalid = errs.New(errs.InvalidInput, "snapshot: invalid")
	// ErrCorrupt: a stored snapshot that does not decode. The store fails
	// closed: Get and Persist refuse the key until an operator deletes it.
	ErrCorrupt = errs.New(errs.Corruption, "snapshot: corrupt stored snapshot")
)

// Key names one snapshot: the offset of one source, as one shard of one
// table consumed it. Source is free-form, e.g. "topic/partition" or a
// producer stream id. Every part is non-empty, valid UTF-8 without control
// characters (C0, DEL and C1; every other character, printable or not, is
// allowed, as engine.ValidateSource allows it in a source name), and at
// most MaxKeyPartLen bytes.
type Key struct {
	Table, Shard, Source string
}

func (k Key) String() string { return fmt.Sprintf("%q/%q/%q", k.Table, k.Shard, k.Source) }

// Validate reports the first part of k outside the contract, as ErrInvalid.
func (k Key) Validate() error {
	for _, p := range [...]struct{ name, v string }{
		{"table", k.Table}, {"shard", k.Shard}, {"source", k.Source},
	} {
		if err := validPart(p.v); err != nil {
			return fmt.Errorf("%w: key %s: %s %w", ErrInvalid, k, p.name, err)
		}
	}
	return nil
}

// validPart returns a bare description (no category) of why s is not a key
// part.
func validPart(s string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case len(s) > MaxKeyPartLen:
		return fmt.Errorf("is %d bytes, more than %d", len(s), MaxKeyPartLen)
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("has the control character %U at byte %d", r, i)
		}
	}
	return nil
}

// Snapshot is what a Key stores: a resume point (Offset, the fence token)
// and opaque state at that point. Offset is at least 0; 0 is a real offset,
// never "absent". A nil and an empty Value are the same, as are a nil and an
// empty Metadata: Get returns nil for both.
type Snapshot struct {
	Offset   int64
	Value    []byte
	Metadata map[string]string
}

// Validate reports the first field of s outside the contract, as ErrInvalid.
func (s Snapshot) Validate() error {
	if s.Offset < 0 {
		return fmt.Errorf("%w: offset %d is negative", ErrInvalid, s.Offset)
	}
	if len(s.Value) > MaxValueLen {
		return fmt.Errorf("%w: value is %d bytes, more than %d", ErrInvalid, len(s.Value), MaxValueLen)
	}
	n := 0
	for k, v := range s.Metadata {
		n += len(k) + len(v)
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: metadata entry %q=%q: keys must be non-empty, keys and values valid UTF-8",
				ErrInvalid, k, v)
		}
	}
	if n > MaxMetadataLen {
		return fmt.Errorf("%w: metadata is %d bytes, more than %d", ErrInvalid, n, MaxMetadataLen)
	}
	return nil
}

// normalize maps empty Value and Metadata to nil, as Get returns them.
func (s Snapshot) normalize() Snapshot {
	if len(s.Value) == 0 {
		s.Value = nil
	}
	if len(s.Metadata) == 0 {
		s.Metadata = nil
	}
	return s
}

// ConflictError is a refused Persist. It wraps ErrConflict.
type ConflictError struct {
	Key Key
	// Stored is the offset the store holds, read in the same atomic step
	// that refused the write; it is greater than Attempted. It is -1 when
	// the store could not name it: the key vanished (a concurrent Delete or
	// expiry) between the steps of one Persist — a spurious conflict that the
	// next Persist resolves.
	Stored int64
	// Attempted is the offset Persist was called with.
	Attempted int64
}

func (e *ConflictError) Error() string {
	if e.Stored < 0 {
		return fmt.Sprintf("%v: key %s: offset %d not stored: the key changed under a concurrent delete or expiry; persist again",
			ErrConflict, e.Key, e.Attempted)
	}
	return fmt.Sprintf("%v: key %s: offset %d is behind the stored offset %d", ErrConflict, e.Key, e.Attempted, e.Stored)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// Store keeps one snapshot per Key, fenced by its offset. All methods are
// safe for concurrent use, from any number of processes.
type Store interface {
	// Get returns the stored snapshot, or ErrNotFound.
	Get(ctx context.Context, key Key) (Snapshot, error)
	// Persist stores s if that does not move the stored offset backwards:
	// it lands when the key is absent or its stored offset is <= s.Offset
	// (an equal offset replaces Value and Metadata). Otherwise it changes
	// nothing and returns a *ConflictError. A request that got no answer is
	// ErrUnknownOutcome. Other errors (invalid input, a request refused
	// before it ran) mean nothing was written.
	Persist(ctx context.Context, key Key, s Snapshot) error
	// Delete removes the snapshot. Deleting an absent key is not an error.
	// A delete is not fenced: see the package doc for the residual.
	Delete(ctx context.Context, key Key) error
	// Close releases what the store opened itself (not a client that was
	// passed in).
	Close() error
}

// checkArgs validates a request's key (and snapshot, if any) and context
// before anything is sent.
func checkArgs(ctx context.Context, key Key, s *Snapshot) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if s != nil {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("%w (key %s)", err, key)
		}
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("snapshot: key %s: not sent: %w", key, err)
	}
	return nil
}
