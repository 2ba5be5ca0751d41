package shardmeta

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/rollwal/rollwal/internal/etcderr"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultRequestTimeout bounds each etcd request of a Store.
const DefaultRequestTimeout = 5 * time.Second

// maxClaimAttempts bounds Claim's read-and-transact loop when the epoch or
// manifest key moves between its read and its transaction.
const maxClaimAttempts = 5

// Owner is the value of a shard's owner key (JSON). It is informational:
// fencing rests on the key's ModRevision, never on its value.
type Owner struct {
	Writer  string `json:"writer"`
	Epoch   uint64 `json:"epoch"`
	Address string `json:"address"`
}

// StoreOptions configure a Store.
type StoreOptions struct {
	// RequestTimeout bounds every etcd request (on top of the caller's
	// context); default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger receives claim, fence and release events; nil discards them.
	Logger *slog.Logger
}

// Store reads and writes the shard keys of one table in etcd. It is safe for
// concurrent use.
type Store struct {
	cli     *clientv3.Client
	keys    Keys
	timeout time.Duration
	log     *slog.Logger
	// testHookTxn, when set, sees the error of every write transaction
	// ("claim", "commit", "release") after it ran and may replace it: tests
	// simulate a response lost after the transaction applied.
	testHookTxn func(op string, err error) error
}

// NewStore returns a Store for the keys of one table. The keys are validated
// by every method, which then fails with ErrInvalidName.
func NewStore(cli *clientv3.Client, keys Keys, opts StoreOptions) *Store {
	s := &Store{cli: cli, keys: keys, timeout: opts.RequestTimeout, log: opts.Logger}
	if s.timeout <= 0 {
		s.timeout = DefaultRequestTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// Keys returns the store's key layout.
func (s *Store) Keys() Keys { return s.keys }

func (s *Store) check(shard string) error {
	if err := s.keys.Validate(); err != nil {
		return err
	}
	return ValidateShard(shard)
}

func (s *Store) rpc(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

func (s *Store) hook(op string, err error) error {
	if s.testHookTxn != nil {
		return s.testHookTxn(op, err)
	}
	return err
}

// Load returns the shard's manifest and its ModRevision: NewManifest() and 0
// for a shard never claimed. A stored manifest that Decode refuses fails
// with ErrInvalidManifest.
func (s *Store) Load(ctx context.Context, shard string) (*Manifest, int64, error) {
	if err := s.check(shard); err != nil {
		return nil, 0, err
	}
	rctx, cancel := s.rpc(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.keys.Manifest(shard))
	if err != nil {
		return nil, 0, fmt.Errorf("shardmeta: load shard %q: %w", shard, err)
	}
	if len(resp.Kvs) == 0 {
		return NewManifest(), 0, nil
	}
	m, err := decodeStored(shard, resp.Kvs[0])
	if err != nil {
		return nil, 0, err
	}
	return m, resp.Kvs[0].ModRevision, nil
}

// snapshot is one consistent read of a shard's three keys; a nil key is
// absent.
type snapshot struct {
	epoch, owner, manifest *mvccpb.KeyValue
}

// readSnapshot reads epoch, owner and manifest at one revision.
func (s *Store) readSnapshot(ctx context.Context, shard string) (*snapshot, error) {
	rctx, cancel := s.rpc(ctx)
	defer cancel()
	resp, err := s.cli.Txn(rctx).Then(s.snapshotOps(shard)...).Commit()
	if err != nil {
		return nil, fmt.Errorf("shardmeta: read shard %q: %w", shard, err)
	}
	return snapshotFrom(resp.Responses), nil
}

// snapshotOps are the reads, in snapshot order, that a transaction's Else
// branch also uses to say why its guard failed.
func (s *Store) snapshotOps(shard string) []clientv3.Op {
	k := s.keys
	return []clientv3.Op{
		clientv3.OpGet(k.Epoch(shard)), clientv3.OpGet(k.Owner(shard)), clientv3.OpGet(k.Manifest(shard)),
	}
}

func snapshotFrom(rs []*pb.ResponseOp) *snapshot {
	first := func(r *pb.ResponseOp) *mvccpb.KeyValue {
		if kvs := r.GetResponseRange().GetKvs(); len(kvs) > 0 {
			return kvs[0]
		}
		return nil
	}
	return &snapshot{epoch: first(rs[0]), owner: first(rs[1]), manifest: first(rs[2])}
}

// modRev is a key's ModRevision, 0 when absent (as etcd compares it).
func modRev(kv *mvccpb.KeyValue) int64 {
	if kv == nil {
		return 0
	}
	return kv.ModRevision
}

// parseEpoch reads the epoch counter strictly: canonical decimal ≥ 1.
// An absent key is 0.
func parseEpoch(shard string, kv *mvccpb.KeyValue) (uint64, error) {
	if kv == nil {
		return 0, nil
	}
	v, err := strconv.ParseUint(string(kv.Value), 10, 64)
	if err != nil || v == 0 || strconv.FormatUint(v, 10) != string(kv.Value) {
		return 0, fmt.Errorf("%w: shard %q: epoch key (revision %d) holds %q, want a decimal integer ≥ 1 without sign or leading zeros",
			ErrInvalidEpoch, shard, kv.ModRevision, kv.Value)
	}
	return v, nil
}

// decodeStored decodes a stored manifest; an absent one is NewManifest().
func decodeStored(shard string, kv *mvccpb.KeyValue) (*Manifest, error) {
	if kv == nil {
		return NewManifest(), nil
	}
	m, err := Decode(kv.Value)
	if err != nil {
		return nil, fmt.Errorf("shardmeta: shard %q: stored manifest (revision %d) refused: %w", shard, kv.ModRevision, err)
	}
	return m, nil
}

// ambiguousError is a failed write whose outcome the error alone does not
// decide: it may have applied.
type ambiguousError struct{ err error }

func (e *ambiguousError) Error() string { return e.err.Error() }
func (e *ambiguousError) Unwrap() error { return e.err }

// classify wraps a write's error: definitive rejections (the request never
// reached the state machine) as they are, everything else — deadlines,
// cancellations, unavailability, lost connections — as ambiguous.
func classify(op, shard string, err error) error {
	err = fmt.Errorf("shardmeta: %s shard %q: %w", op, shard, err)
	if etcderr.Definitive(err) {
		return err
	}
	return &ambiguousError{err}
}
