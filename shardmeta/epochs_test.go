package shardmeta

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// lifecycle drives one shard's manifest through claims and commits as pure
// transitions: planClaim (what Store.Claim writes) and the commits a
// writer makes (flush, drain). Every step is checked with Validate and
// CheckTransition, as the store checks it.
type lifecycle struct {
	t    *testing.T
	m    *Manifest
	tail uint64 // the WAL's highest position
	rev  int64
}

func newLifecycle(t *testing.T) *lifecycle {
	return &lifecycle{t: t, m: NewManifest()}
}

// claim plans and applies a claim whose prepare records the WAL tail as the
// new epoch's start position, as the engine does.
func (l *lifecycle) claim() {
	l.t.Helper()
	data, err := l.m.Encode()
	if err != nil {
		l.t.Fatal(err)
	}
	l.rev++
	snap := &snapshot{manifest: &mvccpb.KeyValue{Value: data, ModRevision: l.rev}}
	if l.m.WriterEpoch > 0 {
		snap.epoch = &mvccpb.KeyValue{Value: []byte(strconv.FormatUint(l.m.WriterEpoch, 10)), ModRevision: l.rev}
	}
	p, err := planClaim("s0", snap, Owner{Writer: "w"}, func(m *Manifest) error {
		m.Epochs[len(m.Epochs)-1].StartPosition = l.tail
		return nil
	})
	if err != nil {
		l.t.Fatalf("claim after epoch %d: %v", l.m.WriterEpoch, err)
	}
	l.apply(p.next)
}

// append writes n rows to the WAL, not yet flushed.
func (l *lifecycle) append(n uint64) { l.tail += n }

// flush commits what the WAL holds above the replay cursor as one
// generation of the current epoch (the replay's end if the epoch's replay
// range is still open).
func (l *lifecycle) flush() {
	l.t.Helper()
	next := l.m.Clone()
	g := next.CurrentGeneration
	next.CurrentGeneration = g + 1
	if l.tail > next.ReplayCursor {
		next.Flushed = append(next.Flushed, Generation{
			Number: g, File: fmt.Sprintf("g%06d.parquet", g), Rows: 1, Bytes: 1,
			SeqFirst: next.ReplayCursor + 1, SeqLast: l.tail, Epoch: next.WriterEpoch,
		})
		next.ReplayCursor = l.tail
	}
	if last := &next.Epochs[len(next.Epochs)-1]; last.ReplayEndGeneration == 0 {
		last.ReplayEndGeneration = g
	}
	l.apply(next)
}

// drain drops the flushed generations a merge published.
func (l *lifecycle) drain(keep int) {
	l.t.Helper()
	next := l.m.Clone()
	if n := len(next.Flushed); n > keep {
		next.Flushed = append([]Generation{}, next.Flushed[n-keep:]...)
	}
	l.apply(next)
}

func (l *lifecycle) apply(next *Manifest) {
	l.t.Helper()
	if err := next.Validate(); err != nil {
		l.t.Fatalf("epoch %d: %v", next.WriterEpoch, err)
	}
	if err := CheckTransition(l.m, next); err != nil {
		l.t.Fatalf("epoch %d: %v", next.WriterEpoch, err)
	}
	l.m = next
}

// TestEpochRecordsBounded claims one shard 10,000 times, in the ways a
// writer restarts (cleanly, after a crash with an unflushed WAL tail, with
// and without merges draining), and checks after every claim that the
// manifest holds no more epoch records than RecentEpochs, one per epoch
// of a flushed generation, and the record its replay cursor passed.
func TestEpochRecordsBounded(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	l := newLifecycle(t)
	most := 0
	claims := 0
	open := func() {
		l.claim()
		claims++
		if l.m.UncoveredEpochs() >= RecentEpochs/2 && l.tail > l.m.ReplayCursor {
			l.flush() // the engine's open commits the replayed tail first
		}
		if n, bound := len(l.m.Epochs), MaxEpochRecords(len(l.m.Flushed)); n > bound {
			t.Fatalf("claim %d (epoch %d): %d epoch records, %d generations flushed: more than %d", claims, l.m.WriterEpoch, n, len(l.m.Flushed), bound)
		}
		most = max(most, len(l.m.Epochs))
	}
	for claims < 10_000 {
		open()
		switch rng.IntN(5) {
		case 0: // restart at once: nothing written
		case 1: // crash with an unflushed tail
			l.append(1 + rng.Uint64N(10))
		case 2: // a crash loop: every writer appends and dies before its flush
			for range 30 {
				l.append(1)
				open()
			}
		case 3: // replay flushed, more rows, crash before their flush
			l.flush()
			l.append(1 + rng.Uint64N(10))
		default: // run a while: flushes, and a merge drains all but a few
			for range 1 + rng.IntN(3) {
				l.append(1 + rng.Uint64N(10))
				l.flush()
			}
			l.drain(rng.IntN(3))
		}
	}
	t.Logf("after %d claims: %d epoch records (at most %d)", claims, len(l.m.Epochs), most)
}

// TestClaimPrunesOldManifest: a manifest written before pruning existed,
// with a record for each of its 500 claims, still decodes, and the next
// claim through the store keeps only the records something needs.
func TestClaimPrunesOldManifest(t *testing.T) {
	s := newStore(t)
	m := NewManifest()
	for e := uint64(1); e <= 500; e++ {
		// Each epoch flushed one generation of 10 rows above its start.
		g := m.CurrentGeneration
		m.Epochs = append(m.Epochs, EpochRecord{Epoch: e, StartGeneration: g, StartPosition: m.ReplayCursor, ReplayEndGeneration: g})
		m.Flushed = append(m.Flushed, Generation{Number: g, File: fmt.Sprintf("g%06d.parquet", g), Rows: 10, Bytes: 10,
			SeqFirst: m.ReplayCursor + 1, SeqLast: m.ReplayCursor + 10, Epoch: e})
		m.WriterEpoch, m.CurrentGeneration, m.ReplayCursor = e, g+1, m.ReplayCursor+10
	}
	m.Flushed = m.Flushed[len(m.Flushed)-3:] // merges drained all but three
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, s.Keys().Manifest("s0"), string(data))
	putRaw(t, s.Keys().Epoch("s0"), "500")
	if got, _, err := s.Load(testCtx(t), "s0"); err != nil || len(got.Epochs) != 500 {
		t.Fatalf("Load of the old manifest: %v, %d records", err, len(got.Epochs))
	}
	c := claim(t, s, "s0", "w1")
	var epochs []uint64
	for _, r := range c.Manifest.Epochs {
		epochs = append(epochs, r.Epoch)
	}
	// The newest RecentEpochs (486..501) and none before: the generations
	// flushed (of epochs 498..500) are among them, and so is the record
	// starting at or below the cursor.
	if len(epochs) != RecentEpochs || epochs[0] != 501-RecentEpochs+1 || epochs[len(epochs)-1] != 501 {
		t.Fatalf("after the claim the manifest holds the records of epochs %v", epochs)
	}
	stored, _, err := s.Load(testCtx(t), "s0")
	if err != nil || !stored.Equal(c.Manifest) {
		t.Fatalf("stored manifest %+v (%v), want the claim's", stored, err)
	}
}
