// Package wal is the write-ahead log of one shard: a directory of
// segment files holding CRC-framed, optionally compressed records, each
// covering a dense range of positions, made durable by group commit.
//
// # Lifecycle
//
// A writer that has claimed epoch E opens the shard's directory with
// Open(Options{Dir, Epoch: E, ...}). Open scans every segment of every
// epoch, repairs torn tails, syncs what it found, and creates a fresh
// segment for E; it never appends to an existing file. Tail() is then the
// highest position on disk (0 for an empty log) and the writer's first
// Append gets Tail()+1.
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
// split. RemoveThrough deletes segments that a flush has made redundant.
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
// # Concurrency
//
// Append, SyncTo, Replay, RemoveThrough, Tail and Err are safe for
// concurrent use. Append takes a lock only to assign positions and copy
// the framed record into a buffer (compression happens before, in the
// caller's goroutine); the order of concurrent appenders is the order in
// which they take that lock, so callers that need an order serialize
// themselves. A single syncer goroutine writes the buffer to the active
// segment and, when any SyncTo caller waits, issues one fdatasync that
// covers everything written before it started: concurrent SyncTo calls
// share fsyncs (group commit). Appenders block while more than 8 MiB wait
// to be written. Replay must not run over a range that RemoveThrough is
// deleting.
//
// # Durability and failure
//
// SyncTo(pos) returns nil only once every record at or below pos has been
// written and covered by a successful fsync of its segment, and the
// segment's directory entry was synced when it was created. A segment is
// synced before the next one is created, so every segment but the last of
// an epoch is complete on disk.
//
// Failure is fail-stop. When a write or an fsync fails, the WAL enters a
// permanent failed state: an fsync error may already have dropped the
// dirty pages it covered, so retrying it could report data durable that
// is gone. Every waiting and later Append and SyncTo returns an error
// wrapping ErrFailed and the cause (errors.Is(err, syscall.ENOSPC) holds
// for a full disk). The shard must be reopened, usually by a new epoch.
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
// zero-filled region (preallocated, never written) can never parse as a
// record: it is the end of data. These constants are wire format; see
// docs/format/wal.md before changing any.
//
// # Corruption policy
//
// Open reads every segment from the start. At the first bytes that are
// not a valid record (short, wrong epoch, length out of range, or a
// CRC mismatch) it looks at the rest of the file:
//
//   - only zeros, or nothing: the end of data;
//   - bytes with no valid record after them: a torn tail, the remains of
//     a write a crash interrupted. In the last segment of an epoch it is
//     truncated away (and logged); in any other segment it cannot come
//     from a crash, because that segment was synced before the next was
//     created, so Open refuses;
//   - a valid record after them: damage in the middle of the log, which
//     Open refuses.
//
// A record whose CRC verifies but whose fields are invalid, and records
// of one epoch whose positions are not dense and increasing across
// records and segments, are refused too. A refusal is a *CorruptionError
// naming the segment and byte offset; it satisfies
// errors.Is(err, ErrCorruption). Replay checks every CRC again.
package wal
