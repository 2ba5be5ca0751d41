package engine

import (
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rollwal/rollwal/errs"
)

// Producer sessions make retries idempotent at any time, learnt from
// Kafka's idempotent producer: a producer names itself (ID) and numbers its
// rows in a shard 0, 1, 2, … without gaps across its batches; a batch
// carries the sequence number of its first row (Seq). Per producer and
// shard the writer keeps the next expected sequence:
//
//   - a batch at the next expected sequence is stored and acknowledged;
//   - a batch wholly below it was acknowledged before (a retry, at any
//     later time: after a flush, a merge, a crash and replay, a failover):
//     it is answered as all duplicates and nothing is stored;
//   - a batch above it, or straddling it, is refused with a *SequenceError
//     naming the expected sequence, and nothing is stored: a later batch can
//     never slip ahead of an earlier one that failed.
//
// The state travels in WAL records, is restored on replay, and is written
// with each committed generation to a producer-state file the manifest
// names, so every later writer of the shard knows it. It is bounded: a
// producer idle longer than Options.ProducerExpiry is forgotten, and a
// shard holds at most Options.MaxProducers.

// Producer identifies the session an append belongs to. The zero value is
// no session: rows are deduplicated by id only while an earlier copy is
// still in a memtable.
type Producer struct {
	// ID is 1–128 bytes of [A-Za-z0-9._:-].
	ID string
	// Seq is the sequence number of the batch's first row.
	Seq uint64
}

// AppendOptions are what an append carries besides its rows.
type AppendOptions struct {
	Source   Source
	Producer Producer
}

const (
	// DefaultProducerExpiry is how long a producer's state outlives its
	// last append.
	DefaultProducerExpiry = 7 * 24 * time.Hour
	// DefaultMaxProducers bounds the producers a shard tracks.
	DefaultMaxProducers = 10000
	// MaxProducerIDBytes bounds a producer id.
	MaxProducerIDBytes = 128
	// MaxSourceBytes bounds a source name.
	MaxSourceBytes = 256
	// DefaultMaxSources bounds the sources a shard tracks offsets for.
	DefaultMaxSources = 1024
	// DefaultMaxUnmergedGenerations bounds the generations a manifest
	// holds before merges drain them: at most 405 KB of manifest with their
	// epoch records. Options.Validate refuses limits whose manifest could
	// pass MaxManifestBytes.
	DefaultMaxUnmergedGenerations = 1000
)

var (
	// ErrSequence: a producer's batch is not at its next expected sequence;
	// the error is a *SequenceError.
	ErrSequence = errs.New(errs.Conflict, "engine: producer sequence")
	// ErrTooManyProducers: the shard tracks MaxProducers producers and a
	// new one appeared.
	ErrTooManyProducers = errs.New(errs.LimitReached, "engine: too many producers")
	// ErrInvalidAppend: the producer id, sequence or source is malformed
	// or over its bound; nothing was written.
	ErrInvalidAppend = errs.New(errs.InvalidInput, "engine: invalid append")
)

// SequenceError says why a producer's batch was refused. Nothing of it was
// written.
type SequenceError struct {
	Shard    string
	Producer string
	// Seq and Count are the refused batch's first sequence and row count.
	Seq   uint64
	Count int
	// Expected is the producer's next expected sequence.
	Expected uint64
	// Unknown: the shard has no state for the producer (never seen, or
	// expired after its idle time), so it expects 0.
	Unknown bool
}

func (e *SequenceError) Error() string {
	switch {
	case e.Unknown:
		return fmt.Sprintf("engine: shard %s: producer %q is unknown to the shard (never seen, or expired); its batch at seq %d is refused: a session starts at seq 0",
			e.Shard, e.Producer, e.Seq)
	case e.Seq > e.Expected:
		return fmt.Sprintf("engine: shard %s: producer %q sent seq %d but the next expected is %d: an earlier batch is missing; send it first",
			e.Shard, e.Producer, e.Seq, e.Expected)
	default:
		return fmt.Sprintf("engine: shard %s: producer %q: batch of %d rows at seq %d overlaps the acknowledged sequence below %d without matching it",
			e.Shard, e.Producer, e.Count, e.Seq, e.Expected)
	}
}

// Is makes errors.Is(err, ErrSequence) and errors.Is(err, errs.Conflict)
// hold.
func (e *SequenceError) Is(target error) bool {
	return target == ErrSequence || target == errs.Conflict
}

// ValidateProducerID checks a producer id: 1–128 bytes of [A-Za-z0-9._:-].
func ValidateProducerID(id string) error {
	if id == "" || len(id) > MaxProducerIDBytes {
		return fmt.Errorf("%w: producer id of %d bytes, want 1–%d", ErrInvalidAppend, len(id), MaxProducerIDBytes)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return fmt.Errorf("%w: producer id %q: byte %d (%q) is not one of [A-Za-z0-9._:-]", ErrInvalidAppend, id, i, c)
		}
	}
	return nil
}

// MaxSourceOffset is the largest source offset an append may carry: far
// beyond any real log, and far from overflowing an int64 when a producer
// adds a batch's rows to it. A source keeps the largest offset it was
// sent, so an offset at the top of int64 would pin it for good.
const MaxSourceOffset = 1<<62 - 1

// ValidateSource checks a source: a name of at most MaxSourceBytes bytes
// of valid UTF-8 without control characters (C0, DEL and C1), and an offset
// in 0..MaxSourceOffset. The name becomes a key of the shard manifest's
// source_offsets and of the snapshot store (which takes every name this
// accepts): invalid UTF-8 would be rewritten to U+FFFD there, so that two
// names could become one key, and control characters are no key part.
func ValidateSource(src Source) error {
	if len(src.Name) > MaxSourceBytes {
		return fmt.Errorf("%w: source name of %d bytes, the limit is %d", ErrInvalidAppend, len(src.Name), MaxSourceBytes)
	}
	if err := checkSourceName(src.Name); err != nil {
		return fmt.Errorf("%w: source name %q: %v", ErrInvalidAppend, src.Name, err)
	}
	if src.Offset < 0 || src.Offset > MaxSourceOffset {
		return fmt.Errorf("%w: source %q: offset %d outside 0..%d", ErrInvalidAppend, src.Name, src.Offset, int64(MaxSourceOffset))
	}
	return nil
}

// checkSourceName names the first byte of name that is not valid UTF-8 or
// starts a control character.
func checkSourceName(name string) error {
	for i := 0; i < len(name); {
		r, n := utf8.DecodeRuneInString(name[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return fmt.Errorf("byte %d is not valid UTF-8", i)
		case unicode.IsControl(r):
			return fmt.Errorf("control character %U at byte %d", r, i)
		}
		i += n
	}
	return nil
}
