package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/wal"
)

// TestReplaySkipsZombieStraddlingCursor: epoch 1's writer, a zombie after
// epoch 2 claimed at WAL tail 100, wrote a record over positions 90..189
// (its own positions run on below epoch 2's tail when another epoch's
// records reached higher). Epoch 2 committed up to 150 and wrote on to
// 159; epoch 3 claimed at 160. The record reaches
// past the cursor but was written after epoch 2's claim: never
// acknowledged. Replaying it would build a generation starting at 90, at
// or below the cursor, which no commit accepts: the shard would be wedged.
// It is skipped, because epoch 2 starts at or below the cursor.
func TestReplaySkipsZombieStraddlingCursor(t *testing.T) {
	m := shardmeta.NewManifest()
	m.WriterEpoch, m.CurrentGeneration, m.ReplayCursor = 3, 5, 150
	m.Epochs = []shardmeta.EpochRecord{
		{Epoch: 1, StartGeneration: 1, StartPosition: 0},
		{Epoch: 2, StartGeneration: 3, StartPosition: 100, ReplayEndGeneration: 3},
		{Epoch: 3, StartGeneration: 5, StartPosition: 160},
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		h    wal.Header
		skip bool
	}{
		{wal.Header{Epoch: 1, Generation: 3, FirstPos: 90, Count: 100}, true}, // the zombie's straddling record
		{wal.Header{Epoch: 1, Generation: 3, FirstPos: 151, Count: 5}, true},  // a zombie's, beyond the cursor
		{wal.Header{Epoch: 2, Generation: 5, FirstPos: 151, Count: 9}, false}, // epoch 2's, not committed
		{wal.Header{Epoch: 2, Generation: 5, FirstPos: 161, Count: 5}, true},  // past epoch 3's start
		{wal.Header{Epoch: 3, Generation: 5, FirstPos: 161, Count: 5}, false},
	} {
		for _, exclusion := range []bool{true, false} {
			if got := skipOnReplay(m, tc.h, exclusion); got != tc.skip {
				t.Errorf("skipOnReplay(%+v, source exclusion %v) = %v, want %v", tc.h, exclusion, got, tc.skip)
			}
		}
	}
}

// TestReplaySkipSurvivesPruning: for random epoch records and replay
// cursors, every WAL record the replay reads (one reaching past the cursor)
// is judged the same with the records shardmeta.PruneEpochs keeps as with
// all of them, with and without source exclusion; and dropping them is a
// transition CheckTransition accepts.
func TestReplaySkipSurvivesPruning(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dropped := 0
	for range 300 {
		full := randomEpochs(rng)
		pruned := full.Clone()
		dropped += pruned.PruneEpochs()
		if err := pruned.Validate(); err != nil {
			t.Fatalf("pruned manifest: %v\nfull: %+v", err, full.Epochs)
		}
		if err := shardmeta.CheckTransition(full, pruned); err != nil {
			t.Fatalf("pruning: %v\nfull: %+v", err, full.Epochs)
		}
		top := full.Epochs[len(full.Epochs)-1].StartPosition + 10
		for e := uint64(1); e <= full.WriterEpoch; e++ {
			for first := uint64(1); first <= top; first++ {
				for _, count := range []uint32{1, 7} {
					if first+uint64(count)-1 <= full.ReplayCursor {
						continue // the replay never reads it
					}
					for g := uint64(1); g <= full.CurrentGeneration; g++ {
						h := wal.Header{Epoch: e, Generation: g, FirstPos: first, Count: count}
						for _, exclusion := range []bool{true, false} {
							if a, b := skipOnReplay(full, h, exclusion), skipOnReplay(pruned, h, exclusion); a != b {
								t.Fatalf("record %+v (source exclusion %v): skipped %v with every record, %v with %+v\nfull: %+v, cursor %d",
									h, exclusion, a, b, pruned.Epochs, full.Epochs, full.ReplayCursor)
							}
						}
					}
				}
			}
		}
	}
	if dropped == 0 {
		t.Fatal("no record was ever dropped: the test proves nothing")
	}
	t.Logf("%d records dropped", dropped)
}

// randomEpochs returns a valid manifest with 20–40 claims, of start
// positions and generations that often repeat, and a replay cursor
// anywhere among them; nothing flushed.
func randomEpochs(rng *rand.Rand) *shardmeta.Manifest {
	m := shardmeta.NewManifest()
	var pos, gen uint64 = 0, 1
	n := 20 + rng.IntN(21)
	for e := uint64(1); e <= uint64(n); e++ {
		if rng.IntN(2) == 0 {
			pos += uint64(rng.IntN(4))
		}
		if rng.IntN(3) == 0 {
			gen += uint64(rng.IntN(2))
		}
		m.Epochs = append(m.Epochs, shardmeta.EpochRecord{Epoch: e, StartGeneration: gen, StartPosition: pos})
	}
	m.WriterEpoch, m.CurrentGeneration = uint64(n), gen
	m.ReplayCursor = uint64(rng.IntN(int(pos) + 2))
	return m
}
