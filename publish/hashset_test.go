package publish

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestHashSetIsASet: adds and removes drawn at random, from a few hashes
// (so that many collide, runs of probes wrap the table, and removes move
// hashes back) and from many (so that the table grows), agree with a Go
// map after every step, and every hash held is found again.
func TestHashSetIsASet(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	for _, tc := range []struct {
		name     string
		distinct uint64
		steps    int
	}{{"few", 40, 20_000}, {"many", 50_000, 200_000}} {
		t.Run(tc.name, func(t *testing.T) {
			s, model := newHashSet(4), map[uint64]bool{}
			for step := range tc.steps {
				h := rng.Uint64N(tc.distinct) * 0x100000001 // the hash 0 too
				if rng.IntN(3) == 0 {
					s.remove(h)
					delete(model, h)
				} else if got, want := s.add(h), !model[h]; got != want {
					t.Fatalf("step %d: add(%#x) = %v, want %v", step, h, got, want)
				} else {
					model[h] = true
				}
				if s.len() != len(model) {
					t.Fatalf("step %d: %d hashes held, want %d", step, s.len(), len(model))
				}
				if step%997 == 0 {
					checkHeld(t, s, model)
				}
			}
			checkHeld(t, s, model)
		})
	}
}

// checkHeld checks that every hash of model is found where a probe starts,
// and that the set holds nothing else.
func checkHeld(t *testing.T, s *hashSet, model map[uint64]bool) {
	t.Helper()
	mask := len(s.slots) - 1
	for h := range model {
		if h == 0 {
			if !s.zero {
				t.Fatal("the hash 0 is lost")
			}
			continue
		}
		i := s.slot(h)
		for s.slots[i] != h {
			if s.slots[i] == 0 {
				t.Fatalf("hash %#x is not reachable from its slot", h)
			}
			i = (i + 1) & mask
		}
	}
	for _, h := range s.slots {
		if h != 0 && !model[h] {
			t.Fatalf("hash %#x is held but was removed", h)
		}
	}
}

// TestClaimRollsBack: a claim that meets a hash twice leaves the set as
// it was, and the generation claims it later once the duplicate is gone.
func TestClaimRollsBack(t *testing.T) {
	p := newPassIDs(4)
	if !p.claim([]string{"a", "b"}, []uint64{1, 2}) {
		t.Fatal("a first claim failed")
	}
	if p.claim([]string{"c", "d", "e", "b"}, []uint64{3, 4, 0, 2}) {
		t.Fatal("a claim holding a hash already claimed succeeded")
	}
	if p.claim([]string{"f", "g", "f"}, []uint64{6, 7, 6}) {
		t.Fatal("a claim holding one hash twice succeeded")
	}
	if p.hashes.len() != 2 {
		t.Fatalf("%d hashes held after failed claims, want 2", p.hashes.len())
	}
	if !p.claim([]string{"c", "d", "e", "f", "g"}, []uint64{3, 4, 0, 6, 7}) {
		t.Fatal("the hashes of failed claims are still held")
	}
}

// BenchmarkPassIDsClaim: a pass's dedupe of a copied 10,000-row
// generation, made for the pass and claimed; x-map is a Go map doing the
// same over this, in the same run.
func BenchmarkPassIDsClaim(b *testing.B) {
	const n = 10_000
	rng := rand.New(rand.NewPCG(1, 2))
	ids, hashes := make([]string, n), make([]uint64, n)
	for i := range n {
		ids[i], hashes[i] = fmt.Sprint(i), rng.Uint64()
	}
	var mapTime time.Duration
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			m := make(map[uint64]struct{}, n)
			for _, h := range hashes {
				m[h] = struct{}{}
			}
		}
		mapTime = b.Elapsed() / time.Duration(b.N)
	})
	b.Run("rollwal", func(b *testing.B) {
		for b.Loop() {
			if !newPassIDs(n).claim(ids, hashes) {
				b.Fatal("claim failed")
			}
		}
		if mapTime > 0 {
			b.ReportMetric(float64(mapTime)/float64(b.Elapsed()/time.Duration(b.N)), "x-map")
		}
	})
}

// TestPassIDsOfAHugePlan: the dedupe set of a plan of a trillion rows is
// made small and grows with the ids claimed.
func TestPassIDsOfAHugePlan(t *testing.T) {
	p := newPassIDs(1 << 40)
	if n := len(p.hashes.slots); n > 1<<21 {
		t.Fatalf("a set of %d slots made before any id is claimed", n)
	}
	hashes := make([]uint64, 3<<20)
	for i := range hashes {
		hashes[i] = uint64(i) + 1
	}
	if !p.claim(make([]string, len(hashes)), hashes) || p.hashes.len() != len(hashes) {
		t.Fatalf("claimed %d of %d hashes", p.hashes.len(), len(hashes))
	}
}
