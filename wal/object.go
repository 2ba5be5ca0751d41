package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/objstore"
)

// The WAL on an object store (ObjectWAL). Each group commit is one object,
// created with the store's create-if-absent, that holds the records of one
// epoch exactly as a segment file would; its name,
//
//	<prefix><epoch, 20 digits>-<first position, 20 digits>-<last position, 20 digits>.wal
//
// is unique to (epoch, positions) and never reused: only the epoch's one
// writer creates names of its epoch, and its positions only grow. A create
// whose answer was lost is retried under the same name with the same
// bytes, which the store resolves by reading back. Fencing is in the names
// and the claim, not in the store: a successor's claim records the highest
// position it listed, and replay skips an older epoch's records above it
// (the engine's skipOnReplay) — what a zombie creates late is never
// replayed, and a zombie acknowledges nothing because its lease check
// after the create fails. docs/objstore.md has the reasoning.

// ErrStoreDown marks an ObjectWAL whose store does not take its objects
// (unreachable, refusing, throttling past its retries). Nothing of the
// records involved is known durable; like ErrNoSpace this is not permanent:
// the WAL refuses Append and answers SyncTo of positions not yet durable
// with it, and retries the same object in the background until it lands.
var ErrStoreDown = errs.New(errs.Unavailable, "wal: the object store does not take the WAL's objects; retrying")

// DefaultObjectSize bounds the bytes of one WAL object (a group commit)
// unless ObjectOptions.ObjectSize says otherwise.
const DefaultObjectSize = 4 << 20

// objectSuffix ends every WAL object name.
const objectSuffix = ".wal"

// ObjectOptions configure OpenObjects, ReadObjectTail and the object
// WAL's tools.
type ObjectOptions struct {
	// Store holds the objects; Prefix begins every name (a shard's own
	// "folder", ending in "/").
	Store  objstore.Store
	Prefix string
	// Epoch is the writer epoch this WAL appends in (> 0).
	Epoch uint64
	// After, when above the highest position listed, is where this
	// epoch's positions continue instead (see Options.After).
	After uint64
	// Compression of record payloads; default None.
	Compression Compression
	// ObjectSize bounds an object's bytes: a group commit larger than this
	// is split between records. A record larger than it is an object of
	// its own. Default DefaultObjectSize.
	ObjectSize int
	// RetryBackoff is the first wait between creates of an object the
	// store did not take; it doubles up to 32×. Default 50ms.
	RetryBackoff time.Duration
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
}

func (o *ObjectOptions) ensureDefaults() {
	if o.ObjectSize <= 0 {
		o.ObjectSize = DefaultObjectSize
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 50 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func (o *ObjectOptions) validate() error {
	switch {
	case o.Store == nil:
		return errors.New("wal: object WAL without a store")
	case o.Epoch == 0:
		return errors.New("wal: epoch must be > 0")
	case !o.Compression.valid():
		return fmt.Errorf("wal: unknown compression %d", o.Compression)
	}
	if err := objstore.ValidateName(o.Prefix + "x"); err != nil {
		return fmt.Errorf("wal: object prefix %q: %w", o.Prefix, err)
	}
	return nil
}

// ObjectWAL is the write-ahead log of one shard on an object store. Its
// methods mean what the WAL's do; a record is durable, for SyncTo, once
// it is in an object whose create the store confirmed.
type ObjectWAL struct {
	queue
	opts  ObjectOptions
	codec *codec
	// ctx bounds the store calls; cancelled by Close once the syncer gave
	// up on a store that is down.
	ctx    context.Context
	cancel context.CancelFunc
	// The syncer's last round: its records and how long its creates took
	// (see linger).
	lastRecords int
	lastCreate  time.Duration

	removeMu   sync.Mutex
	syncerDone chan struct{}
}

// OpenObjects opens the object WAL of opts.Prefix for appending in
// opts.Epoch: it lists the objects, refuses a newer epoch's
// (ErrNewerEpoch) and continues positions after the highest of any epoch.
// It writes nothing.
func OpenObjects(ctx context.Context, opts ObjectOptions) (*ObjectWAL, error) {
	opts.ensureDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	objs, err := listObjects(ctx, opts.Store, opts.Prefix)
	if err != nil {
		return nil, fmt.Errorf("wal: open %s%s: %w", opts.Store, opts.Prefix, err)
	}
	var tail uint64
	for _, o := range objs {
		if o.epoch > opts.Epoch {
			return nil, fmt.Errorf("%w: object %s is of epoch %d, above %d", ErrNewerEpoch, o.name, o.epoch, opts.Epoch)
		}
		tail = max(tail, o.last)
	}
	tail = max(tail, opts.After)
	c, err := newCodec(opts.Compression)
	if err != nil {
		return nil, err
	}
	where := opts.Store.String() + "/" + opts.Prefix
	w := &ObjectWAL{
		queue: newQueue(opts.Logger.With("component", "wal", "store", where), newMetrics(opts.Registerer), where),
		opts:  opts, codec: c, syncerDone: make(chan struct{}),
	}
	w.assigned, w.synced = tail, tail
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.init()
	w.log.Info("object wal opened", "epoch", opts.Epoch, "objects", len(objs), "tail", tail)
	go w.runSyncer()
	return w, nil
}

// ReadObjectTail returns the highest position any object under
// opts.Prefix covers (0 if none), from one listing; it writes nothing.
// Only Store and Prefix are used.
func ReadObjectTail(ctx context.Context, opts ObjectOptions) (uint64, error) {
	objs, err := listObjects(ctx, opts.Store, opts.Prefix)
	if err != nil {
		return 0, fmt.Errorf("wal: read tail of %s%s: %w", opts.Store, opts.Prefix, err)
	}
	var tail uint64
	for _, o := range objs {
		tail = max(tail, o.last)
	}
	return tail, nil
}

// Prepare checks and compresses payload; see WAL.Prepare.
func (w *ObjectWAL) Prepare(payload []byte) (*Prepared, error) {
	return prepare(w.codec, payload)
}

// AppendPrepared queues a prepared record covering count positions of
// generation gen; see WAL.AppendPrepared.
func (w *ObjectWAL) AppendPrepared(gen uint64, count uint32, p *Prepared) (uint64, error) {
	return w.enqueue(w.codec, w.opts.Epoch, gen, count, p)
}

// Append prepares and appends payload; see WAL.Append.
func (w *ObjectWAL) Append(gen uint64, count uint32, payload []byte) (uint64, error) {
	p, err := w.Prepare(payload)
	if err != nil {
		return 0, err
	}
	defer p.Release()
	return w.AppendPrepared(gen, count, p)
}

// Close writes every record appended, if the store takes them, and stops
// the syncer. With the store down it gives up at once: those records were
// never acknowledged. Calls after Close return ErrClosed.
func (w *ObjectWAL) Close() error {
	if !w.markClosed() {
		return ErrClosed
	}
	select {
	case <-w.syncerDone:
	case <-time.After(closeGrace):
		w.cancel() // a store call hangs; its record was never acknowledged
		<-w.syncerDone
	}
	w.cancel()
	w.codec.close()
	return w.Err()
}
