package publish

import (
	"math/bits"
	"math/rand/v2"
)

// hashSet is a set of 64-bit id hashes for a pass's dedupe: one array,
// linear probing, three quarters full at most. A lookup-free generation is copied
// after claiming every id's hash, and a Go map's insert was a fifth of that
// stage (BenchmarkPassIDsClaim). The hashes are xxhash of ids a producer
// chose, so the slot is taken from the hash mixed with a seed of the
// set's own: ids crafted to share low hash bits do not share slots.
type hashSet struct {
	slots []uint64 // 0: empty; the hash 0 is held by zero
	zero  bool
	n     int // hashes held, zero included
	shift uint
	seed  uint64
}

// newHashSet returns a set sized for n hashes.
func newHashSet(n int) *hashSet {
	s := &hashSet{seed: rand.Uint64() | 1}
	s.alloc(max(16, n+n/2))
	return s
}

func (s *hashSet) alloc(size int) {
	size = 1 << bits.Len(uint(size-1))
	s.slots = make([]uint64, size)
	s.shift = uint(64 - bits.TrailingZeros(uint(size)))
}

func (s *hashSet) slot(h uint64) int {
	return int(((h ^ s.seed) * 0x9e3779b97f4a7c15) >> s.shift)
}

func (s *hashSet) len() int { return s.n }

// add adds h and reports whether it was not held before.
func (s *hashSet) add(h uint64) bool {
	if h == 0 {
		if s.zero {
			return false
		}
		s.zero = true
		s.n++
		return true
	}
	if 4*(s.n+1) > 3*len(s.slots) {
		s.grow()
	}
	mask := len(s.slots) - 1
	for i := s.slot(h); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case 0:
			s.slots[i] = h
			s.n++
			return true
		case h:
			return false
		}
	}
}

// remove removes h, held or not, and moves back the hashes probed past
// its slot so that every hash stays reachable from its own.
func (s *hashSet) remove(h uint64) {
	if h == 0 {
		if s.zero {
			s.zero = false
			s.n--
		}
		return
	}
	mask := len(s.slots) - 1
	i := s.slot(h)
	for ; s.slots[i] != h; i = (i + 1) & mask {
		if s.slots[i] == 0 {
			return
		}
	}
	s.n--
	for j := (i + 1) & mask; s.slots[j] != 0; j = (j + 1) & mask {
		// The hash at j may fill the hole at i when its own slot is not
		// in (i, j] going round.
		if home := s.slot(s.slots[j]); (j-home)&mask >= (j-i)&mask {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = 0
}

func (s *hashSet) grow() {
	old := s.slots
	s.alloc(2 * len(old))
	mask := len(s.slots) - 1
	for _, h := range old {
		if h == 0 {
			continue
		}
		i := s.slot(h)
		for s.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = h
	}
}
