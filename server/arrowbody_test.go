package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/vfs"
)

// TestArrowBodyReusedAfterRowsAreCopied: a request's body buffer goes back
// to the pool once its stream is decoded, and the next request reads its
// body into it; the rows taken from the first are unchanged, by column and
// cell by cell (every value was copied out), and equal to the rows of the
// same stream read without the pool.
func TestArrowBodyReusedAfterRowsAreCopied(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection would empty the pool
	sc := nestedSchema(t)
	first := arrowStream(t, everyType(0, "a", "b", "c", "d", "e"))
	next := arrowStream(t, everyType(1, "f", "g", "h", "i", "j"))
	for _, cells := range []bool{false, true} {
		pool := &bodyAllocator{}
		decode := func(body []byte, pooled bool) *arrowRows {
			t.Helper()
			lim := limits(1<<24, 1<<20)
			lim.cells = cells
			if pooled {
				lim.size, lim.bodies = int64(len(body)), pool
			}
			got, err := decodeArrow(bytes.NewReader(body), sc, memory.DefaultAllocator, lim)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		want := decode(first, false)
		got := decode(first, true)
		if pool.made.Load() == 0 {
			t.Fatalf("cells %v: no body was read into the pool's buffers", cells)
		}
		// The race detector's sync.Pool drops a quarter of what is put.
		for range 50 {
			decode(next, true)
			if pool.reused.Load() > 0 {
				break
			}
		}
		if pool.reused.Load() == 0 {
			t.Fatalf("cells %v: %d bodies made, none reused", cells, pool.made.Load())
		}
		sameRows(t, "the first stream after its body was reused", got, want, nil, nil)
	}
}

// TestBodyAllocatorClasses: buffers are pooled in power-of-two classes and
// served at the size asked; what is outside the classes is not pooled.
func TestBodyAllocatorClasses(t *testing.T) {
	for _, tc := range []struct{ size, class int }{
		{1, 0}, {64 << 10, 0}, {64<<10 + 1, 1}, {1 << 20, 4}, {8 << 20, 7}, {8<<20 + 1, -1}, {0, -1},
	} {
		if got := bodyClass(tc.size); got != tc.class {
			t.Errorf("bodyClass(%d) = %d, want %d", tc.size, got, tc.class)
		}
	}
	a := &bodyAllocator{}
	for _, size := range []int{100, 64<<10 + 1, 9 << 20} {
		b := a.Allocate(size)
		if len(b) != size {
			t.Fatalf("Allocate(%d) gave %d bytes", size, len(b))
		}
		if c := bodyClass(size); c >= 0 && cap(b) != 1<<(c+minBodyClass) {
			t.Fatalf("Allocate(%d): capacity %d, not its class's", size, cap(b))
		}
		a.Free(b)
	}
	a.Free(make([]byte, 100)) // not of a class: dropped, never served
	for range 4 {
		if b := a.Allocate(10); cap(b) != 64<<10 {
			t.Fatalf("Allocate(10) served a buffer of capacity %d", cap(b))
		}
	}
}

// TestArrowBodiesOfConcurrentRequests: clients post Arrow streams at the
// same time, so that bodies go back to the pool and are read over by
// other requests while rows taken from them are appended; every row
// flushed holds its own values.
func TestArrowBodiesOfConcurrentRequests(t *testing.T) {
	var fs vfs.FS
	f := newFixtureWith(t, 0, func(o *engine.Options) { fs, o.FlushBytes = o.FS, 64<<20 })
	f.srv.SetReady(true)
	const clients, requests, rows = 4, 10, 40
	prompt := func(id string) string { return strings.Repeat(id+" ", 200) }
	bodies := make([][][]byte, clients) // built here: t.Fatal only in the test's goroutine
	for c := range clients {
		for r := range requests {
			cols := rollouts()
			for i := range rows {
				id := fmt.Sprintf("c%d-r%d-%d", c, r, i)
				for k, v := range []any{id, prompt(id), "c " + id, float64(i), `{"k":1}`} {
					cols[k].vals = append(cols[k].vals, v)
				}
			}
			bodies[c] = append(bodies[c], arrowStream(t, cols))
		}
	}
	var wg sync.WaitGroup
	failed := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			for r, body := range bodies[c] {
				resp, err := f.ts.Client().Post(f.ts.URL+"/v1/shards/s0/rows", ContentTypeArrow, bytes.NewReader(body))
				if err != nil {
					failed <- fmt.Errorf("client %d request %d: %w", c, r, err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed <- fmt.Errorf("client %d request %d: %d %s", c, r, resp.StatusCode, b)
					return
				}
			}
		})
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Fatal(err)
	}
	if code, b := f.post(t, "/v1/shards/s0/flush", ""); code != http.StatusOK {
		t.Fatalf("flush: %d %s", code, b)
	}
	sh, _ := f.host.Shard("s0")
	seen := 0
	for _, g := range sh.Manifest().Flushed {
		_, d, err := generation.ReadStored(fs, filepath.Join(sh.GenerationDir(), g.File))
		if err != nil {
			t.Fatal(err)
		}
		p, c := d.Rows.Schema.Index("prompt"), d.Rows.Schema.Index("completion")
		for i, id := range d.Rows.IDs {
			if got := d.Rows.Cols[p].Str[i]; got != prompt(id) {
				t.Fatalf("row %s has prompt %.40q…, want %.40q…", id, got, prompt(id))
			}
			if got := d.Rows.Cols[c].Str[i]; got != "c "+id {
				t.Fatalf("row %s has completion %q, want %q", id, got, "c "+id)
			}
			seen++
		}
	}
	if seen != clients*requests*rows {
		t.Fatalf("flushed %d rows, want %d", seen, clients*requests*rows)
	}
}
