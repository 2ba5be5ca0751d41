package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func closeOnCleanup(t *testing.T, b *Batcher) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("close batcher: %v", err)
		}
	})
}

func TestBatcherAgainstRealWriter(t *testing.T) {
	calls := 0
	w := newWriter(t, counting(&calls))
	c, _ := newClient(t, w.ts.URL, Options{})
	b := c.NewBatcher(BatcherOptions{MaxRows: 10, Linger: time.Hour})
	closeOnCleanup(t, b)
	ctx := context.Background()
	var first *Ack
	for i := range 25 {
		a, err := b.Add(ctx, "s0", rows(fmt.Sprint("a", i))[0], nil)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = a
		}
	}
	for i := range 7 {
		if _, err := b.Add(ctx, "s1", rows(fmt.Sprint("b", i))[0], nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := first.Wait(ctx); err != nil || res.Stored != 10 {
		t.Fatalf("the first batch answered %+v, %v; want 10 rows stored", res, err)
	}
	if n0, n1 := w.memtableRows(t, "s0"), w.memtableRows(t, "s1"); n0 != 25 || n1 != 7 || calls != 4 {
		t.Fatalf("shards hold %d and %d rows after %d requests, want 25 and 7 after 4 (10+10+5, 7)", n0, n1, calls)
	}
}

func TestBatcherLingerSendsWithoutFlush(t *testing.T) {
	w := newWriter(t, nil)
	c, _ := newClient(t, w.ts.URL, Options{})
	b := c.NewBatcher(BatcherOptions{Linger: time.Millisecond})
	closeOnCleanup(t, b)
	a, err := b.Add(context.Background(), "s0", rows("x")[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := a.Wait(ctx); err != nil || res.Stored != 1 {
		t.Fatalf("a lingering row answered %+v, %v; want it stored without Flush", res, err)
	}
}

// recorder acknowledges every request and records its rows and query.
type recorder struct {
	mu       sync.Mutex
	requests []string // "rows query"
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	n := bytes.Count(body, []byte("\n"))
	rec.mu.Lock()
	rec.requests = append(rec.requests, fmt.Sprintf("%d %s", n, r.URL.RawQuery))
	rec.mu.Unlock()
	fmt.Fprintf(w, `{"acked":%d,"stored":%d}`, n, n)
}

func TestBatcherCutsOnSourceAndBytes(t *testing.T) {
	rec := &recorder{}
	ts := httptest.NewServer(rec)
	defer ts.Close()
	c, _ := newClient(t, ts.URL, Options{})
	line := len(mustLine(t, rows("r0")[0]))
	b := c.NewBatcher(BatcherOptions{MaxBytes: 3 * line, Linger: time.Hour})
	closeOnCleanup(t, b)
	ctx := context.Background()
	add := func(id string, src *Source) {
		if _, err := b.Add(ctx, "s0", rows(id)[0], src); err != nil {
			t.Fatal(err)
		}
	}
	add("r1", &Source{Name: "A", Offset: 5})
	add("r2", &Source{Name: "A", Offset: 7})
	add("r3", &Source{Name: "B", Offset: 1}) // another source: a new batch
	add("r4", nil)                           // no source: a new batch
	add("r5", nil)
	add("r6", nil) // 3 lines reach MaxBytes
	add("r7", nil)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The session numbers the rows across the batches: 2 rows at seq 0,
	// 1 at 2, 3 at 3, 1 at 6.
	p := c.Producer()
	want := []string{"2 offset=7&producer=" + p + "&seq=0&source=A", "1 offset=1&producer=" + p + "&seq=2&source=B",
		"3 producer=" + p + "&seq=3", "1 producer=" + p + "&seq=6"}
	if fmt.Sprint(rec.requests) != fmt.Sprint(want) {
		t.Fatalf("requests %q, want %q", rec.requests, want)
	}
}

func mustLine(t *testing.T, r map[string]any) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := encodeRow(&buf, r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBatcherFailureIsSticky(t *testing.T) {
	in := &injector{faults: []fault{status(http.StatusConflict, "")}}
	ts := httptest.NewServer(in.wrap(&recorder{}))
	defer ts.Close()
	c, _ := newClient(t, ts.URL, Options{})
	b := c.NewBatcher(BatcherOptions{MaxRows: 1, Linger: time.Hour})
	closeOnCleanup(t, b)
	ctx := context.Background()
	a, err := b.Add(ctx, "s0", rows("a")[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Wait(ctx); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("the first batch answered %v, want ErrNotOwner", err)
	}
	if _, err := b.Add(ctx, "s0", rows("b")[0], nil); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("a row after a failed batch: %v, want it refused with the failure", err)
	}
	if _, err := b.Add(ctx, "s1", rows("c")[0], nil); err != nil {
		t.Fatalf("another shard refused a row after s0 failed: %v", err)
	}
	if err := b.Flush(ctx); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Flush after a failed batch: %v, want the failure", err)
	}
}

// TestBatcherBlocksWhenBatchesPileUp holds the writer's answer: with one
// batch in flight and MaxPending more queued, Add waits for its context.
func TestBatcherBlocksWhenBatchesPileUp(t *testing.T) {
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	rec := &recorder{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		rec.ServeHTTP(w, r)
	}))
	defer ts.Close()
	c, _ := newClient(t, ts.URL, Options{})
	b := c.NewBatcher(BatcherOptions{MaxRows: 1, MaxPending: 1, Linger: time.Hour})
	closeOnCleanup(t, b)
	ctx := context.Background()
	if _, err := b.Add(ctx, "s0", rows("a")[0], nil); err != nil {
		t.Fatal(err)
	}
	<-arrived // a is in flight
	if _, err := b.Add(ctx, "s0", rows("b")[0], nil); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := b.Add(short, "s0", rows("c")[0], nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Add with a full queue: %v, want it to block until its context ends", err)
	}
	close(release)
	if _, err := b.Add(ctx, "s0", rows("c")[0], nil); err != nil {
		t.Fatalf("Add once the writer answers: %v", err)
	}
	if err := b.Flush(ctx); err != nil || len(rec.requests) != 3 {
		t.Fatalf("Flush: %v after %d requests, want 3", err, len(rec.requests))
	}
}

func TestBatcherRefusesAfterClose(t *testing.T) {
	c, _ := newClient(t, "http://127.0.0.1:1", Options{})
	b := c.NewBatcher(BatcherOptions{})
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Add(context.Background(), "s0", rows("a")[0], nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v, want ErrClosed", err)
	}
}
