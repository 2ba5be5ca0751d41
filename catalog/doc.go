// Package catalog is an Apache Iceberg catalog whose record of each table
// is one etcd key, so that a table commit can be part of a larger etcd
// transaction: the merge publishes base files and raises the shard
// watermarks in the same transaction that swaps the table's metadata.
//
// # Keys
//
//	/<prefix>/namespaces/<ns>        {"<property>":"<value>",...}
//	/<prefix>/tables/<ns>/<table>    {"format":1,"metadata_location":"…",
//	                                  "previous_metadata_location":"…"}
//
// Namespaces have one level. The table record's format is wire format
// (see docs/format/iceberg.md); it is decoded strictly.
//
// # A commit
//
//	PrepareCommit / PrepareAppend              (no etcd write)
//	  read record + ModRevision R, load metadata
//	  check requirements ─────────────────────── stale: ErrConflict
//	  [append] write manifest, manifest list     (durable, attempt-unique names)
//	  write <location>/metadata/<v+1>-<uuid>.metadata.json (durable)
//	  → PreparedCommit{Cmps: ModRevision(key) == R, Ops: Put(key, new record)}
//	Apply, or the caller's own transaction:
//	  txn If Cmps [+ caller's] Then Ops [+ caller's]
//	  false guard ───────────────────────────── ErrConflict (nothing changed)
//	  lost answer ── ReadBack: Committed | NotApplied | Superseded
//
// Files written for an attempt that never commits are garbage that no
// record names. ReadBack decides an unknown outcome from the key alone
// (our record byte for byte; otherwise, if the key moved, whether the
// current metadata's log names our file): the whole transaction that
// carried the ops applied exactly when the outcome is Committed.
//
// The Catalog interface's CommitTable is PrepareCommit then Apply. Its
// conflicts match table.ErrCommitFailed, which iceberg-go's
// Transaction.Commit would retry by replaying the snapshot on the new head;
// base tables set commit.retry.num-retries=0 so that a stale handle is
// refused instead (the merge replans, it never replays).
//
// # Files
//
// Every file goes through a vfs.FS (fileIO): written under a temporary
// name and renamed into place; the files of one create or commit are then
// synced together with their directory (one round of syncs the disk
// commits at once), when its metadata file is written — before any
// transaction can name them — so a record in etcd never names a file a
// crash can lose (a crash before leaves files no record names). A base
// commit's caller may add a sidecar file of its own to that round
// (BaseCommit.Sidecar: the readers' manifest, renamed into place after the
// transaction). Locations are then absolute local paths.
//
// With Options.Store the files live in an object store instead (objectIO),
// at locations that are the store's URL and an object name
// (StoreLocation): each is created whole, never over an existing name,
// and is durable once created, so the same rule holds without a sync.
//
// # Base tables
//
// CreateBaseTable makes the Iceberg table of a rollwal base table:
// BaseSchema (stable field ids: id 1, _seq 2, _epoch 3, user columns from
// 4), unpartitioned, sorted by _seq, with a name mapping because base
// files carry no Parquet field ids. PrepareAppend registers existing base
// files without reading them, with their _seq range as bounds, and
// Summary/ParseSummary record per shard the generations and writer epochs
// a snapshot published.
//
// A table's schema has versions: BaseSchemaVersion is version v with the
// columns' own field ids and schema id v-1, and a BaseCommit carrying a
// newer version than the table's adds that schema with those ids, makes it
// current and rewrites the name mapping (current names and their aliases)
// in the same commit, before its snapshot.
//
// An Etcd is safe for concurrent use; commits to one table are serialised
// by the guard, not by a lock.
package catalog
