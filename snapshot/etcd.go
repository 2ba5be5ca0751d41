package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/rollwal/rollwal/internal/etcderr"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults and bounds of the etcd backend.
const (
	DefaultEtcdRequestTimeout = 5 * time.Second
	// etcdMaxAttempts bounds the read-compare-swap loop of one Persist.
	// Every failed attempt means another Persist of the same key landed in
	// between, so the loop only spins while others make progress.
	etcdMaxAttempts = 64
	// etcdRecordVersion is the version field of the stored JSON. Wire format:
	// change it only with a decoder for the old one.
	etcdRecordVersion = 1
)

// EtcdOptions configure NewEtcd. The zero value is usable.
type EtcdOptions struct {
	// TTL, when positive, makes every snapshot expire TTL after its last
	// write: each write binds the key to a fresh lease of TTL (rounded up to
	// whole seconds; etcd may raise a very short TTL to its minimum). Zero
	// means snapshots never expire.
	TTL time.Duration
	// RequestTimeout bounds each etcd request (on top of the caller's
	// context); default DefaultEtcdRequestTimeout.
	RequestTimeout time.Duration
}

// EnsureDefaults fills in the zero fields that have defaults.
func (o *EtcdOptions) EnsureDefaults() {
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultEtcdRequestTimeout
	}
}

// Validate reports the first unusable option, as ErrInvalid.
func (o *EtcdOptions) Validate() error {
	if o.TTL < 0 {
		return fmt.Errorf("%w: etcd TTL %s is negative", ErrInvalid, o.TTL)
	}
	return nil
}

// Etcd is the etcd backend: one key per snapshot,
//
//	/<prefix>/<table>/snapshots/<shard>/<source>     (each part path-escaped)
//
// holding the JSON record {"version":1,"offset":N,"value":base64,
// "metadata":{...}}, bound to a lease of EtcdOptions.TTL when one is set.
//
// Persist reads the key, refuses (without writing) when the stored offset is
// above the new one, and otherwise writes in a transaction guarded by the
// ModRevision it read — 0 for an absent key. A lost race re-reads from the
// transaction's else branch and compares again, so the outcome is the same
// as one atomic "put if stored offset <= mine". After a write lands, the
// lease of the replaced version is revoked (it held nothing else), so
// leases do not pile up at one per write.
type Etcd struct {
	kv     clientv3.KV
	lease  clientv3.Lease
	prefix string
	opts   EtcdOptions
	ttlSec int64
}

var _ Store = (*Etcd)(nil)

// NewEtcd returns the etcd backend over cli, under prefix: one or more names
// of [A-Za-z0-9._-] joined by "/", as shardmeta's keys. cli stays the
// caller's: Close does not close it.
func NewEtcd(cli *clientv3.Client, prefix string, opts EtcdOptions) (*Etcd, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcd client is nil", ErrInvalid)
	}
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	s := &Etcd{kv: cli.KV, lease: cli.Lease, prefix: prefix, opts: opts}
	if opts.TTL > 0 {
		s.ttlSec = int64((opts.TTL + time.Second - 1) / time.Second)
	}
	return s, nil
}

func validPrefix(prefix string) error {
	for _, seg := range strings.Split(prefix, "/") {
		ok := seg != "" && seg != "." && seg != ".." && len(seg) <= 128
		for i := 0; ok && i < len(seg); i++ {
			c := seg[i]
			ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
				c == '.' || c == '_' || c == '-'
		}
		if !ok {
			return fmt.Errorf("%w: etcd prefix %q: want names of 1-128 characters of [A-Za-z0-9._-] joined by \"/\"",
				ErrInvalid, prefix)
		}
	}
	return nil
}

// etcdKey names key's etcd key. Path-escaping every part (which escapes "/"
// and "%") makes the mapping injective even though a Source such as
// "topic/3" contains slashes.
func (s *Etcd) etcdKey(key Key) string {
	return "/" + s.prefix + "/" + url.PathEscape(key.Table) + "/snapshots/" +
		url.PathEscape(key.Shard) + "/" + url.PathEscape(key.Source)
}

// Get returns the stored snapshot, or ErrNotFound.
func (s *Etcd) Get(ctx context.Context, key Key) (Snapshot, error) {
	if err := checkArgs(ctx, key, nil); err != nil {
		return Snapshot{}, err
	}
	kv, err := s.read(ctx, s.etcdKey(key))
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: etcd: get key %s: %w", key, err)
	}
	if kv == nil {
		return Snapshot{}, fmt.Errorf("%w: key %s", ErrNotFound, key)
	}
	return decodeEtcd(key, kv)
}

// Persist stores snap unless the stored offset is above snap.Offset. See
// Etcd for the protocol.
func (s *Etcd) Persist(ctx context.Context, key Key, snap Snapshot) (err error) {
	if err := checkArgs(ctx, key, &snap); err != nil {
		return err
	}
	k := s.etcdKey(key)
	val, err := encodeEtcd(snap)
	if err != nil {
		return err
	}
	kv, err := s.read(ctx, k)
	if err != nil {
		return fmt.Errorf("snapshot: etcd: persist key %s: read (nothing written): %w", key, err)
	}
	var lease clientv3.LeaseID
	keepLease := false
	defer func() {
		if lease != 0 && !keepLease {
			s.revoke(ctx, lease)
		}
	}()
	for range etcdMaxAttempts {
		var rev int64
		if kv != nil {
			stored, err := decodeEtcd(key, kv)
			if err != nil {
				return err
			}
			if stored.Offset > snap.Offset {
				return &ConflictError{Key: key, Stored: stored.Offset, Attempted: snap.Offset}
			}
			rev = kv.ModRevision
		}
		if lease == 0 && s.ttlSec > 0 {
			if lease, err = s.grant(ctx); err != nil {
				return fmt.Errorf("snapshot: etcd: persist key %s: grant a %ds lease (nothing written): %w",
					key, s.ttlSec, err)
			}
		}
		landed, cur, err := s.swap(ctx, k, rev, val, lease)
		switch {
		case err != nil && etcderr.Definitive(err):
			return fmt.Errorf("snapshot: etcd: persist key %s: refused (nothing written): %w", key, err)
		case err != nil:
			keepLease = true // the write may hold it
			return fmt.Errorf("%w: etcd: persist key %s at offset %d: %w", ErrUnknownOutcome, key, snap.Offset, err)
		case landed:
			keepLease = true
			if kv != nil && kv.Lease != 0 && clientv3.LeaseID(kv.Lease) != lease {
				s.revoke(ctx, clientv3.LeaseID(kv.Lease))
			}
			return nil
		}
		kv = cur
	}
	return fmt.Errorf("snapshot: etcd: persist key %s: %d transactions lost to concurrent writers (nothing written); persist again",
		key, etcdMaxAttempts)
}

// swap puts val under k with lease if k's ModRevision is still rev (0: k
// absent). When it is not, it returns k's current version (nil if absent).
func (s *Etcd) swap(ctx context.Context, k string, rev int64, val []byte, lease clientv3.LeaseID) (bool, *mvccpb.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	var put clientv3.Op
	if lease != 0 {
		put = clientv3.OpPut(k, string(val), clientv3.WithLease(lease))
	} else {
		put = clientv3.OpPut(k, string(val))
	}
	resp, err := s.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
		Then(put).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return false, nil, err
	}
	if resp.Succeeded {
		return true, nil, nil
	}
	var cur *mvccpb.KeyValue
	if r := resp.Responses; len(r) == 1 && r[0].GetResponseRange() != nil {
		if kvs := r[0].GetResponseRange().Kvs; len(kvs) > 0 {
			cur = kvs[0]
		}
	}
	return false, cur, nil
}

// Delete removes the key and revokes its lease. It is a plain delete: it
// does not fence (see the package doc).
func (s *Etcd) Delete(ctx context.Context, key Key) error {
	if err := checkArgs(ctx, key, nil); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	resp, err := s.kv.Delete(rctx, s.etcdKey(key), clientv3.WithPrevKV())
	if err != nil {
		if etcderr.Definitive(err) {
			return fmt.Errorf("snapshot: etcd: delete key %s: refused (nothing deleted): %w", key, err)
		}
		return fmt.Errorf("%w: etcd: delete key %s: %w", ErrUnknownOutcome, key, err)
	}
	for _, kv := range resp.PrevKvs {
		if kv.Lease != 0 {
			s.revoke(ctx, clientv3.LeaseID(kv.Lease))
		}
	}
	return nil
}

// Close does nothing: the client belongs to the caller.
func (s *Etcd) Close() error { return nil }

// read returns k's current version, nil if absent (a linearizable read).
func (s *Etcd) read(ctx context.Context, k string) (*mvccpb.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	resp, err := s.kv.Get(ctx, k)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0], nil
}

func (s *Etcd) grant(ctx context.Context) (clientv3.LeaseID, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	resp, err := s.lease.Grant(ctx, s.ttlSec)
	if err != nil {
		return 0, err
	}
	return resp.ID, nil
}

// revoke revokes a lease that no live key needs, best effort: a lease that
// survives a failed revoke expires by itself after its TTL. It runs even if
// ctx was cancelled after the write.
func (s *Etcd) revoke(ctx context.Context, id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.RequestTimeout)
	defer cancel()
	_, _ = s.lease.Revoke(ctx, id)
}

// etcdRecord is the stored JSON. Offset is a pointer so that a record
// without one is refused instead of read as offset 0.
type etcdRecord struct {
	Version  int               `json:"version"`
	Offset   *int64            `json:"offset"`
	Value    []byte            `json:"value,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func encodeEtcd(s Snapshot) ([]byte, error) {
	s = s.normalize()
	b, err := json.Marshal(etcdRecord{Version: etcdRecordVersion, Offset: &s.Offset, Value: s.Value, Metadata: s.Metadata})
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrInvalid, err)
	}
	return b, nil
}

// decodeEtcd decodes a stored record strictly: unknown fields, another
// version, a missing or negative offset, or trailing bytes are ErrCorrupt.
func decodeEtcd(key Key, kv *mvccpb.KeyValue) (Snapshot, error) {
	var r etcdRecord
	dec := json.NewDecoder(bytes.NewReader(kv.Value))
	dec.DisallowUnknownFields()
	err := dec.Decode(&r)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("trailing data")
		}
	}
	if err == nil && r.Version != etcdRecordVersion {
		err = fmt.Errorf("version %d, want %d", r.Version, etcdRecordVersion)
	}
	if err == nil && (r.Offset == nil || *r.Offset < 0) {
		err = errors.New("offset missing or negative")
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: etcd key %q (revision %d) of key %s: %w", ErrCorrupt, kv.Key, kv.ModRevision, key, err)
	}
	return Snapshot{Offset: *r.Offset, Value: r.Value, Metadata: r.Metadata}.normalize(), nil
}
