// Package wal is the write-ahead log of one shard: a directory of
// segment files holding CRC-framed, optionally compressed records, each
// covering a dense range of positions, made durable by group commit.
//
// An ObjectWAL (OpenObjects) is the same log on an object store (package
// objstore), for a shard whose successor may run on another machine: each
// group commit is one object of the epoch's records, created whole under
// a name that says its epoch and positions, so nothing is ever appended to
// or cut. Its methods mean what WAL's do; the rest of this documentation
// is about segment files (object.go has the object names and fencing).
//
// # Lifecycle
//
// A writer that has claimed epoch E opens the shard's directory with
// Open(Options{Dir, Epoch: E, ...}). Open scans every segment of every
// epoch (sealed ones by their headers), repairs a torn tail of E's own,
// syncs what it found, and creates a fresh segment for E; it never
// appends to an existing segment, nor modifies another epoch's (it does
// delete recycling files, and spare files beyond Options.Spares: see
// Spares). Tail() is
// then the highest position Open found (0 for an empty log) and the
// writer's first Append gets Tail()+1.
//
//	w, err := wal.Open(opts)      // scan, repair, new segment
//	w.Replay(cursor, w.Tail(), fn) // re-apply what a flush has not covered
//	first, err := w.Append(gen, n, payload)
//	err = w.SyncTo(first + uint64(n) - 1) // durable: acknowledge now
//	...
//	err = w.RemoveThrough(cursor) // after a flush committed up to cursor
//	err = w.Close()
//
// Positions start at 1 and are assigned densely by Append; a record
// covers [FirstPos, FirstPos+Count). Segments roll when the next record
// would take the active one past Options.SegmentSize; a record is never
// split. RemoveThrough deletes segments that a flush has made redundant,
// or keeps them as spares for later segments to be written over.
//
// # Epochs and zombies
//
// Segment files are named <epoch>-<index>.wal with zero-padded numbers
// (20 and 6 digits), so each file has one writer epoch and writers of
// different epochs never share a file. A writer that lost its claim (a
// zombie) may keep appending to its own files; the new writer started at
// the tail it saw, so the two epochs' positions can overlap. Open keeps
// every epoch's records, Replay returns them interleaved by position (on
// a tie, the older epoch first) and the engine decides which to skip.
// Open refuses a directory holding a newer epoch than its own
// (ErrNewerEpoch).
//
// Only epoch E writes to E's files, so a writer modifies no other epoch's
// file: a zombie may be in the middle of writing to its last segment, and
// cutting that record would leave a hole of zeros once the zombie writes
// on at its own file offset. Open reads another epoch's last segment up to
// the first bytes that are not a whole record, and leaves the rest alone
// (see Corruption policy). Since the zombie may append, or start new
// segments, after Open, Replay reads other epochs' segments as they are on
// disk when it runs and returns the records added since too; Tail() still
// counts only what Open found. RemoveThrough deletes another epoch's last
// segment (as Open found it) only if what it holds on disk then is at or
// below the cursor. Records a zombie writes after the new epoch's claim are
// never acknowledged (the zombie's lease is gone), so no replay of the new
// epoch's range needs them; the WAL returns them like any other record and
// leaves skipping them to the engine.
//
// # Spares
//
// Writing a segment costs more than its records: each step of a new file
// is zero-filled ahead of them (see Durability and failure), so every byte
// is written twice. So RemoveThrough renames a drained segment of this
// epoch, if at least half full, to a spare, <epoch>-<index>.spare (keeping
// at most Options.Spares, default 2), and a roll writes the next segment
// over a spare instead of creating one: its blocks and its size are on
// disk already, so appends write no zeros and commit no size change.
//
// A spare keeps its old records until they are overwritten, so a segment
// written over one holds them after its own. The roll renames the spare to
// <epoch>-<index>.recycling and syncs the directory, writes the segment's
// first records over it and syncs them, and only then renames it to the
// segment's name (directory synced again). So a segment's first record is
// always its own, and a reader knows the spare's rest by itself, with no
// other file: a whole record of the segment's epoch wholly below its first
// record's position (the spare was drained through a cursor below every
// position written since), or of an older epoch (the spare was another
// epoch's), is the end of data like zeros (see Corruption policy). Sealing
// a segment written over a spare, and a clean Close of one, cut it to its
// records, so that only an epoch's last segment, after a crash, holds such
// a rest. A crash before the second rename leaves a .recycling file, which
// holds nothing acknowledged and which Open deletes. Open keeps the spares
// it finds, of any epoch up to its own, to write over; a writer of another
// epoch may take the same spare, and the rename decides which one does.
// Builds without spares refuse a directory holding any: see
// docs/format/wal.md for a downgrade.
//
// # Concurrency
//
// Append, SyncTo, Replay, RemoveThrough, Tail and Err are safe for
// concurrent use. Append takes a lock only to assign positions and copy
// the framed record into a buffer (compression happens before, in the
// caller's goroutine); the order of concurrent appenders is the order in
// which they take that lock, so callers that need an order serialize
// themselves. Records are written and synced in rounds, one at a time:
// each takes every record in the buffer, writes it to the active segment
// and, when any SyncTo caller waits, issues one fdatasync that covers
// everything written before it started. While the WAL has a lone writer
// (the last round was waited for by one SyncTo caller), a caller that
// finds no round running runs one itself, on its own goroutine, and pays
// no hand-off; appends then wake the syncer only once 256 KiB are
// buffered. Once a round was waited for by more than one caller, the
// single syncer goroutine runs every round, each append waking it to write
// behind: concurrent SyncTo calls share fsyncs (group commit). Appenders
// block while more than 8 MiB wait to be written. The metric
// writer_wal_rounds_total counts rounds by who ran them. Replay must not
// run over a range that RemoveThrough is deleting.
//
// # Durability and failure
//
// SyncTo(pos) returns nil only once every record at or below pos has been
// written and covered by a successful fsync of its segment, and the
// segment's directory entry was synced when it was created (or, written
// over a spare, when it took its name). A segment is synced before the
// next one is created, so every segment but the last of an epoch is
// complete on disk.
//
// Failure is fail-stop. When a write or an fsync fails, the WAL enters a
// permanent failed state: an fsync error may already have dropped the
// dirty pages it covered, so retrying it could report data durable that
// is gone. Every waiting and later Append and SyncTo returns an error
// wrapping ErrFailed and the cause. The shard must be reopened, usually by
// a new epoch.
//
// A full disk before anything is written is not a failure. The syncer
// reserves each segment's space in steps ahead of the write position
// (Options.Preallocate), so a full disk shows when it creates a segment or
// reserves the next step, or as a write that wrote nothing; the files are
// then as they were, but for zeros past the records, which are the end of
// data. The WAL keeps the records it could not write, syncs what it wrote
// before, refuses Append and answers SyncTo of positions not yet durable
// with ErrNoSpace (errors.Is(err, syscall.ENOSPC) holds), and tries again,
// 10 ms to 1 s apart, until the records are written at the positions they
// were given; then it takes appends again. Close gives up waiting: a full
// disk at Close fails the WAL. A failed fsync is ErrFailed whatever its
// cause, ENOSPC included.
//
// By default a step is reserved by writing it with zeros (ZeroFill): a
// new segment's first step is synced with the segment, and the syncer
// fills and syncs the next step between rounds, once less than half of the
// current one is left. Records are written at the end of data, inside
// space whose size is already durable, so the fsync that acknowledges them
// flushes data only. Fallocate reserves without writing, and every fsync
// after an append then also commits the file's new size.
//
// # Format
//
// A segment is a sequence of records and nothing else. A record is a
// 44-byte little-endian header and its payload:
//
//	 0      4      8      12           20           28           36     40     44
//	+------+------+------+------------+------------+------------+------+------+---------+
//	|length| crc  |flags |   epoch    | generation | first pos  |count |rawlen| payload |
//	| u32  | u32  | u32  |    u64     |    u64     |    u64     | u32  | u32  | length B|
//	+------+------+------+------------+------------+------------+------+------+---------+
//
// length is the stored payload size; crc is CRC-32C (Castagnoli) over the
// length word, bytes 8..44 and the payload; the low byte of flags is the
// codec (0 none, 1 s2 block, 2 zstd frame; other bits zero); rawlen is the
// decoded payload size. Both sizes are at most MaxPayloadSize. A record's
// epoch must equal its segment's, and epochs are at least 1, so a
// zero-filled region (reserved, never written) can never parse as a
// record: it is the end of data. A segment's file may run past its last
// record by a step and a half of zeros (the rest of one step and the next,
// filled ahead), or to SegmentSize when a step covers the segment; every
// reader ends the data at the first all-zero header, Replay goes on to
// the segment after it, and a segment rolls by the bytes of its records,
// not by its file size. An epoch's last segment may also run on with the
// older records of the spare it was written over (see Spares). These
// constants are wire format; see docs/format/wal.md before changing any.
//
// # Corruption policy
//
// Open reads each epoch's last segment from the start, record by record
// with every CRC. A sealed segment (any other: synced before the next was
// created, never written again) it walks by its headers, checking their
// fields, the positions and its last record's CRC, but not every
// payload's CRC, which Replay checks (and wal.Scan, `writer wal verify`);
// if anything in that walk is amiss, it reads the segment in full as
// below, so damage is judged the same in every segment. At the first
// bytes that are not a valid record (short, wrong epoch, length out of
// range, or a CRC mismatch), or at a record older than the segment's first
// (of its epoch, wholly below the first record's position), it looks at
// the rest of the file, passing over older records, which are never "a
// valid record after" damage:
//
//   - only zeros, or nothing: the end of data (the reserved rest of the
//     segment);
//   - older records and no record of the segment's own after them: the
//     rest of the spare the segment was written over (see Spares), perhaps
//     after a record a crash tore, the end of data. In the last segment of
//     the opening epoch it is cut away (and logged); in the last segment of
//     another epoch it is left as it is. In any other segment it is
//     corruption: sealing cut it;
//   - bytes with no valid record after them: a torn tail, the remains of
//     a write a crash interrupted, or a write a zombie is still making,
//     whether zeros follow it (a record torn inside a zero-filled step) or
//     not. In the last segment of the opening epoch it is truncated away,
//     with the zeros after it (and logged): that epoch reopens only after
//     a crash of its own. In the last segment of another epoch it is the
//     end of that segment's data for now: the file is left as it is and
//     Open logs it. In any other segment it cannot come from a crash or a
//     zombie, because that segment was synced before the next was
//     created, so Open refuses;
//   - at least a header's worth (44 bytes) of zeros, then a valid record
//     somewhere after them: a hole, which an older build left when it
//     truncated a zombie's torn tail and the zombie wrote on. In the last
//     segment of another epoch the hole ends that segment's data: Open
//     logs a warning naming the segment and offset, leaves the file as it
//     is, and neither Open nor Replay returns the records after the hole
//     (a zombie wrote them after a newer epoch's claim, so no replay needs
//     them). Anywhere else Open refuses;
//   - any other bytes with a valid record after them: damage in the
//     middle of the log, which Open refuses.
//
// A record whose CRC verifies but whose fields are invalid, and records
// of one epoch whose positions are not dense and increasing across
// records and segments, are refused too. A refusal is a *CorruptionError
// naming the segment and byte offset; it satisfies
// errors.Is(err, ErrCorruption). Replay checks every CRC, and reports
// damage to what Open found the same way: a damaged payload in a sealed
// segment is refused when Replay reads it, not by Open. Past what Open
// found in another epoch's last segment, and in segments another epoch
// started since Open, Replay returns records while they are whole and continue the epoch's
// positions, and stops reading that epoch at the first bytes that do not:
// those bytes are a zombie's, not this writer's to judge; the next Open
// judges them.
package wal
