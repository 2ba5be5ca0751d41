package server

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Record batch bodies are read into buffers that come back for the next
// request: a 100-row request's body is some 100 KiB, and allocating and
// zeroing one per request cost as much as decoding its strings. A body is
// an arrow-go buffer of bodyAllocator; the arrays of its record batch hold
// slices of it (memory.SliceBuffer retains the parent), and arrow-go frees
// it to the allocator when the message and the last of those arrays are
// released. Rows never point into it: every value is copied out
// (arrowcols.go, arrowvalues.go), so a body reused by the next request
// changes no row taken from it (TestArrowBodyReusedAfterRowsAreCopied).

// Body buffers are pooled in power-of-two classes from minBodyClass to
// maxBodyClass bytes; larger bodies are allocated and left to the garbage
// collector. sync.Pool drops what two collections find unused, so the
// pool holds at most what concurrent requests recently held, and those
// were admitted under the request memory budget.
const (
	minBodyClass = 16 // 64 KiB
	maxBodyClass = 23 // 8 MiB
)

// bodyAllocator is the memory.Allocator of request bodies.
type bodyAllocator struct {
	classes [maxBodyClass - minBodyClass + 1]sync.Pool // of *[]byte
	// reused and made count Allocate calls served from a pool and not.
	reused, made atomic.Int64
}

// bodies serves every request's Arrow bodies.
var bodies = &bodyAllocator{}

// bodyClass is the pool index for a buffer of size bytes, -1 for none.
func bodyClass(size int) int {
	if size <= 0 || size > 1<<maxBodyClass {
		return -1
	}
	c := bits.Len(uint(size - 1))
	return max(c, minBodyClass) - minBodyClass
}

// Allocate returns size bytes, not zeroed: a body is read over whole.
func (a *bodyAllocator) Allocate(size int) []byte {
	c := bodyClass(size)
	if c < 0 {
		a.made.Add(1)
		return make([]byte, size)
	}
	if p, ok := a.classes[c].Get().(*[]byte); ok {
		a.reused.Add(1)
		return (*p)[:size]
	}
	a.made.Add(1)
	return make([]byte, size, 1<<(c+minBodyClass))
}

// Reallocate is not used by bodies (they are sized once); it keeps b's
// bytes as the interface requires.
func (a *bodyAllocator) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		return b[:size]
	}
	out := a.Allocate(size)
	copy(out, b)
	a.Free(b)
	return out
}

// Free takes back a buffer of one of the pool's classes.
func (a *bodyAllocator) Free(b []byte) {
	c := bodyClass(cap(b))
	if c < 0 || cap(b) != 1<<(c+minBodyClass) {
		return
	}
	b = b[:0]
	a.classes[c].Put(&b)
}

// newBody is a buffer of n bytes of a, owned by the caller (one reference).
func newBody(a memory.Allocator, n int) *memory.Buffer {
	buf := memory.NewResizableBuffer(a)
	buf.Resize(n)
	return buf
}
