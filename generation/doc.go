// Package generation writes and reads generation files: the immutable
// Parquet files into which a shard's sealed memtables are flushed.
//
// # Lifecycle
//
// The engine seals the active memtable of a shard (generation g), calls
// Write with its rows, and only after Write returns commits g to the shard
// manifest in etcd. Merge jobs later Read the committed generations and
// publish their rows into the base table; once the base watermark covers g,
// the shard owner drops g from its manifest and deletes the file. A file that
// no manifest names (a failed or retried attempt, a crash in the middle of a
// write) is garbage and may be deleted by whoever owns the directory.
//
// # File layout
//
// A generation is a plain Parquet file that pyarrow, DuckDB, Polars or Spark
// read directly (docs/format/generation.md is the versioned spec):
//
//	g00000000000000000042-e00000000000000000007-9f3ac01b.parquet
//	┌────────────────────────────────────────────────────────────────┐
//	│ "PAR1"                                                         │
//	│ row group 0: at most Options.RowGroupRows rows                 │
//	│   ┌────┬─────────────────────────────┬──────┬────────┐         │
//	│   │ id │ user columns, schema order  │ _seq │ _epoch │ chunks  │
//	│   └────┴─────────────────────────────┴──────┴────────┘         │
//	│   each chunk: data pages (v2, CRC32, Snappy/zstd/none)         │
//	│ row group 1 …                                                  │
//	│ split-block bloom filter of id, one per row group              │
//	│ column and offset indexes                                      │
//	│ footer (Thrift FileMetaData): schema, row groups, and the      │
//	│   key-value metadata rollwal.format_version … rollwal.schema,  │
//	│   rollwal.checksum (CRC-32C over the rollwal.* pairs)          │
//	│ footer length (uint32 LE), "PAR1"                              │
//	└────────────────────────────────────────────────────────────────┘
//
// id is a required UTF-8 string; String and JSON columns are strings (JSON
// with the JSON logical type), Int64 is INT64, Int32 INT32, Float64 DOUBLE,
// Float32 FLOAT, Bool BOOLEAN, Binary a BYTE_ARRAY without annotation,
// Timestamp INT64 TIMESTAMP(isAdjustedToUTC=true, MICROS); a list is the
// standard three-level LIST group and a struct a group of its fields in
// declared order (layout.go). Every level is optional when the column, the
// list element or the struct field is nullable; nested.go has the
// repetition and definition levels. _seq and _epoch are required unsigned
// 64-bit integers, DELTA_BINARY_PACKED. Rows keep the order of the Batch.
// The default codec is Snappy produced by s2's fast encoder (see
// fastSnappy).
//
// The leaves of a row group are encoded and compressed on up to
// Options.EncodeWorkers goroutines (GOMAXPROCS by default), each leaf
// whole by one of them, the largest first (parallel.go); the bytes are
// those a single goroutine writes (TestParallelEncodeIsSerialEncode). A
// row group of less than 256 KiB is written on the caller's goroutine.
//
// # Names
//
//	g<generation, 20 digits>-e<epoch, 20 digits>-<attempt, 8 hex>.parquet
//
// Numbers are zero-padded so that a directory listing sorts by generation,
// then epoch. The attempt is random per call of Write, so a retried flush of
// the same generation never overwrites (or even opens) the file of an earlier
// attempt that may still be named by a manifest commit whose outcome was
// unknown. Name and ParseName are the only code that spells or parses names.
//
// # Durability protocol
//
// Write never exposes a partial file under a generation name:
//
//  1. create   dir/.tmp-<name>          (IsTemp reports such names)
//  2. write    the whole Parquet file
//  3. fsync    the file                 data and size durable
//  4. close
//  5. rename   .tmp-<name> → <name>     atomic; the name appears whole
//  6. fsync    dir                      the new entry durable
//
// A crash before step 6 completes leaves at most a temporary file, never a
// generation name (TestCrashBeforeWriteReturnsLeavesNoGeneration crashes at
// every operation in turn); once Write returns, the file survives a crash
// under its final name. On an error Write removes its temporary file, and
// the renamed file too if the directory sync failed, then returns the error:
// the caller retries with a new attempt name.
//
// # Reading and corruption
//
// ReadMeta validates the footer; Read also decodes every row. Both refuse,
// with an error that wraps ErrCorrupt and names the file (a *CorruptError),
// anything that is not exactly a generation of this format: not Parquet,
// truncated, a missing or unparsable rollwal.* key, a checksum mismatch, an
// unknown format version, a row count or column layout that disagrees with
// the footer, a schema that is not the caller's, a name that disagrees with
// the footer, rows outside the footer's seq range or above its epoch. A panic
// inside parquet-go on malformed input is recovered and reported the same
// way. A corrupt generation is never repaired: rows cannot be made up, so the
// caller stops and an operator decides.
//
// Page data carries a CRC-32 and the rollwal.* pairs a checksum; the rest of
// the file (bloom filters, page indexes, Thrift footer, page headers) does
// not, and damage there changes no value Read returns. A reader that lets a
// bloom filter or a statistic decide what to skip must first check
// VerifyIndex against the IndexCRC that Write returned and the caller kept
// outside the file (the base table keeps it in its state).
//
// # Copying
//
// OpenCopy and Copy.Place (copy.go) place a generation as a new file of
// the same schema and codec with another Meta (a merge's base file): the
// bytes before the footer as they are, then the footer with the new
// rollwal.* pairs. Only id, _seq and _epoch are decoded; every page's
// CRC-32 and the offset indexes are checked, and the id bloom filter and
// the _seq statistics and column index are held to the values read. The
// result is the file Write makes of the same rows and Meta, byte for byte
// (TestCopyIsTheReencodedFile). Another schema or codec is ErrNotCopyable.
//
// # Concurrency
//
// Write, ReadMeta and Read are safe for concurrent use. The Data given to
// Write must not change until it returns; Data returned by Read is new memory
// owned by the caller.
//
// The layout, footer keys and names are wire format: changing any of them
// needs a new FormatVersion and a reader for the old one.
package generation
