package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func (w *writer) flush(t *testing.T, shard string) {
	t.Helper()
	sh, ok := w.host.Shard(shard)
	if !ok {
		t.Fatalf("shard %s is not open", shard)
	}
	if _, err := sh.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// storedRows counts a shard's rows: in flushed generations and in the
// memtable.
func (w *writer) storedRows(t *testing.T, shard string) int {
	t.Helper()
	sh, ok := w.host.Shard(shard)
	if !ok {
		t.Fatalf("shard %s is not open", shard)
	}
	st := sh.Status()
	n := st.MemtableRows
	for _, g := range st.Flushed {
		n += int(g.Rows)
	}
	return n
}

func (w *writer) nextSeq(t *testing.T, shard, producer string) uint64 {
	t.Helper()
	sh, ok := w.host.Shard(shard)
	if !ok {
		t.Fatalf("shard %s is not open", shard)
	}
	next, _ := sh.ProducerNextSeq(producer)
	return next
}

func idsOf(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return ids
}

// TestConcurrentAppendsOnOneShardLandOnce: Appends of many goroutines to
// one shard through one Client take turns in its session; each batch gets
// its own sequence range, contiguous from 0, and every row is stored once.
func TestConcurrentAppendsOnOneShardLandOnce(t *testing.T) {
	w := newWriter(t, nil)
	c, _ := newClient(t, w.ts.URL, Options{})
	const goroutines, appends, size = 8, 10, 5
	var mu sync.Mutex
	var seqs []uint64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*appends)
	for g := range goroutines {
		wg.Go(func() {
			for i := range appends {
				res, err := c.Append(context.Background(), "s0", rows(idsOf(fmt.Sprintf("g%d-%d", g, i), size)...), nil)
				if err != nil {
					errs <- err
					return
				}
				if res.Stored != size {
					errs <- fmt.Errorf("append stored %+v, want %d rows", res, size)
				}
				mu.Lock()
				seqs = append(seqs, res.SessionSeq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for i, s := range seqs {
		if s != uint64(i*size) {
			t.Fatalf("batch sequences %v, want 0, %d, %d, … without gaps or overlaps", seqs, size, 2*size)
		}
	}
	total := goroutines * appends * size
	if n, next := w.storedRows(t, "s0"), w.nextSeq(t, "s0", c.Producer()); n != total || next != uint64(total) {
		t.Fatalf("shard holds %d rows and expects seq %d next, want %d and %d", n, next, total, total)
	}
}

// loseResponses is a RoundTripper that lets the first lose appends reach
// the writer and be answered, then throws the answer away (calling after
// first) and reports a network error: the rows are stored, their
// acknowledgement is lost.
type loseResponses struct {
	rt    http.RoundTripper
	lose  int
	after func()

	mu   sync.Mutex
	seen int
}

func (l *loseResponses) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/rows") {
		return resp, err
	}
	l.mu.Lock()
	lose := l.seen < l.lose
	l.seen++
	l.mu.Unlock()
	if !lose {
		return resp, nil
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("injected: the writer answered %d before the answer was to be lost", resp.StatusCode)
	}
	if l.after != nil {
		l.after()
	}
	return nil, errors.New("injected: the answer was lost")
}

func losingClient(t *testing.T, url string, opts Options, lose int, after func()) *Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	opts.HTTPClient = &http.Client{Transport: &loseResponses{rt: tr, lose: lose, after: after}, Timeout: 30 * time.Second}
	opts.MinBackoff = time.Millisecond
	c, _ := newClient(t, url, opts)
	return c
}

// TestLostAnswerRetriedAfterFlushStoresOnce: the writer stores a batch,
// its answer is lost, the rows' generation is flushed, and the client
// retries: with a session the retry (same producer and seq) stores
// nothing; without one (the memtable dedupe window has passed) the rows
// are stored twice — what sessions are for.
func TestLostAnswerRetriedAfterFlushStoresOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noSession bool
		want      int
	}{
		{"session", false, 3},
		{"no session", true, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWriter(t, nil)
			c := losingClient(t, w.ts.URL, Options{NoSession: tc.noSession}, 1, func() { w.flush(t, "s0") })
			res, err := c.Append(context.Background(), "s0", rows("a", "b", "c"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Attempts != 2 {
				t.Fatalf("Append answered %+v, want it acknowledged on the second attempt", res)
			}
			if n := w.storedRows(t, "s0"); n != tc.want {
				t.Fatalf("the shard holds %d rows after the retry, want %d", n, tc.want)
			}
			if tc.noSession {
				return
			}
			if res.Stored != 0 || res.Duplicates != 3 || res.SessionSeq != 0 {
				t.Fatalf("the retry answered %+v, want 3 duplicates at seq 0", res)
			}
			// The session goes on after the retried batch.
			if res, err = c.Append(context.Background(), "s0", rows("d"), nil); err != nil || res.SessionSeq != 3 || res.Stored != 1 {
				t.Fatalf("the next Append answered %+v, %v; want 1 row stored at seq 3", res, err)
			}
		})
	}
}

// TestBatcherSendsSeqsInOrder: a Batcher's batches of a shard carry the
// session's sequence numbers in order, contiguous from 0, and every row
// lands once.
func TestBatcherSendsSeqsInOrder(t *testing.T) {
	type sent struct {
		producer   string
		seq        uint64
		rows, code int
	}
	var mu sync.Mutex
	var log []sent
	w := newWriter(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			seq, _ := strconv.ParseUint(r.URL.Query().Get("seq"), 10, 64)
			mu.Lock()
			log = append(log, sent{r.URL.Query().Get("producer"), seq, strings.Count(string(body), "\n"), rec.Code})
			mu.Unlock()
			for k, v := range rec.Header() {
				rw.Header()[k] = v
			}
			rw.WriteHeader(rec.Code)
			rw.Write(rec.Body.Bytes())
		})
	})
	c, _ := newClient(t, w.ts.URL, Options{})
	b := c.NewBatcher(BatcherOptions{MaxRows: 7, MaxPending: 4, Linger: time.Hour})
	closeOnCleanup(t, b)
	ctx := context.Background()
	const n = 100
	for i := range n {
		if _, err := b.Add(ctx, "s0", rows(fmt.Sprint("r", i))[0], nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var next uint64
	for i, s := range log {
		if s.producer != c.Producer() || s.seq != next || s.code != http.StatusOK {
			t.Fatalf("batch %d was %+v, want producer %s at seq %d answered 200 (all: %+v)", i, s, c.Producer(), next, log)
		}
		next += uint64(s.rows)
	}
	if len(log) != (n+6)/7 || next != n {
		t.Fatalf("%d batches of %d rows in all, want %d of %d", len(log), next, (n+6)/7, n)
	}
	if got, want := w.storedRows(t, "s0"), n; got != want {
		t.Fatalf("the shard holds %d rows, want %d", got, want)
	}
}

// TestResumedProducerContinues: a Client with the Producer id of an
// earlier one asks the writer where the id left off and numbers on from
// there, after a flush too.
func TestResumedProducerContinues(t *testing.T) {
	w := newWriter(t, nil)
	first, _ := newClient(t, w.ts.URL, Options{Producer: "job-7.worker:3"})
	if next, err := first.NextSeq(context.Background(), "s0"); err != nil || next != 0 {
		t.Fatalf("a new producer id starts at %d, %v; want 0", next, err)
	}
	if _, err := first.Append(context.Background(), "s0", rows(idsOf("a", 5)...), nil); err != nil {
		t.Fatal(err)
	}
	w.flush(t, "s0")
	again, _ := newClient(t, w.ts.URL, Options{Producer: "job-7.worker:3"})
	if next, err := again.NextSeq(context.Background(), "s0"); err != nil || next != 5 {
		t.Fatalf("the resumed producer id starts at %d, %v; want 5", next, err)
	}
	res, err := again.Append(context.Background(), "s0", rows(idsOf("b", 2)...), nil)
	if err != nil || res.SessionSeq != 5 || res.Stored != 2 {
		t.Fatalf("the resumed producer's Append answered %+v, %v; want 2 rows stored at seq 5", res, err)
	}
	// Another shard resumes on its own: the id is new there.
	if res, err = again.Append(context.Background(), "s1", rows("c"), nil); err != nil || res.SessionSeq != 0 {
		t.Fatalf("the first Append to s1 answered %+v, %v; want seq 0", res, err)
	}
}

// TestRefusedBatchGivesBackItsSeq: a batch the writer refuses (400) leaves
// no gap: the next batch takes its sequence.
func TestRefusedBatchGivesBackItsSeq(t *testing.T) {
	w := newWriter(t, nil)
	c, _ := newClient(t, w.ts.URL, Options{})
	ctx := context.Background()
	if _, err := c.Append(ctx, "s0", rows("a", "b"), nil); err != nil {
		t.Fatal(err)
	}
	bad := rows("c", "d", "e")
	bad[2]["reward"] = "high"
	var br *BadRequestError
	if _, err := c.Append(ctx, "s0", bad, nil); !errors.As(err, &br) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a bad row answered %v, want a BadRequestError with a known outcome", err)
	}
	res, err := c.Append(ctx, "s0", rows("f"), nil)
	if err != nil || res.SessionSeq != 2 || res.Stored != 1 {
		t.Fatalf("the Append after the refused one answered %+v, %v; want 1 row stored at seq 2", res, err)
	}
	if next := w.nextSeq(t, "s0", c.Producer()); next != 3 {
		t.Fatalf("the writer expects seq %d next, want 3", next)
	}
}

// TestUnknownOutcomeSettlesBeforeTheNextBatch: an Append whose every
// attempt lost its answer fails with ErrOutcomeUnknown and keeps its
// sequence range. Retried with the same rows it takes the same range;
// followed by other rows, the client sends it again first. Either way it
// is stored once and the numbering has no gap.
func TestUnknownOutcomeSettlesBeforeTheNextBatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored bool // the lost attempts reached the writer
		retry  bool // the caller retries the same rows next
	}{
		{"stored, retried", true, true},
		{"stored, other rows next", true, false},
		{"not stored, retried", false, true},
		{"not stored, other rows next", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			faults := []fault{drop(tc.stored), drop(tc.stored)}
			in := &injector{faults: faults}
			w := newWriter(t, in.wrap)
			c, _ := newClient(t, w.ts.URL, Options{MaxRetries: 1})
			ctx := context.Background()
			first := rows("a", "b", "c")
			_, err := c.Append(ctx, "s0", first, nil)
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("lost answers: %v, want ErrOutcomeUnknown", err)
			}
			if next, err := c.NextSeq(ctx, "s0"); err != nil || next != 3 {
				t.Fatalf("NextSeq after the unknown outcome: %d, %v; want 3 (the range stays taken)", next, err)
			}
			if tc.retry {
				res, err := c.Append(ctx, "s0", first, nil)
				if err != nil || res.SessionSeq != 0 || res.Acked != 3 {
					t.Fatalf("the retry answered %+v, %v; want 3 rows acknowledged at seq 0", res, err)
				}
			}
			res, err := c.Append(ctx, "s0", rows("d"), nil)
			if err != nil || res.SessionSeq != 3 || res.Stored != 1 {
				t.Fatalf("the next Append answered %+v, %v; want 1 row stored at seq 3", res, err)
			}
			if n, next := w.storedRows(t, "s0"), w.nextSeq(t, "s0", c.Producer()); n != 4 || next != 4 {
				t.Fatalf("the shard holds %d rows and expects seq %d, want 4 and 4", n, next)
			}
		})
	}
}

// TestSequenceErrorIsTyped: two Clients with one Producer id (a misuse)
// make the writer refuse a batch that straddles its sequence; the error
// names the expected sequence and the session goes on from there.
func TestSequenceErrorIsTyped(t *testing.T) {
	w := newWriter(t, nil)
	ctx := context.Background()
	a, _ := newClient(t, w.ts.URL, Options{Producer: "shared"})
	b, _ := newClient(t, w.ts.URL, Options{Producer: "shared"})
	if _, err := b.NextSeq(ctx, "s0"); err != nil { // b starts at 0
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "s0", rows(idsOf("a", 3)...), nil); err != nil {
		t.Fatal(err)
	}
	_, err := b.Append(ctx, "s0", rows(idsOf("b", 5)...), nil)
	var qe *SequenceError
	if !errors.As(err, &qe) || !errors.Is(err, ErrSequence) || qe.Shard != "s0" || qe.Producer != "shared" ||
		qe.Seq != 0 || qe.Count != 5 || qe.Expected != 3 || qe.Unknown || qe.Message == "" {
		t.Fatalf("a straddling batch answered %v (%+v), want a SequenceError at seq 0 of 5 rows expecting 3", err, qe)
	}
	if res, err := b.Append(ctx, "s0", rows(idsOf("b", 5)...), nil); err != nil || res.SessionSeq != 3 || res.Stored != 5 {
		t.Fatalf("the next Append answered %+v, %v; want 5 rows stored at seq 3", res, err)
	}
}

// TestForgottenProducerRenumbers: a writer that answers that it does not
// know the producer (its state expired) expects seq 0: the client sends
// the batch again at 0 and numbers on from there.
func TestForgottenProducerRenumbers(t *testing.T) {
	forgotten := func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `{"error":"unknown producer","code":"sequence","producer":%q,"seq":%s,"count":1,"expected_seq":0,"unknown_producer":true}`,
			r.URL.Query().Get("producer"), r.URL.Query().Get("seq"))
	}
	rec := &recorder{}
	pass := func(w http.ResponseWriter, r *http.Request, next http.Handler) { next.ServeHTTP(w, r) }
	in := &injector{faults: []fault{pass, pass, forgotten}}
	ts := httptest.NewServer(in.wrap(rec))
	defer ts.Close()
	c, _ := newClient(t, ts.URL, Options{})
	var seqs []uint64
	for _, id := range []string{"a", "b", "c", "d"} {
		res, err := c.Append(context.Background(), "s0", rows(id), nil)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, res.SessionSeq)
	}
	if fmt.Sprint(seqs) != "[0 1 0 1]" {
		t.Fatalf("batch sequences %v, want [0 1 0 1]: renumbered from 0 once the writer forgot the producer", seqs)
	}
	var sent []string
	for _, r := range rec.requests {
		q, _ := url.ParseQuery(strings.TrimPrefix(r, "1 "))
		sent = append(sent, q.Get("seq"))
	}
	if fmt.Sprint(sent) != "[0 1 0 1]" {
		t.Fatalf("the writer stored batches at %v, want [0 1 0 1]", sent)
	}
}

func TestTooManyProducersIsTypedAndNotRetried(t *testing.T) {
	in := &injector{faults: []fault{func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":"too many producers","code":"too_many_producers"}`)
	}}}
	ts := httptest.NewServer(in.wrap(&recorder{}))
	defer ts.Close()
	c, s := newClient(t, ts.URL, Options{})
	_, err := c.Append(context.Background(), "s0", rows("a"), nil)
	if !errors.Is(err, ErrTooManyProducers) || errors.Is(err, ErrBackpressure) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("429 too_many_producers answered %v, want ErrTooManyProducers only", err)
	}
	if in.calls != 1 || len(s.waits) != 0 {
		t.Fatalf("429 too_many_producers was sent %d times, want once", in.calls)
	}
	// Nothing was stored: the next batch takes seq 0.
	if res, err := c.Append(context.Background(), "s0", rows("b"), nil); err != nil || res.SessionSeq != 0 {
		t.Fatalf("the next Append answered %+v, %v; want seq 0", res, err)
	}
}

// TestBatcherUnknownOutcomeIsSettled: a Batcher's batch whose answers were
// all lost fails with ErrOutcomeUnknown; the batches dropped after it fail
// without it (they were never sent). Resending the dropped rows through a
// new Batcher of the same Client sends the unknown batch again first, so
// every row is stored once and the numbering has no gap.
func TestBatcherUnknownOutcomeIsSettled(t *testing.T) {
	in := &injector{faults: []fault{drop(false), drop(false)}}
	w := newWriter(t, in.wrap)
	c, _ := newClient(t, w.ts.URL, Options{MaxRetries: 1})
	ctx := context.Background()
	b := c.NewBatcher(BatcherOptions{MaxRows: 2, Linger: time.Hour})
	first, err := b.Add(ctx, "s0", rows("a")[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Add(ctx, "s0", rows("b")[0], nil); err != nil {
		t.Fatal(err)
	}
	var dropped []map[string]any
	for _, id := range []string{"c", "d"} {
		r := rows(id)[0]
		dropped = append(dropped, r)
		a, err := b.Add(ctx, "s0", r, nil)
		if err == nil {
			_, err = a.Wait(ctx)
		}
		if err == nil || errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("row %s after the lost batch: %v, want a failure that does not match ErrOutcomeUnknown", id, err)
		}
	}
	if _, err := first.Wait(ctx); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("the lost batch: %v, want ErrOutcomeUnknown", err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	again := c.NewBatcher(BatcherOptions{MaxRows: 2, Linger: time.Hour})
	closeOnCleanup(t, again)
	var acks []*Ack
	for _, r := range dropped {
		a, err := again.Add(ctx, "s0", r, nil)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	if err := again.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if res, _ := acks[0].Wait(ctx); res.SessionSeq != 2 || res.Stored != 2 {
		t.Fatalf("the resent rows answered %+v, want 2 rows stored at seq 2", res)
	}
	if n, next := w.storedRows(t, "s0"), w.nextSeq(t, "s0", c.Producer()); n != 4 || next != 4 {
		t.Fatalf("the shard holds %d rows and expects seq %d, want 4 and 4", n, next)
	}
}

// TestDefaultProducerIsRandomPerClient: each Client makes its own id;
// NoSession sends none.
func TestDefaultProducerIsRandomPerClient(t *testing.T) {
	rec := &recorder{}
	ts := httptest.NewServer(rec)
	defer ts.Close()
	a, _ := newClient(t, ts.URL, Options{})
	b, _ := newClient(t, ts.URL, Options{})
	for _, p := range []string{a.Producer(), b.Producer()} {
		if len(p) != len("go-")+16 || !strings.HasPrefix(p, "go-") || strings.Trim(p[3:], "0123456789abcdef") != "" {
			t.Fatalf("default producer id %q, want go- and 16 hex digits", p)
		}
	}
	if a.Producer() == b.Producer() {
		t.Fatalf("two Clients share the producer id %q", a.Producer())
	}
	none, _ := newClient(t, ts.URL, Options{NoSession: true})
	if _, err := none.Append(context.Background(), "s0", rows("a"), nil); err != nil {
		t.Fatal(err)
	}
	if none.Producer() != "" || fmt.Sprint(rec.requests) != "[1 ]" {
		t.Fatalf("NoSession: producer %q, requests %q; want none and a request without a session", none.Producer(), rec.requests)
	}
}
