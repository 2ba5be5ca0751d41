package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// batch is rows of one shard on their way, as NDJSON.
type batch struct {
	body  bytes.Buffer
	rows  int
	src   *Source
	ack   *Ack
	timer *time.Timer
}

// lane is one shard's batches: the open one, the cut ones in order, and a
// sender that posts them one at a time, so that a shard's source offsets
// are acknowledged in order.
type lane struct {
	b     *Batcher
	shard string

	mu      sync.Mutex
	cur     *batch
	queue   []*batch
	last    *Ack          // of the latest cut batch: Flush waits on it
	wake    chan struct{} // tells the sender the queue grew or the lane closes
	space   chan struct{} // closed (and replaced) when the queue shrinks
	closing bool
	failed  error // after a failed batch, every later one fails with it
}

func (l *lane) add(ctx context.Context, line []byte, src *Source) (*Ack, error) {
	if err := l.waitForSpace(ctx); err != nil {
		return nil, err
	}
	defer l.mu.Unlock()
	opts := l.b.opts
	if l.cur != nil && (sourceName(l.cur.src) != sourceName(src) || l.cur.body.Len()+len(line) > opts.MaxBytes) {
		l.cut()
	}
	if l.cur == nil {
		bt := &batch{ack: newAck()}
		bt.timer = time.AfterFunc(opts.Linger, func() { l.lingered(bt) })
		l.cur = bt
	}
	bt := l.cur
	bt.body.Write(line)
	bt.rows++
	if src != nil && (bt.src == nil || src.Offset > bt.src.Offset) {
		bt.src = &Source{Name: src.Name, Offset: src.Offset}
	}
	if bt.rows >= opts.MaxRows || bt.body.Len() >= opts.MaxBytes {
		l.cut()
	}
	return bt.ack, nil
}

// waitForSpace returns with l.mu held once the lane takes a row, or with
// an error (and l.mu free) when it never will.
func (l *lane) waitForSpace(ctx context.Context) error {
	for {
		l.mu.Lock()
		switch {
		case l.failed != nil:
			l.mu.Unlock()
			return l.failed
		case l.closing:
			l.mu.Unlock()
			return ErrClosed
		case len(l.queue) < l.b.opts.MaxPending:
			return nil
		}
		space := l.space
		l.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return fmt.Errorf("rollwal client: shard %q: %d batches wait to be sent: %w", l.shard, l.b.opts.MaxPending, ctx.Err())
		}
	}
}

func sourceName(s *Source) string {
	if s == nil {
		return ""
	}
	return s.Name
}

// cut moves the open batch to the queue; l.mu is held.
func (l *lane) cut() {
	bt := l.cur
	bt.timer.Stop()
	l.cur = nil
	l.queue = append(l.queue, bt)
	l.last = bt.ack
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *lane) lingered(bt *batch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == bt {
		l.cut()
	}
}

// cutLast cuts the open batch and returns the Ack of the latest batch, nil
// when the lane never had one; closing also lets the sender end once the
// queue is empty.
func (l *lane) cutLast(closing bool) *Ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != nil {
		l.cut()
	}
	if closing {
		l.closing = true
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return l.last
}

// run is the lane's sender.
func (l *lane) run() {
	defer l.b.wg.Done()
	for {
		bt, ok := l.next()
		if !ok {
			return
		}
		res, err := l.b.c.appendBody(l.b.ctx, l.shard, bt.body.Bytes(), bt.rows, bt.src)
		if err != nil {
			l.fail(err)
		}
		bt.ack.complete(res, err)
	}
}

// next waits for the oldest cut batch; false once the lane closed and its
// queue is empty.
func (l *lane) next() (*batch, bool) {
	for {
		l.mu.Lock()
		if len(l.queue) > 0 {
			bt := l.queue[0]
			l.queue = l.queue[1:]
			l.freeSpace()
			l.mu.Unlock()
			return bt, true
		}
		closing := l.closing
		l.mu.Unlock()
		if closing {
			return nil, false
		}
		<-l.wake
	}
}

func (l *lane) freeSpace() {
	close(l.space)
	l.space = make(chan struct{})
}

// fail makes the lane refuse everything after a failed batch: sending
// later batches would let their source offsets pass rows never stored.
func (l *lane) fail(err error) {
	var oe *outcomeError
	if errors.As(err, &oe) {
		err = oe.err // the later rows are not sent: their outcome is known
	}
	l.mu.Lock()
	if l.failed == nil {
		l.failed = fmt.Errorf("rollwal client: shard %q: refused after an earlier batch failed: %w", l.shard, err)
	}
	dropped := l.queue
	if l.cur != nil {
		l.cur.timer.Stop()
		dropped = append(dropped, l.cur)
	}
	l.cur, l.queue = nil, nil
	l.freeSpace()
	failed := l.failed
	l.mu.Unlock()
	for _, bt := range dropped {
		bt.ack.complete(Result{}, failed)
	}
}
