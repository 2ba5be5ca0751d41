package client

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rollwal/rollwal/errs"
)

// Defaults of BatcherOptions.
const (
	DefaultBatchRows  = 1000
	DefaultBatchBytes = 4 << 20
	DefaultLinger     = 20 * time.Millisecond
	DefaultMaxPending = 4
)

// ErrClosed is returned by Add after Close.
var ErrClosed = errs.New(errs.Closed, "rollwal client: batcher closed")

// BatcherOptions configure a Batcher; zero fields take the defaults.
type BatcherOptions struct {
	// MaxRows sends a batch once it holds this many rows.
	MaxRows int
	// MaxBytes sends a batch before it would grow past this many bytes of
	// NDJSON; keep it below the writer's --max-body-bytes.
	MaxBytes int
	// Linger sends a batch once its first row has waited this long.
	Linger time.Duration
	// MaxPending is how many full batches of a shard may wait to be sent
	// before Add blocks.
	MaxPending int
}

// Batcher accumulates rows per shard and sends them in batches through its
// Client. It is safe for concurrent use; Close it to send the last rows.
type Batcher struct {
	c    *Client
	opts BatcherOptions
	// ctx bounds the sends; Close cancels it when its own context ends.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	lanes  map[string]*lane
	closed bool
}

// NewBatcher returns a Batcher sending through c.
func (c *Client) NewBatcher(opts BatcherOptions) *Batcher {
	setDefault(&opts.MaxRows, DefaultBatchRows)
	setDefault(&opts.MaxBytes, DefaultBatchBytes)
	setDefault(&opts.Linger, DefaultLinger)
	setDefault(&opts.MaxPending, DefaultMaxPending)
	ctx, cancel := context.WithCancel(context.Background())
	return &Batcher{c: c, opts: opts, ctx: ctx, cancel: cancel, lanes: map[string]*lane{}}
}

func setDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Ack is the outcome of one batch, shared by its rows.
type Ack struct {
	done chan struct{}
	res  Result
	err  error
}

func newAck() *Ack { return &Ack{done: make(chan struct{})} }

// Done is closed once the batch is acknowledged or failed.
func (a *Ack) Done() <-chan struct{} { return a.done }

// Wait returns the batch's result once it is known, or ctx's error.
func (a *Ack) Wait(ctx context.Context) (Result, error) {
	select {
	case <-a.done:
		return a.res, a.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

func (a *Ack) complete(res Result, err error) {
	a.res, a.err = res, err
	close(a.done)
}

// Add queues row for shard and returns the Ack of the batch it joins. A
// row with another source name than the open batch's starts a new batch;
// a batch's source offset is the highest of its rows'. Add blocks while
// MaxPending batches of the shard wait to be sent (backpressure), until
// ctx ends.
func (b *Batcher) Add(ctx context.Context, shard string, row map[string]any, src *Source) (*Ack, error) {
	var line bytes.Buffer
	if err := encodeRow(&line, row); err != nil {
		return nil, fmt.Errorf("rollwal client: row for shard %q: %w", shard, err)
	}
	l, err := b.lane(shard)
	if err != nil {
		return nil, err
	}
	return l.add(ctx, line.Bytes(), src)
}

// lane returns shard's lane, starting its sender on first use.
func (b *Batcher) lane(shard string) (*lane, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	l := b.lanes[shard]
	if l == nil {
		l = &lane{b: b, shard: shard, wake: make(chan struct{}, 1), space: make(chan struct{})}
		b.lanes[shard] = l
		b.wg.Add(1)
		go l.run()
	}
	return l, nil
}

// Flush sends every open batch and waits until all batches added so far
// are acknowledged; it returns the first failure among them.
func (b *Batcher) Flush(ctx context.Context) error {
	var acks []*Ack
	for _, l := range b.snapshot() {
		if a := l.cutLast(false); a != nil {
			acks = append(acks, a)
		}
	}
	for _, a := range acks {
		if _, err := a.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close sends the open batches and waits for every send to end. When ctx
// ends first, the sends in flight are abandoned and their Acks fail.
func (b *Batcher) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	for _, l := range b.snapshot() {
		l.cutLast(true)
	}
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		b.cancel()
		<-done
		return fmt.Errorf("rollwal client: batcher closed before every batch was sent: %w", ctx.Err())
	}
}

func (b *Batcher) snapshot() []*lane {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*lane, 0, len(b.lanes))
	for _, l := range b.lanes {
		out = append(out, l)
	}
	return out
}
