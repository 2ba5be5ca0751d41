package engine

import (
	"cmp"
	"slices"
	"time"
)

// Memory pressure. The shards of a host take memtable memory from one
// budget, but each seals its active memtable only at its own FlushBytes (or
// FlushAge). Shards that each hold less than FlushBytes can together fill
// the budget; then nothing flushes and every append waits, for ever with
// flush by age off. So the host watches the budget: once more than three
// quarters of it are in use, or a request cannot be granted at once, it
// seals the largest active memtables until what stays once the sealed
// memtables are flushed is at most half the budget, and their flushers
// commit them. Largest first makes as few and as large generations as
// relief allows; stopping at half leaves a quarter of the budget to fill
// before the next round, so that relief does not seal on every append.

// startRelief watches the host's budget for pressure.
func (h *Host) startRelief() {
	h.relief = make(chan struct{}, 1)
	h.budget.OnPressure(h.budget.Limit()/4*3, func() {
		select {
		case h.relief <- struct{}{}:
		default: // a round is due already
		}
	})
	h.goBackground(func() {
		for {
			select {
			case <-h.bg.Done():
				return
			case <-h.relief:
				h.relieve()
			}
			// Under steady pressure every append asks for a round: let
			// flushes progress between rounds rather than spin.
			select {
			case <-h.bg.Done():
				return
			case <-time.After(reliefInterval):
			}
		}
	})
}

// reliefInterval is the shortest time between two rounds of relief.
const reliefInterval = 5 * time.Millisecond

// relieve seals the largest active memtables of the host's shards until at
// most half the budget stays in use once every sealed memtable is flushed.
func (h *Host) relieve() {
	shards := h.Shards()
	active := make(map[*Shard]int64, len(shards))
	var leaving int64 // bytes sealing cannot free: sealed memtables, stopped shards
	for _, s := range shards {
		held, a := s.memory()
		active[s] = a
		leaving += held - a
	}
	slices.SortFunc(shards, func(a, b *Shard) int { return cmp.Compare(active[b], active[a]) })
	for _, s := range shards {
		if h.budget.Used()-leaving <= h.budget.Limit()/2 || active[s] == 0 {
			return
		}
		leaving += s.sealForMemory()
	}
}

// memory returns the budget bytes the shard's memtables hold and the part
// of them sealing its active memtable could free (none once it stopped: it
// flushes nothing more).
func (s *Shard) memory() (held, active int64) {
	held = s.set.Bytes()
	if s.err() != nil {
		return held, 0
	}
	return held, s.set.Active().Bytes()
}

// sealForMemory seals the active memtable for the host's memory pressure
// and has the flusher commit it. It returns the bytes sealed.
func (s *Shard) sealForMemory() int64 {
	s.mu.Lock()
	a := s.set.Active()
	n := a.Bytes()
	if s.err() != nil || a.Len() == 0 {
		s.mu.Unlock()
		return 0
	}
	s.set.Rotate()
	s.mu.Unlock()
	s.metrics.pressureSeals.WithLabelValues(s.name).Inc()
	s.log.Debug("sealed the active memtable early: the host's memory budget runs low", "generation", a.Generation(), "bytes", n)
	s.requestFlush()
	return n
}
