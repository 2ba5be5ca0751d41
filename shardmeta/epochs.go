package shardmeta

import "fmt"

// Epoch records and what they are kept for.
//
// Every claim appends a record; PruneEpochs, which every claim runs, drops
// the ones nothing reads any more, so the list stays bounded however often
// a shard is claimed. A record r (not the last) is kept while
//
//   - it is among the newest RecentEpochs epochs: the merge coordinator
//     treats an epoch change precisely (replay ranges only) when every epoch
//     since the one it last observed has a record, and conservatively
//     otherwise (publish.provenanceComplete);
//   - a flushed generation was flushed by r's epoch: the coordinator's ID
//     check of that generation reads r's start_position and replay range
//     (publish.inReplayRange), and checks the generation whole without it;
//   - the replay at open needs it. A WAL record of epoch E is judged by the
//     first record of a later epoch, next(E): skipped when next's
//     start_position is at or below the replay cursor (everything E wrote
//     before next's claim ends at or below that start position, so a
//     record reaching past the cursor was written after it, by a zombie),
//     when it begins above next's start position (a zombie's), or when its
//     generation is below next's start_generation (committed by E). Replay
//     reads only records reaching past the cursor. So r may go when a later
//     record that stays starts at or below the replay cursor — every E that
//     r judged is then judged by that one and skipped, as r would have
//     skipped it — or when the next record that stays has r's
//     start_position and start_generation, and judges exactly as r did.
//
// The replay cursor never moves back, so a record dropped stays unneeded.
// Validate accepts any subsequence of a valid list, and CheckTransition lets
// a record go only when epochNeed finds nothing that needs it.

// RecentEpochs is how many of the newest epochs keep their records
// whatever else needs them, so that a merge coordinator that last looked
// at most RecentEpochs claims ago still sees every epoch since.
const RecentEpochs = 16

// PruneEpochs drops the epoch records nothing needs any more (see above)
// and returns how many it dropped. The last record, the writer epoch's,
// always stays.
func (m *Manifest) PruneEpochs() int {
	n := len(m.Epochs)
	if n < 2 {
		return 0
	}
	// Newest first: whether a record may go depends only on the records
	// after it that stay.
	kept := []EpochRecord{m.Epochs[n-1]}
	for i := n - 2; i >= 0; i-- {
		r := m.Epochs[i]
		if m.epochNeedAt(r, kept[len(kept)-1]) != "" {
			kept = append(kept, r)
		}
	}
	for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
		kept[i], kept[j] = kept[j], kept[i]
	}
	m.Epochs = kept
	return n - len(kept)
}

// UncoveredEpochs returns how many records start above the replay cursor:
// claims whose inherited WAL tail no commit has covered yet. They are kept
// for the replay until a commit covers one of them.
func (m *Manifest) UncoveredEpochs() int {
	n := 0
	for _, r := range m.Epochs {
		if r.StartPosition > m.ReplayCursor {
			n++
		}
	}
	return n
}

// epochNeed says why m must hold the record r of an earlier epoch, which
// it does not hold: "" when nothing needs it.
func (m *Manifest) epochNeed(r EpochRecord) string {
	for _, next := range m.Epochs {
		if next.Epoch > r.Epoch {
			return m.epochNeedAt(r, next)
		}
	}
	return fmt.Sprintf("it is the record of writer_epoch %d", m.WriterEpoch)
}

// epochNeedAt says why m needs record r when next is the first record after
// it that m keeps; "" when nothing needs it.
func (m *Manifest) epochNeedAt(r, next EpochRecord) string {
	if r.Epoch > m.WriterEpoch || m.WriterEpoch-r.Epoch < RecentEpochs {
		return fmt.Sprintf("it is one of the newest %d epochs (writer_epoch %d), which the merge coordinator's provenance check reads", RecentEpochs, m.WriterEpoch)
	}
	for _, g := range m.Flushed {
		if g.Epoch == r.Epoch {
			return fmt.Sprintf("flushed generation %d is of its epoch, which the merge coordinator's ID check reads", g.Number)
		}
	}
	if next.StartPosition <= m.ReplayCursor {
		return ""
	}
	if next.StartPosition == r.StartPosition && next.StartGeneration == r.StartGeneration {
		return ""
	}
	return fmt.Sprintf("the replay judges WAL records by it: the next record kept (epoch %d) starts at position %d, above replay_cursor %d, and at another position or generation",
		next.Epoch, next.StartPosition, m.ReplayCursor)
}
