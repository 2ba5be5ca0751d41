package memtable

import (
	"strings"
	"unsafe"
)

// Slab sizes of a memtable's string arena. Slabs start small, so the many
// nearly empty memtables of an idle process cost little, and double up to
// maxSlab. A string of at least ownAllocBytes gets an allocation of its own,
// which bounds the tail a slab can waste when the next string does not fit
// to ownAllocBytes/maxSlab = 1/16 of the slab.
const (
	minSlab       = 4 << 10
	maxSlab       = 1 << 20
	ownAllocBytes = maxSlab / 16
	pageBytes     = 8 << 10 // Go rounds allocations above 32 KiB up to pages of 8 KiB
)

// arena copies strings into large byte slabs. Bytes are only ever appended
// beyond a slab's length, never rewritten, so a string handed out stays
// valid and immutable for as long as anything refers to it, and readers of
// earlier strings never race with later copies. A slab is freed by the
// garbage collector once no string points into it.
type arena struct {
	slab []byte // the current slab: len is what is used, cap its size
}

// copy returns a copy of s that lives in the arena.
func (a *arena) copy(s string) string {
	n := len(s)
	switch {
	case n == 0:
		return ""
	case n >= ownAllocBytes:
		return strings.Clone(s)
	case cap(a.slab)-len(a.slab) < n:
		size := min(max(2*cap(a.slab), minSlab), maxSlab)
		a.slab = make([]byte, 0, max(size, n))
	}
	off := len(a.slab)
	a.slab = append(a.slab, s...)
	return unsafe.String(&a.slab[off], n)
}

// stringBytes is what a string of n bytes costs in an arena: its bytes, or
// for a string with an allocation of its own, its bytes rounded up to pages.
func stringBytes(n int) int64 {
	if n >= ownAllocBytes {
		return int64((n + pageBytes - 1) / pageBytes * pageBytes)
	}
	return int64(n)
}
