package shardmeta

// CheckTransition reports whether replacing the committed manifest old by
// new keeps everything that must only move forward. Both must be valid
// (Validate). It fails closed, with ErrInvalidTransition, when:
//
//   - writer_epoch, current_generation or replay_cursor decreases;
//   - a source offset decreases, or a source disappears;
//   - a committed generation (number below old's current_generation) is
//     added, changed, or dropped other than by draining a prefix of old's
//     flushed list;
//   - an added generation (number ≥ old's current_generation) carries an
//     epoch other than new's writer_epoch, or starts at or below old's
//     replay_cursor (it would cover WAL positions already covered);
//   - a record of old changes in new, except that its
//     replay_end_generation may be set once (from 0); a record of old's
//     epochs is added; or a record of old leaves while new still needs it
//     (see PruneEpochs for what needs one).
func CheckTransition(old, new *Manifest) error {
	if old == nil || new == nil {
		return transitionf("nil manifest")
	}
	switch {
	case new.WriterEpoch < old.WriterEpoch:
		return transitionf("writer_epoch decreases from %d to %d", old.WriterEpoch, new.WriterEpoch)
	case new.CurrentGeneration < old.CurrentGeneration:
		return transitionf("current_generation decreases from %d to %d", old.CurrentGeneration, new.CurrentGeneration)
	case new.ReplayCursor < old.ReplayCursor:
		return transitionf("replay_cursor decreases from %d to %d", old.ReplayCursor, new.ReplayCursor)
	}
	if err := checkOffsetsTransition(old, new); err != nil {
		return err
	}
	if err := checkFlushedTransition(old, new); err != nil {
		return err
	}
	return checkEpochsTransition(old, new)
}

func checkOffsetsTransition(old, new *Manifest) error {
	for src, o := range old.SourceOffsets {
		n, ok := new.SourceOffsets[src]
		if !ok {
			return transitionf("source_offsets[%q] (%d) disappears", src, o)
		}
		if n < o {
			return transitionf("source_offsets[%q] decreases from %d to %d", src, o, n)
		}
	}
	return nil
}

func checkFlushedTransition(old, new *Manifest) error {
	// The generations new keeps from old must be a suffix of old.Flushed,
	// unchanged: only a prefix is ever drained.
	kept := 0
	for kept < len(new.Flushed) && new.Flushed[kept].Number < old.CurrentGeneration {
		kept++
	}
	if kept > len(old.Flushed) {
		return transitionf("%d generations below old current_generation %d, but old has only %d flushed: committed generations cannot be added",
			kept, old.CurrentGeneration, len(old.Flushed))
	}
	base := len(old.Flushed) - kept
	for i := range kept {
		if o, n := old.Flushed[base+i], new.Flushed[i]; o != n {
			return transitionf("committed generation %d changes or reappears: %+v became %+v", n.Number, o, n)
		}
	}
	for _, g := range new.Flushed[kept:] {
		if g.Epoch != new.WriterEpoch {
			return transitionf("added generation %d has epoch %d, want writer_epoch %d", g.Number, g.Epoch, new.WriterEpoch)
		}
		if g.SeqFirst <= old.ReplayCursor {
			return transitionf("added generation %d starts at seq %d, not above old replay_cursor %d",
				g.Number, g.SeqFirst, old.ReplayCursor)
		}
	}
	return nil
}

func checkEpochsTransition(old, new *Manifest) error {
	// Both lists ascend: walk them together. new keeps some of old's
	// records, in order, and may add records of later epochs.
	j := 0
	for _, o := range old.Epochs {
		if j == len(new.Epochs) || new.Epochs[j].Epoch > o.Epoch {
			if why := new.epochNeed(o); why != "" {
				return transitionf("the record of epoch %d is dropped, but %s", o.Epoch, why)
			}
			continue
		}
		n := new.Epochs[j]
		if n.Epoch < o.Epoch {
			return transitionf("a record of epoch %d is added, not above old writer_epoch %d", n.Epoch, old.WriterEpoch)
		}
		if o.ReplayEndGeneration == 0 {
			n.ReplayEndGeneration = 0 // may be set once
		}
		if o != n {
			return transitionf("the record of epoch %d changes from %+v to %+v", o.Epoch, o, new.Epochs[j])
		}
		j++
	}
	for _, n := range new.Epochs[j:] {
		if n.Epoch <= old.WriterEpoch {
			return transitionf("a record of epoch %d is added, not above old writer_epoch %d", n.Epoch, old.WriterEpoch)
		}
	}
	return nil
}
