package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/engine"
)

// bigRows is an NDJSON body of n rows of about 1.5 KiB, ids prefix-0000
// on: bodies of one n and one prefix length have one length.
func bigRows(prefix string, n int) []byte {
	var b bytes.Buffer
	pad := strings.Repeat("x", 1400)
	for i := range n {
		fmt.Fprintf(&b, `{"id":"%s-%04d","prompt":"%s","completion":"c","reward":0.5}`+"\n", prefix, i, pad)
	}
	return b.Bytes()
}

// heldBody sends the first half of body, then the rest once release is
// closed; it gives up when the transport closes it.
func heldBody(body []byte, release <-chan struct{}) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		if _, err := pw.Write(body[:len(body)/2]); err != nil {
			return
		}
		<-release
		pw.Write(body[len(body)/2:])
		pw.Close()
	}()
	return pr
}

type answer struct {
	code   int
	header http.Header
	body   []byte
}

// postBody posts an NDJSON body of length n (-1: chunked) and sends the
// answer to out.
func (f *fixture) postBody(t *testing.T, body io.ReadCloser, n int64, out chan<- answer) {
	req, err := http.NewRequest(http.MethodPost, f.ts.URL+"/v1/shards/s0/rows", body)
	if err != nil {
		t.Error(err)
		out <- answer{}
		return
	}
	req.ContentLength = n
	req.Header.Set("Content-Type", ContentTypeNDJSON)
	resp, err := f.ts.Client().Do(req)
	if err != nil {
		t.Errorf("POST: %v", err)
		out <- answer{}
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out <- answer{resp.StatusCode, resp.Header, b}
}

// gauge reads a gauge without labels from the fixture's registry.
func (f *fixture) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestInFlightBytesBounded sends six bodies at once, each held half sent,
// against a limit with room for two and a half: two are admitted and
// hold their bodies' bytes, the four others wait and get 429
// inflight_limit with Retry-After, and a chunked body that outgrows the
// half left is refused the same way mid-read. The bytes the server holds
// (its reservations, read from Inflight and the gauge) never pass the
// limit; once the two bodies are sent, their rows and a chunked body's
// are stored, and nothing of the refused ones.
func TestInFlightBytesBounded(t *testing.T) {
	size := int64(len(bigRows("h0", 400)))
	limit := 2*size + size/2
	f := newServerFixture(t, func(o *engine.Options) { o.FlushBytes = 32 << 20 }, func(o *Options) {
		o.MaxBodyBytes, o.MaxInflightBytes, o.InflightWait = limit, limit, 50*time.Millisecond
		o.HTTP.BodyReadTimeout = 10 * time.Second // a failure shows sooner than at the default minute
	})
	f.srv.SetReady(true)
	release := make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseAll)

	answers := make(chan answer, 6)
	for i := range 6 {
		go f.postBody(t, heldBody(bigRows(fmt.Sprintf("h%d", i), 400), release), size, answers)
	}
	for range 4 { // the two admitted wait for release
		a := <-answers
		checkInflightRefusal(t, a, "max in-flight bytes")
	}
	if st := f.srv.Inflight(); st.Bytes != 2*size || st.Requests != 2 {
		t.Fatalf("with four refused the server holds %+v, want the two admitted bodies (%d bytes)", st, 2*size)
	}
	if g := f.gauge(t, "writer_http_inflight_bytes"); g != float64(2*size) {
		t.Fatalf("writer_http_inflight_bytes is %v, want %d", g, 2*size)
	}

	chunked := make(chan answer, 1)
	f.postBody(t, io.NopCloser(bytes.NewReader(bigRows("c0", 400))), -1, chunked)
	checkInflightRefusal(t, <-chunked, "chunked body")

	releaseAll()
	for range 2 {
		if a := <-answers; a.code != http.StatusOK || decode[AppendResponse](t, a.body).Stored != 400 {
			t.Fatalf("an admitted body answered %d %s, want 200 storing 400 rows", a.code, a.body)
		}
	}
	f.postBody(t, io.NopCloser(bytes.NewReader(bigRows("c0", 400))), -1, chunked)
	if a := <-chunked; a.code != http.StatusOK {
		t.Fatalf("a chunked body with room answered %d %s", a.code, a.body)
	}
	st := f.srv.Inflight()
	if st.PeakBytes > limit || st.PeakBytes < 2*size || st.Bytes != 0 || st.Requests != 0 {
		t.Fatalf("in flight %+v, want a peak of at least %d and at most the limit %d, and nothing held at the end", st, 2*size, limit)
	}
	if rows := decode[engine.Status](t, f.get(t, "/v1/shards/s0")).MemtableRows; rows != 3*400 {
		t.Fatalf("the shard holds %d rows, want the 1200 of the three bodies admitted", rows)
	}
}

func checkInflightRefusal(t *testing.T, a answer, naming string) {
	t.Helper()
	e := decode[apiError](t, a.body)
	if a.code != http.StatusTooManyRequests || e.Code != codeInflightLimit || !strings.Contains(e.Error, naming) || a.header.Get("Retry-After") == "" {
		t.Fatalf("answered %d %s (Retry-After %q), want 429 inflight_limit naming %q with Retry-After", a.code, a.body, a.header.Get("Retry-After"), naming)
	}
}

// TestInflightAdmitsInOrder: a reservation that does not fit waits, and
// holds back a later one that would fit, so that a large body is not
// starved by small ones; a release admits them in order. One that waits
// past the wait is refused naming the limit it did not fit.
func TestInflightAdmitsInOrder(t *testing.T) {
	ctx := context.Background()
	l := newInflight(10, 3, time.Minute, prometheus.NewRegistry())
	if err := l.acquire(ctx, 6, 1, false); err != nil {
		t.Fatal(err)
	}
	admitted := make(chan error, 2)
	go func() { admitted <- l.acquire(ctx, 6, 1, false) }()
	waitQueued(t, l, 1)
	go func() { admitted <- l.acquire(ctx, 4, 1, false) }() // fits, but comes second
	waitQueued(t, l, 2)
	l.release(6, 1)
	for range 2 {
		if err := <-admitted; err != nil {
			t.Fatal(err)
		}
	}
	if st := l.stats(); st.Bytes != 10 || st.Requests != 2 {
		t.Fatalf("after the release %+v is held, want both waiters' 10 bytes", st)
	}

	l = newInflight(10, 1, time.Millisecond, prometheus.NewRegistry())
	if err := l.acquire(ctx, 1, 1, false); err != nil {
		t.Fatal(err)
	}
	if err := l.acquire(ctx, 1, 1, false); err == nil || !strings.Contains(err.Error(), "max in-flight requests") {
		t.Fatalf("a second request past a limit of one: %v, want a refusal naming the request limit", err)
	}
}

// waitQueued waits until n reservations wait; they queue at once, so the
// loop only yields to their goroutines.
func waitQueued(t *testing.T, l *inflight, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		queued := l.waiters.Len()
		l.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reservations wait, want %d", queued, n)
		}
		runtime.Gosched()
	}
}
