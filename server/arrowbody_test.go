package server

import (
	"bytes"
	"runtime/debug"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
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
