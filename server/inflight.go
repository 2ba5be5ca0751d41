package server

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/errs"
)

// Ingest requests are admitted against two limits before their body is
// read: the body bytes the server holds for requests in flight
// (Options.MaxInflightBytes) and the number of such requests
// (Options.MaxInflightRequests). A request with a Content-Length reserves
// it up front; a chunked one reserves chunkStep at a time as it is read.
// What a reservation stands for is more than the body: while a request is
// in flight it holds its decoded rows (about 1.4 times the body for
// 1 KiB-class NDJSON rows), then the WAL record the engine encodes from
// them (about the body again), and the garbage of decoding until the next
// collection; the request limit covers what a request costs whatever its
// size (a read buffer of up to 64 KiB, decoder state, a goroutine). A
// request that does not fit waits, first come first served, for at most
// Options.InflightWait, then is answered 429 inflight_limit with
// Retry-After. Probes, metrics and status reads are never admitted: they
// hold no body.
//
// Decoding never holds the whole body beside its rows: NDJSON is read a
// line at a time and decoded in place in a 64 KiB read buffer (a longer
// line is copied once); an Arrow message is read into one buffer of its
// size when the request declared its length (else one that doubles up to
// it), uncompressed columns point into it, and the rows copy their strings
// out, so a record batch's message is held only while it is turned into
// rows.

// chunkStep is what a body of unknown length reserves at a time.
const chunkStep = 256 << 10

// DefaultInflightWait bounds how long a request waits for room unless
// Options.InflightWait is set.
const DefaultInflightWait = time.Second

// errInflightLimit marks a request refused for the in-flight limits.
var errInflightLimit = errs.New(errs.Backpressure, "in-flight ingest limit")

// limitError names the in-flight limit a request did not fit.
type limitError struct {
	what  string // "bytes" or "requests"
	limit int64
	wait  time.Duration
}

func (e *limitError) Error() string {
	if e.what == "requests" {
		return fmt.Sprintf("%d ingest requests are in flight, the limit (max in-flight requests); waited %v for one to end", e.limit, e.wait)
	}
	return fmt.Sprintf("ingest requests in flight hold up to the limit of %d body bytes (max in-flight bytes); waited %v for room", e.limit, e.wait)
}

func (e *limitError) Unwrap() error { return errInflightLimit }

// InflightStats is what the in-flight limits hold now and the most they
// held since the server started.
type InflightStats struct {
	Bytes, Requests         int64
	PeakBytes, PeakRequests int64
}

// inflight admits ingest requests within the byte and request limits.
type inflight struct {
	maxBytes, maxRequests int64
	wait                  time.Duration

	mu      sync.Mutex
	held    InflightStats
	waiters list.List // of *waiter, in arrival order

	refused *prometheus.CounterVec
}

// waiter is a reservation that did not fit when it was asked for; ready
// is closed once it is granted.
type waiter struct {
	bytes, requests int64
	ready           chan struct{}
	granted         bool
}

func newInflight(maxBytes, maxRequests int64, wait time.Duration, reg prometheus.Registerer) *inflight {
	l := &inflight{maxBytes: maxBytes, maxRequests: maxRequests, wait: wait}
	l.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "writer_http_inflight_refused_total",
		Help: "Ingest requests answered 429 inflight_limit, by the limit they did not fit (bytes or requests).",
	}, []string{"limit"})
	gauge := func(name, help string, v func(InflightStats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(v(l.stats())) })
	}
	reg.MustRegister(l.refused,
		gauge("writer_http_inflight_bytes", "Body bytes reserved by ingest requests in flight.", func(s InflightStats) int64 { return s.Bytes }),
		gauge("writer_http_inflight_requests", "Ingest requests in flight.", func(s InflightStats) int64 { return s.Requests }),
		gauge("writer_http_inflight_peak_bytes", "Most body bytes reserved at once by ingest requests since start.", func(s InflightStats) int64 { return s.PeakBytes }),
		gauge("writer_http_inflight_limit_bytes", "The limit of body bytes reserved by ingest requests in flight.", func(InflightStats) int64 { return maxBytes }),
	)
	return l
}

func (l *inflight) stats() InflightStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// acquire reserves bytes and requests, waiting behind earlier waiters for
// at most l.wait. first puts the reservation ahead of every waiter: a
// chunked body growing mid-read already holds room that those behind it
// may be waiting for.
func (l *inflight) acquire(ctx context.Context, bytes, requests int64, first bool) error {
	l.mu.Lock()
	if (first || l.waiters.Len() == 0) && l.fits(bytes, requests) {
		l.take(bytes, requests)
		l.mu.Unlock()
		return nil
	}
	w := &waiter{bytes: bytes, requests: requests, ready: make(chan struct{})}
	var e *list.Element
	if first {
		e = l.waiters.PushFront(w)
	} else {
		e = l.waiters.PushBack(w)
	}
	l.mu.Unlock()
	return l.await(ctx, e, w)
}

// await waits for w to be granted, or gives its place up.
func (l *inflight) await(ctx context.Context, e *list.Element, w *waiter) error {
	t := time.NewTimer(l.wait)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted { // granted as the wait ended
		return nil
	}
	l.waiters.Remove(e)
	l.grant() // w may have been first, holding back smaller ones
	if err != nil {
		return err
	}
	le := &limitError{what: "bytes", limit: l.maxBytes, wait: l.wait}
	if l.held.Requests+w.requests > l.maxRequests {
		le.what, le.limit = "requests", l.maxRequests
	}
	l.refused.WithLabelValues(le.what).Inc()
	return le
}

func (l *inflight) release(bytes, requests int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held.Bytes -= bytes
	l.held.Requests -= requests
	l.grant()
}

func (l *inflight) fits(bytes, requests int64) bool {
	return l.held.Bytes+bytes <= l.maxBytes && l.held.Requests+requests <= l.maxRequests
}

func (l *inflight) take(bytes, requests int64) {
	l.held.Bytes += bytes
	l.held.Requests += requests
	l.held.PeakBytes = max(l.held.PeakBytes, l.held.Bytes)
	l.held.PeakRequests = max(l.held.PeakRequests, l.held.Requests)
}

// grant admits waiters in order while the first one fits; one that does
// not holds back those behind it, so that a large body is not starved by
// a stream of small ones.
func (l *inflight) grant() {
	for e := l.waiters.Front(); e != nil; e = l.waiters.Front() {
		w := e.Value.(*waiter)
		if !l.fits(w.bytes, w.requests) {
			return
		}
		l.take(w.bytes, w.requests)
		w.granted = true
		l.waiters.Remove(e)
		close(w.ready)
	}
}

// admission is one ingest request's reservation.
type admission struct {
	l     *inflight
	ctx   context.Context
	bytes int64 // reserved
}

// admit reserves a request and the body bytes it declares (chunkStep
// when it declares none) before any is read.
func (l *inflight) admit(ctx context.Context, contentLength int64) (*admission, error) {
	n := contentLength
	if n < 0 {
		n = chunkStep
	}
	if err := l.acquire(ctx, n, 1, false); err != nil {
		return nil, err
	}
	return &admission{l: l, ctx: ctx, bytes: n}, nil
}

func (a *admission) done() { a.l.release(a.bytes, 1) }

// grow reserves chunkStep more for a chunked body, never past limit (the
// body limit: the one byte past it that MaxBytesReader reads to refuse the
// body is not reserved).
func (a *admission) grow(limit int64) error {
	step := min(chunkStep, limit-a.bytes)
	if err := a.l.acquire(a.ctx, step, 0, true); err != nil {
		return err
	}
	a.bytes += step
	return nil
}

// reservingReader reserves a chunked body's bytes before it reads them. It
// sits under http.MaxBytesReader, which never reads past limit+1.
type reservingReader struct {
	r     io.Reader
	a     *admission
	limit int64
	read  int64
}

func (r *reservingReader) Read(p []byte) (int, error) {
	if r.read >= r.a.bytes && r.a.bytes < r.limit {
		if err := r.a.grow(r.limit); err != nil {
			return 0, err
		}
	}
	if room := r.a.bytes - r.read; room > 0 && int64(len(p)) > room {
		p = p[:room]
	}
	n, err := r.r.Read(p)
	r.read += int64(n)
	return n, err
}
