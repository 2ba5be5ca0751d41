package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/snapshot"
)

// outcome is what one append attempt told the producer about its ids.
type outcome uint8

const (
	// refused: the writer answered before writing anything (fenced,
	// closed); the ids must never appear through this attempt.
	refused outcome = iota + 1
	// unknown: the rows may be durable (ErrUnknownOutcome, a WAL failure,
	// a crash, a timeout); they may appear, at most once.
	unknown
	// acked: the rows must be in the base exactly once.
	acked
)

func (o outcome) String() string {
	switch o {
	case refused:
		return "refused"
	case unknown:
		return "unknown"
	case acked:
		return "acked"
	}
	return "none"
}

// attempt is one append of an id, as the producer saw it.
type attempt struct {
	step    int
	shard   string
	epoch   uint64
	zombie  bool
	retry   bool
	outcome outcome
	err     string
}

func (a attempt) String() string {
	s := fmt.Sprintf("step %d shard %s epoch %d %s", a.step, a.shard, a.epoch, a.outcome)
	if a.zombie {
		s += " (zombie)"
	}
	if a.retry {
		s += " (retry)"
	}
	if a.err != "" {
		s += ": " + a.err
	}
	return s
}

// idRecord is the history of one id.
type idRecord struct {
	shard    string
	attempts []attempt
	// session: the id was sent in a producer session's batch, whose every
	// retry must be deduplicated, at any time.
	session bool
	// committedBeforeRetry: a retry without a session may have stored the
	// id again (it stored rows anew, or its outcome was unknown) while an
	// earlier attempt of it was already in a committed generation or the
	// base.
	// docs/guarantees.md does not promise to deduplicate that retry ("only
	// while the first attempt is still in a memtable"), so the id may be in
	// the base twice; the simulation counts these instead of failing.
	committedBeforeRetry bool
}

// status folds the attempts: one ack makes the id acknowledged; otherwise
// one unknown outcome makes it possibly present; only refusals make it
// absent.
func (r *idRecord) status() outcome {
	st := refused
	for _, a := range r.attempts {
		st = max(st, a.outcome)
	}
	return st
}

// batch is what a producer sent, kept so that a batch whose outcome was
// unknown can be sent again with the same ids.
type batch struct {
	shard string
	rows  []schema.Row
	src   engine.Source
	// prompt marks a retry sent right after the failover that made the
	// outcome unknown, as docs/guarantees.md advises.
	prompt bool
	// sess is the producer session batch this is (nil: no session).
	sess *sbatch
}

func (b *batch) ids() []string {
	out := make([]string, len(b.rows))
	for i, r := range b.rows {
		out[i] = r["id"].(string)
	}
	return out
}

// model is the checker's view of the history: every id's attempts, the
// epochs claimed, and the last observation of every monotonic quantity.
type model struct {
	ids map[string]*idRecord
	// retryable are batches whose last outcome was unknown.
	retryable []*batch
	// claims are the epochs each successful claim returned, in order.
	claims map[string][]uint64
	// sent is the highest offset sent per source; reached the highest
	// offset of an append that got past the WAL write (acked or unknown).
	sent, reached map[string]int64

	manifests map[string]*shardmeta.Manifest
	base      *publish.Base
	snaps     map[snapshot.Key]int64
	// lagFaults are shards whose replay cursor the simulation set back
	// since the last observation.
	lagFaults map[string]bool
	// retryDuplicates counts ids in the base twice because a retry came
	// after the first attempt had committed (documented, not a failure).
	retryDuplicates int
	// cursors are the replay cursors observed per shard: record
	// boundaries, where the lagging-cursor fault may put a cursor back.
	cursors map[string][]uint64
	// claimedAt is when each claim of a shard returned, in order.
	claimedAt map[string][]claimTime
	// bgActive counts, per source, the producers appending from their own
	// goroutines: their offsets reach a WAL before the model hears of it,
	// so a snapshot's bound is checked when they stop.
	bgActive map[string]int
}

// claimTime is when a claim of an epoch returned.
type claimTime struct {
	epoch uint64
	at    time.Time
}

// supersededAt returns when a claim above epoch first returned.
func (m *model) supersededAt(shard string, epoch uint64) (time.Time, bool) {
	for _, c := range m.claimedAt[shard] {
		if c.epoch > epoch {
			return c.at, true
		}
	}
	return time.Time{}, false
}

func newModel() *model {
	return &model{
		ids: map[string]*idRecord{}, claims: map[string][]uint64{},
		sent: map[string]int64{}, reached: map[string]int64{},
		manifests: map[string]*shardmeta.Manifest{}, snaps: map[snapshot.Key]int64{},
		lagFaults: map[string]bool{}, cursors: map[string][]uint64{},
		claimedAt: map[string][]claimTime{}, bgActive: map[string]int{},
	}
}

func (m *model) record(b *batch, a attempt) {
	for _, id := range b.ids() {
		r := m.ids[id]
		if r == nil {
			r = &idRecord{shard: b.shard, session: b.sess != nil}
			m.ids[id] = r
		}
		r.attempts = append(r.attempts, a)
	}
	m.sent[b.src.Name] = max(m.sent[b.src.Name], b.src.Offset)
	if a.outcome != refused {
		m.reached[b.src.Name] = max(m.reached[b.src.Name], b.src.Offset)
	}
}

// claim records a successful claim and checks that the shard's epochs
// strictly increase over the whole history.
func (m *model) claim(shard string, epoch uint64) error {
	prev := m.claims[shard]
	m.claims[shard] = append(prev, epoch)
	if n := len(prev); n > 0 && epoch <= prev[n-1] {
		return fmt.Errorf("shard %s: claim returned epoch %d after epoch %d (claims so far %v)", shard, epoch, prev[n-1], prev)
	}
	if mf := m.manifests[shard]; mf != nil && epoch <= mf.WriterEpoch && len(prev) > 0 {
		return fmt.Errorf("shard %s: claim returned epoch %d, not above the observed writer_epoch %d", shard, epoch, mf.WriterEpoch)
	}
	return nil
}

// observeManifest checks a shard manifest against the last one observed:
// nothing that only moves forward may move back.
func (m *model) observeManifest(shard string, cur *shardmeta.Manifest) []string {
	var v []string
	prev := m.manifests[shard]
	m.manifests[shard] = cur
	if cs := m.cursors[shard]; cur.ReplayCursor != 0 && !slices.Contains(cs, cur.ReplayCursor) {
		m.cursors[shard] = append(cs, cur.ReplayCursor)
	}
	for i := 1; i < len(cur.Epochs); i++ {
		if cur.Epochs[i].Epoch <= cur.Epochs[i-1].Epoch {
			v = append(v, fmt.Sprintf("shard %s: manifest epochs not strictly increasing: %+v", shard, cur.Epochs))
		}
	}
	if prev == nil {
		return v
	}
	bad := func(what string, a, b any) {
		v = append(v, fmt.Sprintf("shard %s: manifest %s went from %v to %v", shard, what, a, b))
	}
	if cur.WriterEpoch < prev.WriterEpoch {
		bad("writer_epoch", prev.WriterEpoch, cur.WriterEpoch)
	}
	if cur.CurrentGeneration < prev.CurrentGeneration {
		bad("current_generation", prev.CurrentGeneration, cur.CurrentGeneration)
	}
	if cur.ReplayCursor < prev.ReplayCursor && !m.lagged(shard) {
		bad("replay_cursor", prev.ReplayCursor, cur.ReplayCursor)
	}
	for src, o := range prev.SourceOffsets {
		if n, ok := cur.SourceOffsets[src]; !ok || n < o {
			bad("source_offsets["+src+"]", o, n)
		}
	}
	// A claim drops the epoch records nothing needs (shardmeta.PruneEpochs);
	// a record that stays never changes but for its replay end, set once,
	// and a dropped one never comes back.
	for _, c := range cur.Epochs {
		i := slices.IndexFunc(prev.Epochs, func(e shardmeta.EpochRecord) bool { return e.Epoch == c.Epoch })
		switch {
		case i >= 0:
			if e := prev.Epochs[i]; c.StartGeneration != e.StartGeneration || c.StartPosition != e.StartPosition ||
				(e.ReplayEndGeneration != 0 && c.ReplayEndGeneration != e.ReplayEndGeneration) {
				bad(fmt.Sprintf("epoch record of epoch %d", c.Epoch), e, c)
			}
		case c.Epoch <= prev.WriterEpoch:
			bad(fmt.Sprintf("epoch record of epoch %d (absent, below writer_epoch %d)", c.Epoch, prev.WriterEpoch), nil, c)
		}
	}
	if n := len(cur.Epochs); n > shardmeta.MaxEpochRecords(len(cur.Flushed)) {
		v = append(v, fmt.Sprintf("shard %s: manifest holds %d epoch records with %d generations flushed, more than %d",
			shard, n, len(cur.Flushed), shardmeta.MaxEpochRecords(len(cur.Flushed))))
	}
	return v
}

// lagged reports, once, that the simulation itself set the shard's replay
// cursor back (the lagging-cursor fault).
func (m *model) lagged(shard string) bool {
	l := m.lagFaults[shard]
	delete(m.lagFaults, shard)
	return l
}

// observeBase checks the base against the last one observed: the version,
// the rows (compaction replaces files, never rows), watermarks, observed
// epochs and cutoffs only move forward.
func (m *model) observeBase(cur *publish.Base) []string {
	var v []string
	prev := m.base
	m.base = cur
	if prev == nil {
		return nil
	}
	if cur.Version < prev.Version {
		v = append(v, fmt.Sprintf("base version went from %d to %d", prev.Version, cur.Version))
	}
	// Compaction may replace files, never rows: the base never loses one.
	if rows(cur.Files) < rows(prev.Files) {
		v = append(v, fmt.Sprintf("base lost rows: %d rows in %d files became %d in %d (version %d → %d)",
			rows(prev.Files), len(prev.Files), rows(cur.Files), len(cur.Files), prev.Version, cur.Version))
	}
	if cur.Version == prev.Version && len(cur.Files) != len(prev.Files) {
		v = append(v, fmt.Sprintf("base files changed (%d → %d) without a new version %d", len(prev.Files), len(cur.Files), cur.Version))
	}
	for _, shard := range slices.Sorted(maps.Keys(prev.Shards)) {
		p, c := prev.Shards[shard], cur.Shards[shard]
		if c.Watermark < p.Watermark {
			v = append(v, fmt.Sprintf("shard %s: base watermark went from %d to %d", shard, p.Watermark, c.Watermark))
		}
		if p.ObservedEpoch != nil && (c.ObservedEpoch == nil || *c.ObservedEpoch < *p.ObservedEpoch) {
			v = append(v, fmt.Sprintf("shard %s: observed epoch went from %d to %s", shard, *p.ObservedEpoch, ptr(c.ObservedEpoch)))
		}
		if p.Cutoff != nil && (c.Cutoff == nil || *c.Cutoff < *p.Cutoff) {
			v = append(v, fmt.Sprintf("shard %s: cutoff went from %d to %s", shard, *p.Cutoff, ptr(c.Cutoff)))
		}
	}
	return v
}

func ptr(p *uint64) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}

// observeSnapshot checks one stored snapshot offset: it never goes back,
// and never names an offset that no append reaching the WAL carried.
func (m *model) observeSnapshot(key snapshot.Key, off int64) []string {
	var v []string
	if prev, ok := m.snaps[key]; ok && off < prev {
		v = append(v, fmt.Sprintf("snapshot %s went back from offset %d to %d", key, prev, off))
	}
	if reached, ok := m.reached[key.Source]; m.bgActive[key.Source] == 0 && (!ok || off > reached) {
		v = append(v, fmt.Sprintf("snapshot %s holds offset %d, above every offset that reached a WAL (%d; sent %d)",
			key, off, reached, m.sent[key.Source]))
	}
	m.snaps[key] = off
	return v
}

// copyOf is one row of the base: where an id was found.
type copyOf struct {
	file       string
	shard      string
	generation uint64
	seq, epoch uint64
}

func (c copyOf) String() string {
	return fmt.Sprintf("%s (shard %s, generation %d, _seq %d, _epoch %d)", c.file, c.shard, c.generation, c.seq, c.epoch)
}

// checkBase is the final verdict: every acknowledged id exactly once (of a
// session, whatever its retries; without one, twice at most after a late
// retry), ids of unknown outcome at most once, refused and never-sent ids
// never.
func (m *model) checkBase(base map[string][]copyOf) []string {
	var v []string
	describe := func(id string) string {
		var b strings.Builder
		if r := m.ids[id]; r != nil {
			for _, a := range r.attempts {
				fmt.Fprintf(&b, "\n\t\tsent: %s", a)
			}
		}
		for _, c := range base[id] {
			fmt.Fprintf(&b, "\n\t\tin base: %s", c)
		}
		return b.String()
	}
	for _, id := range slices.Sorted(maps.Keys(m.ids)) {
		r, n := m.ids[id], len(base[id])
		switch st := r.status(); {
		case r.session && st == acked && n != 1:
			v = append(v, fmt.Sprintf("acknowledged id %s of a producer session is in the base %d times%s", id, n, describe(id)))
		case r.committedBeforeRetry && n >= 1 && n <= 2:
			if n == 2 {
				m.retryDuplicates++
			}
		case st == acked && n != 1:
			v = append(v, fmt.Sprintf("acknowledged id %s is in the base %d times%s", id, n, describe(id)))
		case st == unknown && n > 1:
			v = append(v, fmt.Sprintf("id %s of unknown outcome is in the base %d times%s", id, n, describe(id)))
		case st == refused && n != 0:
			v = append(v, fmt.Sprintf("id %s, refused every time it was sent, is in the base %d times%s", id, n, describe(id)))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(base)) {
		if m.ids[id] == nil {
			v = append(v, fmt.Sprintf("id %s is in the base but was never sent%s", id, describe(id)))
		}
	}
	return v
}

func rows(files []shardmeta.BaseFile) int64 {
	var n int64
	for _, f := range files {
		n += f.Rows
	}
	return n
}
