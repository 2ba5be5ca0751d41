package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/server"
	"github.com/rollwal/rollwal/vfs"
)

// writer is a real server over a real engine host with shards s0 and s1.
type writer struct {
	host *engine.Host
	ts   *httptest.Server
}

func newWriter(t *testing.T, wrap func(http.Handler) http.Handler) *writer {
	t.Helper()
	return newWriterWith(t, wrap, nil)
}

// newWriterWith is newWriter with the server's options changed by edit.
func newWriterWith(t *testing.T, wrap func(http.Handler) http.Handler, edit func(*server.Options)) *writer {
	t.Helper()
	host, err := engine.NewHost(engine.Options{
		DataDir: "/data", FS: vfs.NewStrictMem(), Table: etcdtest.Name(t, "", 100), Etcd: etcd.Server(t).Client(),
		WALSegmentSize: 64 << 10, FlushAge: -1, MemoryBudget: 64 << 20, MaxBatchRows: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := host.Close(ctx); err != nil {
			t.Errorf("close host: %v", err)
		}
	})
	for _, s := range []string{"s0", "s1"} {
		if _, err := host.Open(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	opts := server.Options{Host: host, Shards: []string{"s0", "s1"}}
	if edit != nil {
		edit(&opts)
	}
	srv := server.New(opts)
	srv.SetReady(true)
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(srv)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return &writer{host: host, ts: ts}
}

func (w *writer) memtableRows(t *testing.T, shard string) int {
	t.Helper()
	sh, ok := w.host.Shard(shard)
	if !ok {
		t.Fatalf("shard %s is not open", shard)
	}
	return sh.Status().MemtableRows
}

func rows(ids ...string) []map[string]any {
	out := make([]map[string]any, len(ids))
	for i, id := range ids {
		out[i] = map[string]any{"id": id, "prompt": "p " + id, "completion": "c", "reward": 0.5, "metadata": map[string]any{"i": i}}
	}
	return out
}

// sleeps records the waits of a client instead of sleeping them.
type sleeps struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waits = append(s.waits, d)
	return ctx.Err()
}

func newClient(t *testing.T, url string, opts Options) (*Client, *sleeps) {
	t.Helper()
	c, err := New(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := &sleeps{}
	c.sleep = s.sleep
	return c, s
}

func TestAppendAgainstRealWriter(t *testing.T) {
	w := newWriter(t, nil)
	c, _ := newClient(t, w.ts.URL, Options{})
	ctx := context.Background()
	res, err := c.Append(ctx, "s0", rows("a", "b", "c"), &Source{Name: "topic", Offset: 9})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acked != 3 || res.Stored != 3 || res.Attempts != 1 || res.LastSeq-res.FirstSeq != 2 {
		t.Fatalf("Append answered %+v, want 3 rows stored in one attempt", res)
	}
	if res, err = c.Append(ctx, "s0", rows("c", "d"), nil); err != nil || res.Stored != 1 || res.Duplicates != 1 {
		t.Fatalf("Append of c again and d answered %+v, %v; want 1 stored, 1 duplicate", res, err)
	}
	if n := w.memtableRows(t, "s0"); n != 4 {
		t.Fatalf("shard holds %d rows, want 4", n)
	}
}

func TestBadRequestIsTypedAndNotRetried(t *testing.T) {
	calls := 0
	w := newWriter(t, counting(&calls))
	c, _ := newClient(t, w.ts.URL, Options{})
	bad := rows("a", "b", "c")
	bad[1]["reward"] = "high"
	_, err := c.Append(context.Background(), "s0", bad, nil)
	var br *BadRequestError
	if !errors.As(err, &br) || br.Row != 1 || br.Column != "reward" || !strings.Contains(br.Message, "want float64") {
		t.Fatalf("a bad row answered %v (%#v), want a BadRequestError at row 1, column reward", err, br)
	}
	if calls != 1 {
		t.Fatalf("a 400 was sent %d times, want once", calls)
	}
	var se *StatusError
	if _, err = c.Append(context.Background(), "nope", rows("a"), nil); !errors.As(err, &se) || se.Status != http.StatusNotFound {
		t.Fatalf("an unknown shard answered %v, want a 404 StatusError", err)
	}
	if n := w.memtableRows(t, "s0"); n != 0 {
		t.Fatalf("shard holds %d rows after a refused request, want 0", n)
	}
}

// counting counts the requests that reach the writer.
func counting(n *int) func(http.Handler) http.Handler {
	var mu sync.Mutex
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			*n++
			mu.Unlock()
			next.ServeHTTP(w, r)
		})
	}
}

// fault answers one attempt instead of (or around) the writer.
type fault func(w http.ResponseWriter, r *http.Request, next http.Handler)

// injector answers attempt i with faults[i] and forwards the attempts past
// them: a counter, not timing, decides what each attempt meets.
type injector struct {
	mu     sync.Mutex
	faults []fault
	calls  int
}

func (in *injector) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.mu.Lock()
		i := in.calls
		in.calls++
		in.mu.Unlock()
		if i < len(in.faults) {
			in.faults[i](w, r, next)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func status(code int, retryAfter string) fault {
	return func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":"injected %d"}`, code)
	}
}

// drop cuts the connection without an answer; stored first lets the
// writer store the rows, so that only the acknowledgement is lost.
func drop(stored bool) fault {
	return func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if stored {
			next.ServeHTTP(httptest.NewRecorder(), r)
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
	}
}

func TestRetriedBatchIsNotStoredTwice(t *testing.T) {
	in := &injector{faults: []fault{
		status(http.StatusServiceUnavailable, ""),
		status(http.StatusTooManyRequests, "2"),
		drop(true), // stored, answer lost
		drop(false),
		status(http.StatusBadGateway, ""),
	}}
	w := newWriter(t, in.wrap)
	c, s := newClient(t, w.ts.URL, Options{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Second})
	res, err := c.Append(context.Background(), "s0", rows("a", "b", "c"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 6 || res.Acked != 3 || res.Stored != 0 || res.Duplicates != 3 {
		t.Fatalf("after 5 faults Append answered %+v, want 3 rows acked as duplicates on attempt 6", res)
	}
	if n := w.memtableRows(t, "s0"); n != 3 {
		t.Fatalf("shard holds %d rows, want 3: the retried batch was stored twice", n)
	}
	if len(s.waits) != 5 || s.waits[1] != 2*time.Second {
		t.Fatalf("waits %v, want 5 with the second honouring Retry-After: 2", s.waits)
	}
	for i, d := range s.waits {
		if exp := time.Millisecond << i; i != 1 && (d < exp/2 || d > exp) {
			t.Fatalf("wait %d is %v, want within [%v, %v]", i, d, exp/2, exp)
		}
	}
}

func TestRefusalsAreTypedAndNotRetried(t *testing.T) {
	for _, tc := range []struct {
		code int
		want error
	}{
		{http.StatusConflict, ErrNotOwner},
		{http.StatusRequestEntityTooLarge, ErrTooLarge},
	} {
		in := &injector{faults: []fault{status(tc.code, "")}}
		ts := httptest.NewServer(in.wrap(http.NotFoundHandler()))
		c, s := newClient(t, ts.URL, Options{})
		_, err := c.Append(context.Background(), "s0", rows("a"), nil)
		var se *StatusError
		if !errors.Is(err, tc.want) || !errors.As(err, &se) || se.Message != fmt.Sprintf("injected %d", tc.code) {
			t.Errorf("%d answered %v, want %v carrying the writer's message", tc.code, err, tc.want)
		}
		if in.calls != 1 || len(s.waits) != 0 {
			t.Errorf("%d was sent %d times, want once", tc.code, in.calls)
		}
		ts.Close()
	}
}

func TestGivesUpAfterMaxRetries(t *testing.T) {
	in := &injector{}
	for range 10 {
		in.faults = append(in.faults, status(http.StatusTooManyRequests, "1"))
	}
	ts := httptest.NewServer(in.wrap(http.NotFoundHandler()))
	defer ts.Close()
	c, s := newClient(t, ts.URL, Options{MaxRetries: 2, MaxBackoff: 500 * time.Millisecond})
	_, err := c.Append(context.Background(), "s0", rows("a"), nil)
	if !errors.Is(err, ErrBackpressure) || !strings.Contains(err.Error(), "gave up after 3 attempts") {
		t.Fatalf("endless 429 answered %v, want ErrBackpressure after 3 attempts", err)
	}
	// Retry-After (1 s) is cut to MaxBackoff.
	if in.calls != 3 || len(s.waits) != 2 || s.waits[0] != 500*time.Millisecond {
		t.Fatalf("%d calls, waits %v; want 3 calls and waits of MaxBackoff", in.calls, s.waits)
	}
}

func TestCanceledContextStopsRetrying(t *testing.T) {
	in := &injector{faults: []fault{status(http.StatusServiceUnavailable, ""), status(http.StatusServiceUnavailable, "")}}
	ts := httptest.NewServer(in.wrap(http.NotFoundHandler()))
	defer ts.Close()
	c, _ := newClient(t, ts.URL, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	c.sleep = func(context.Context, time.Duration) error { cancel(); return ctx.Err() }
	if _, err := c.Append(ctx, "s0", rows("a"), nil); !errors.Is(err, context.Canceled) || in.calls != 1 {
		t.Fatalf("cancelled during the backoff: %v after %d calls, want context.Canceled after 1", err, in.calls)
	}
}

func TestBackoffStaysWithinBounds(t *testing.T) {
	c, _ := newClient(t, "http://127.0.0.1:1", Options{MinBackoff: time.Millisecond, MaxBackoff: time.Second})
	for attempt := 1; attempt < 80; attempt++ {
		ceiling := min(time.Millisecond<<min(attempt-1, 20), time.Second)
		if d := c.backoff(attempt, 0); d < ceiling/2 || d > ceiling {
			t.Fatalf("backoff of attempt %d is %v, want within [%v, %v]", attempt, d, ceiling/2, ceiling)
		}
	}
	if d := c.backoff(1, time.Hour); d != time.Second {
		t.Fatalf("a Retry-After of an hour waits %v, want MaxBackoff", d)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		url  string
		opts Options
		want string
	}{
		{"127.0.0.1:8080", Options{}, "want http(s)://host"},
		{"ftp://h", Options{}, "want http(s)://host"},
		{"http://h", Options{MinBackoff: time.Second, MaxBackoff: time.Millisecond}, "MinBackoff 1s is above MaxBackoff"},
		{"http://h", Options{Producer: "p", NoSession: true}, "a producer id needs a session"},
		{"http://h", Options{Producer: "a/b"}, "byte 1 ('/') is not one of"},
		{"http://h", Options{Producer: ".."}, `not "." or ".."`},
		{"http://h", Options{Producer: strings.Repeat("p", 129)}, "want 1–128 bytes"},
	} {
		if _, err := New(tc.url, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %+v) = %v, want an error saying %q", tc.url, tc.opts, err, tc.want)
		}
	}
}

// Rows a producer has as NDJSON already go as they are, in the session:
// blank lines are not rows (the writer skips them too), so the session's
// positions stay contiguous with the Appends around them, and a bad line
// is refused by the writer with its line number, storing nothing.
func TestAppendNDJSONAgainstRealWriter(t *testing.T) {
	w := newWriter(t, nil)
	c, _ := newClient(t, w.ts.URL, Options{Producer: "ndjson-test"})
	ctx := context.Background()
	first, err := c.Append(ctx, "s0", rows("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	body := "\n" + `{"id":"b","prompt":"p","completion":"c","reward":1,"metadata":"{}"}` + "\n  \n" +
		`{"id":"c","prompt":"p","completion":"c","reward":2,"metadata":"{}"}` + "\r\n\n"
	res, err := c.AppendNDJSON(ctx, "s0", []byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stored != 2 || res.SessionSeq != first.SessionSeq+1 {
		t.Fatalf("AppendNDJSON answered %+v after session position %d; want 2 stored from %d", res, first.SessionSeq, first.SessionSeq+1)
	}
	last, err := c.Append(ctx, "s0", rows("d"), nil)
	if err != nil || last.SessionSeq != first.SessionSeq+3 {
		t.Fatalf("Append after it answered %+v, %v; want session position %d", last, err, first.SessionSeq+3)
	}
	_, err = c.AppendNDJSON(ctx, "s0", []byte(`{"id":"e","prompt":"p","completion":"c","reward":1,"metadata":"{}"}`+"\n"+`{"id":"f","prompt":7}`), nil)
	var bad *BadRequestError
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a bad second line answered %v, want a bad request naming line 2", err)
	}
	if _, err := c.AppendNDJSON(ctx, "s0", []byte("\n \n"), nil); err == nil {
		t.Fatal("a body of blank lines was sent")
	}
	if n := w.memtableRows(t, "s0"); n != 4 {
		t.Fatalf("shard holds %d rows, want 4 (a, b, c, d)", n)
	}
}
