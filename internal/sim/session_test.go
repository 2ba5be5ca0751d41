package sim

import (
	"errors"
	"fmt"

	"github.com/rollwal/rollwal/engine"
)

// producersPerShard is how many producer sessions each shard has.
const producersPerShard = 3

// producer is one producer session of one shard: an id and its rows
// numbered 0, 1, 2, … across its batches, as the engine's Producer asks.
// Its state belongs to the simulation's goroutine unless busy, when one
// background producer goroutine owns it.
type producer struct {
	id, shard, src string
	// next is the sequence number of the next new batch.
	next    uint64
	batches []*sbatch
	busy    bool
}

// sbatch is one batch of a producer session. The producer sends it again,
// with the same sequence number and rows, until it has a definite answer.
type sbatch struct {
	p   *producer
	seq uint64
	b   *batch
	// acked: an attempt was acknowledged (what the writer said); known:
	// the producer heard it (not when the answer was lost on its way).
	acked, known bool
	attempts     int
}

// newSessionBatch makes p's next batch of n fresh rows.
func (w *world) newSessionBatch(p *producer, n, size int) *sbatch {
	b := w.newBatchFrom(p.shard, n, size, p.src)
	sb := &sbatch{p: p, seq: p.next, b: b}
	b.sess = sb
	p.next += uint64(n)
	p.batches = append(p.batches, sb)
	return sb
}

// ackedThrough is the sequence after the longest run of acknowledged
// batches from the first: the writer must know the producer at least that
// far.
func (p *producer) ackedThrough() uint64 {
	var through uint64
	for _, sb := range p.batches {
		if !sb.acked {
			break
		}
		through = sb.seq + uint64(len(sb.b.rows))
	}
	return through
}

// unresolved are the batches the producer must still send, in order.
func (p *producer) unresolved() []*sbatch {
	var out []*sbatch
	for _, sb := range p.batches {
		if !sb.known {
			out = append(out, sb)
		}
	}
	return out
}

// acknowledged are the batches the producer knows were acknowledged.
func (p *producer) acknowledged() []*sbatch {
	var out []*sbatch
	for _, sb := range p.batches {
		if sb.known {
			out = append(out, sb)
		}
	}
	return out
}

// rewind forgets the batches at the end that were never sent, so that
// their sequence numbers go to the next new batch.
func (p *producer) rewind() {
	for len(p.batches) > 0 && p.batches[len(p.batches)-1].attempts == 0 {
		last := p.batches[len(p.batches)-1]
		p.batches = p.batches[:len(p.batches)-1]
		p.next = last.seq
	}
}

func (sb *sbatch) options() engine.AppendOptions {
	return engine.AppendOptions{Source: sb.b.src, Producer: engine.Producer{ID: sb.p.id, Seq: sb.seq}}
}

func (sb *sbatch) String() string {
	return fmt.Sprintf("%s seq %d..%d", sb.p.id, sb.seq, sb.seq+uint64(len(sb.b.rows))-1)
}

// judgeSession decides what an answer to a session batch means and what
// it breaks, and records it in the batch. The model is strict: a retry of
// an acknowledged batch, at any time, stores nothing; a sequence error is
// expected only while an earlier batch of the producer is unresolved, and
// never names a sequence below what was acknowledged. zombie: the answer
// came from a writer that a later claim superseded, which cannot know
// the producer's later batches (its refusal is still a refusal).
func judgeSession(sb *sbatch, res engine.Result, err error, zombie bool) (outcome, []string) {
	sb.attempts++
	n := len(sb.b.rows)
	through := sb.p.ackedThrough()
	var v []string
	var se *engine.SequenceError
	switch {
	case err == nil:
		if res.Stored+res.Duplicates != n {
			v = append(v, fmt.Sprintf("%s: acknowledged %d stored + %d duplicates of %d rows", sb, res.Stored, res.Duplicates, n))
		}
		if sb.acked && res.Stored > 0 {
			v = append(v, fmt.Sprintf("%s: a retry of an acknowledged batch stored %d of its %d rows again (%d duplicates)", sb, res.Stored, n, res.Duplicates))
		}
		sb.acked, sb.known = true, true
		return acked, v
	case errors.As(err, &se):
		switch {
		case zombie:
		case sb.acked:
			v = append(v, fmt.Sprintf("%s: a retry of an acknowledged batch was refused: %v", sb, err))
		case sb.seq <= through:
			v = append(v, fmt.Sprintf("%s: refused although every earlier batch of the producer is acknowledged (through %d): %v", sb, through, err))
		case se.Expected < through:
			v = append(v, fmt.Sprintf("%s: the writer expects seq %d, below the acknowledged %d: it forgot acknowledged batches: %v", sb, se.Expected, through, err))
		case se.Expected > sb.seq:
			v = append(v, fmt.Sprintf("%s: the writer expects seq %d, inside the batch: %v", sb, se.Expected, err))
		}
		return refused, v
	}
	return classifyAppend(err), v
}

// pickProducer returns one of the shard's producers not owned by a
// background goroutine, or nil.
func (w *world) pickProducer(shard string, pick int, want func(*producer) bool) *producer {
	ps := w.producers[shard]
	for i := range ps {
		p := ps[(pick+i)%len(ps)]
		if !p.busy && (want == nil || want(p)) {
			return p
		}
	}
	return nil
}

// sendSession appends sb with its session to s and records the outcome.
func (w *world) sendSession(s *engine.Shard, sb *sbatch, h *host, isZombie bool) outcome {
	w.st.appends++
	w.st.sessionAppends++
	retry := sb.attempts > 0
	ctx, cancel := w.opCtx()
	res, err := s.AppendWith(ctx, sb.b.rows, sb.options())
	cancel()
	out, vs := judgeSession(sb, res, err, isZombie)
	for _, v := range vs {
		w.violatef("shard %s: %s", sb.p.shard, v)
	}
	a := attempt{step: w.step, shard: sb.p.shard, epoch: s.Epoch(), zombie: isZombie, retry: retry, outcome: out}
	if err != nil {
		a.err = err.Error()
	}
	w.m.record(sb.b, a)
	ids := sb.b.ids()
	w.tracef("%s: append %s (%s..%s, %s@%d) to %s epoch %d%s%s: %s stored=%d dup=%d gen=%d seq=%d..%d",
		sb.p.shard, sb, ids[0], ids[len(ids)-1], sb.b.src.Name, sb.b.src.Offset, h, s.Epoch(),
		map[bool]string{true: " (zombie)", false: ""}[isZombie], map[bool]string{true: " (retry)", false: ""}[retry],
		a.outcomeText(), res.Stored, res.Duplicates, res.Generation, res.FirstSeq, res.LastSeq)
	w.countOutcome(out, err)
	if !isZombie && !errors.Is(err, engine.ErrSequence) {
		w.writerErr(sb.p.shard, "append", err)
	}
	return out
}

// countOutcome adds an append's outcome to the seed's statistics.
func (w *world) countOutcome(out outcome, err error) {
	switch out {
	case acked:
		w.st.acks++
	case unknown:
		w.st.unknowns++
		if errors.Is(err, engine.ErrUnknownOutcome) {
			w.st.durableUnknowns++
		}
	case refused:
		w.st.refusals++
		if errors.Is(err, engine.ErrSequence) {
			w.st.seqRefusals++
		}
	}
}

// appendSession is the append op with a session: the producer sends its
// first unresolved batch again, or (always when none is unresolved, and
// sometimes anyway: a producer that pipelines) a new one. One answer in
// eight is lost on its way, so the producer must send the batch again.
func (w *world) appendSession(o *owned, p *producer, d draw) {
	sb := w.nextSessionBatch(p, d)
	if w.sendSession(o.s, sb, o.host, false) == acked && d.d%8 == 0 {
		sb.known = false
		w.tracef("%s: the answer to %s is lost: the producer will send it again", p.shard, sb)
	}
}

func (w *world) nextSessionBatch(p *producer, d draw) *sbatch {
	if un := p.unresolved(); len(un) > 0 && (d.c>>5)%4 != 0 {
		return un[0]
	}
	return w.newSessionBatch(p, 1+d.c%16, d.d)
}

// retrySession sends again a batch whose outcome the producer does not
// know: any of them, so a later one may go before an earlier one (and be
// refused with the sequence the writer expects).
func (w *world) retrySession(d draw) bool {
	var cands []*sbatch
	for _, shard := range w.shards {
		for _, p := range w.producers[shard] {
			if !p.busy {
				cands = append(cands, p.unresolved()...)
			}
		}
	}
	if len(cands) == 0 {
		return false
	}
	sb := cands[d.b%len(cands)]
	if o := w.ensureOwner(sb.p.shard, d.c); o != nil {
		w.st.retries++
		w.sendSession(o.s, sb, o.host, false)
	}
	return true
}

// retryAcked sends again a batch that was acknowledged, however long ago
// and whatever happened since (flushes, merges, drains, crashes and
// replays, handoffs): the writer must answer it as all duplicates.
func (w *world) retryAcked(d draw) {
	shard := w.shards[d.a%len(w.shards)]
	p := w.pickProducer(shard, d.b, func(p *producer) bool { return len(p.acknowledged()) > 0 })
	if p == nil {
		return
	}
	ack := p.acknowledged()
	sb := ack[d.c%len(ack)]
	o := w.ensureOwner(shard, d.d)
	if o == nil {
		return
	}
	w.st.lateSessionRetries++
	w.sendSession(o.s, sb, o.host, false)
}

// resolveSessions is the producers' last duty before the final check:
// every batch whose outcome they do not know is sent again, in order, to
// the shard's writer until it is acknowledged.
func (w *world) resolveSessions() {
	for _, shard := range w.shards {
		for _, p := range w.producers[shard] {
			for _, sb := range p.unresolved() {
				for try := 0; !sb.known; try++ {
					o := w.owner[shard]
					if try == 3 || o == nil || w.crashed() {
						w.violatef("shard %s: %s still unresolved after %d final attempts", shard, sb, try)
						return
					}
					w.sendSession(o.s, sb, o.host, false)
				}
			}
		}
	}
}
