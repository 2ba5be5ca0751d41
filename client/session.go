package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// maxProducerIDBytes bounds a producer id, as the writer does.
const maxProducerIDBytes = 128

// session is a Client's producer session: its id and, per shard, the
// sequence number of the next row.
type session struct {
	id string
	// resume: the id is the caller's, so each shard's numbering starts
	// where the writer says the id left off, not at 0.
	resume bool

	mu     sync.Mutex
	shards map[string]*shardSeq
}

// shardSeq numbers a session's rows in one shard. One batch of the shard
// is on its way at a time: whoever holds the turn owns the other fields.
type shardSeq struct {
	turn chan struct{} // holds a token while a batch is being sent

	started bool   // next is known (for a resumed id: the writer was asked)
	next    uint64 // the sequence of the next batch's first row
	// unresolved is a batch whose outcome is unknown; its sequence range
	// stays taken, and it is sent again before any other batch.
	unresolved *batchSeq
}

// batchSeq is a batch of a session: its body, rows and sequence.
type batchSeq struct {
	body []byte
	rows int
	src  *Source
	seq  uint64
	// maybe: some attempt ended without a definite answer, so the batch
	// may be stored although the writer refused a later attempt.
	maybe bool
}

func newSession(opts Options) (*session, error) {
	switch {
	case opts.NoSession && opts.Producer != "":
		return nil, fmt.Errorf("rollwal client: Producer %q and NoSession: a producer id needs a session", opts.Producer)
	case opts.NoSession:
		return nil, nil
	case opts.Producer == "":
		return &session{id: randomProducerID(), shards: map[string]*shardSeq{}}, nil
	}
	if err := validateProducerID(opts.Producer); err != nil {
		return nil, err
	}
	return &session{id: opts.Producer, resume: true, shards: map[string]*shardSeq{}}, nil
}

// randomProducerID is "go-" and 16 hex digits from crypto/rand: two
// Clients share an id with a chance of about n²/2⁶⁵ among n Clients.
func randomProducerID() string {
	var b [8]byte
	crand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return "go-" + hex.EncodeToString(b[:])
}

// validateProducerID applies the writer's rule (1–128 bytes of
// [A-Za-z0-9._:-]) and refuses "." and "..", which a URL path cannot
// carry as a segment of the resume request.
func validateProducerID(id string) error {
	if len(id) > maxProducerIDBytes || id == "." || id == ".." {
		return fmt.Errorf("rollwal client: Producer %q: want 1–%d bytes of [A-Za-z0-9._:-], not \".\" or \"..\"", id, maxProducerIDBytes)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return fmt.Errorf("rollwal client: Producer %q: byte %d (%q) is not one of [A-Za-z0-9._:-]", id, i, c)
		}
	}
	return nil
}

func (s *session) shard(name string) *shardSeq {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.shards[name]
	if st == nil {
		st = &shardSeq{turn: make(chan struct{}, 1)}
		s.shards[name] = st
	}
	return st
}

// take waits for the shard's turn.
func (st *shardSeq) take(ctx context.Context) error {
	select {
	case st.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (st *shardSeq) give() { <-st.turn }

func cloneSource(src *Source) *Source {
	if src == nil {
		return nil
	}
	c := *src
	return &c
}

// same reports whether b carries the same rows and source as o: the
// caller retries o.
func (b *batchSeq) same(o *batchSeq) bool {
	return b.rows == o.rows && bytes.Equal(b.body, o.body) &&
		(b.src == nil) == (o.src == nil) && (b.src == nil || *b.src == *o.src)
}

// NextSeq returns the sequence number the Client's session will give the
// next row it sends to shard: a resumed Producer id asks the writer first
// (once per shard). It waits for a batch of the shard that is being sent.
// A batch whose outcome is unknown counts as sent.
func (c *Client) NextSeq(ctx context.Context, shard string) (uint64, error) {
	if c.sess == nil {
		return 0, errors.New("rollwal client: NextSeq: the Client has no producer session (NoSession)")
	}
	st := c.sess.shard(shard)
	if err := st.take(ctx); err != nil {
		return 0, fmt.Errorf("rollwal client: shard %q: %w", shard, err)
	}
	defer st.give()
	if err := c.start(ctx, shard, st); err != nil {
		return 0, err
	}
	return st.next, nil
}

// sendInSession sends b as the session's next batch of shard, once the
// shard's turn comes and any batch of unknown outcome before it settled.
func (c *Client) sendInSession(ctx context.Context, shard string, b *batchSeq) (Result, error) {
	st := c.sess.shard(shard)
	if err := st.take(ctx); err != nil {
		return Result{}, fmt.Errorf("rollwal client: append to shard %q: waiting for the shard's batch before it: %w", shard, err)
	}
	defer st.give()
	if err := c.start(ctx, shard, st); err != nil {
		return Result{}, err
	}
	if u := st.unresolved; u != nil {
		if b.same(u) {
			return c.sendSeq(ctx, shard, st, u) // the caller's retry: the same sequence
		}
		c.opts.Logger.InfoContext(ctx, "sending a batch of unknown outcome again before the next",
			"shard", shard, "producer", c.sess.id, "seq", u.seq, "rows", u.rows)
		_, err := c.sendSeq(ctx, shard, st, u)
		switch {
		case err != nil && st.unresolved != nil:
			var oe *outcomeError
			if errors.As(err, &oe) {
				err = oe.err // this batch was not sent: its outcome is known
			}
			return Result{}, fmt.Errorf("rollwal client: shard %q: batch not sent: the batch before it (seq %d, %d rows) still has an unknown outcome: %w",
				shard, u.seq, u.rows, err)
		case err != nil:
			// Settled as not stored: its numbers went back (or to where
			// the writer is), and b takes them.
			c.opts.Logger.WarnContext(ctx, "a batch of unknown outcome was refused when sent again: it is not stored",
				"shard", shard, "producer", c.sess.id, "seq", u.seq, "rows", u.rows, "err", err)
		}
	}
	b.seq = st.next
	return c.sendSeq(ctx, shard, st, b)
}

// start learns where the session's numbering of shard starts: 0 for the
// Client's own random id, the writer's next expected sequence for a
// caller's id. The caller holds st's turn.
func (c *Client) start(ctx context.Context, shard string, st *shardSeq) error {
	if st.started {
		return nil
	}
	if !c.sess.resume {
		st.started = true
		return nil
	}
	u := c.base.JoinPath("v1", "shards", shard, "producers", c.sess.id).String()
	var pr struct {
		NextSeq uint64 `json:"next_seq"`
		Known   bool   `json:"known"`
	}
	_, _, err := c.retrying(ctx, "resume request", shard, func() error {
		return c.once(ctx, http.MethodGet, u, nil, &pr)
	})
	if err != nil {
		return fmt.Errorf("rollwal client: shard %q: asking where producer %q resumes: %w", shard, c.sess.id, err)
	}
	c.opts.Logger.DebugContext(ctx, "producer resumes", "shard", shard, "producer", c.sess.id, "next_seq", pr.NextSeq, "known", pr.Known)
	st.next, st.started = pr.NextSeq, true
	return nil
}

// sendSeq sends b at b.seq and moves the shard's numbering by the
// outcome. The caller holds st's turn, and b is either st.unresolved or a
// new batch at st.next, so nothing of the session's after b was sent.
func (c *Client) sendSeq(ctx context.Context, shard string, st *shardSeq, b *batchSeq) (Result, error) {
	attempts := 0
	for renumbered := false; ; renumbered = true {
		seq := b.seq
		res, maybe, err := c.send(ctx, shard, b.body, b.src, &seq)
		attempts += res.Attempts
		b.maybe = b.maybe || maybe
		if err == nil {
			st.next, st.unresolved = b.seq+uint64(b.rows), nil
			res.Attempts, res.SessionSeq = attempts, b.seq
			return res, nil
		}
		var qe *SequenceError
		if errors.As(err, &qe) {
			qe.Shard = shard
			if qe.Expected < b.seq && !renumbered {
				// The writer holds nothing of the producer from Expected
				// on (its state expired, or was never there): every batch
				// before b was settled, so b takes Expected.
				c.opts.Logger.WarnContext(ctx, "the writer expects an earlier sequence: renumbering the batch",
					"shard", shard, "producer", c.sess.id, "seq", b.seq, "expected_seq", qe.Expected, "unknown_producer", qe.Unknown)
				b.seq = qe.Expected
				continue
			}
			// The writer holds a sequence this session cannot account
			// for (another Client with the same Producer id): nothing of
			// b was stored, and the session goes on where the writer is.
			st.next, st.unresolved = qe.Expected, nil
			return Result{}, err
		}
		if refused, always := refusal(err); refused && (always || !b.maybe) {
			// Nothing of b was stored: its range is given back, and the
			// next batch takes b's sequence.
			st.next, st.unresolved = b.seq, nil
			return Result{}, err
		}
		st.next, st.unresolved = b.seq+uint64(b.rows), b
		return Result{}, &outcomeError{err}
	}
}
