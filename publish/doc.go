// Package publish merges the shards' flushed generations into a table's base
// table, the one table readers query, so that every acknowledged row is in
// it exactly once.
//
// The base table is an Apache Iceberg table at <data>/<table>/base/
// (Parquet files under data/, Iceberg metadata under metadata/, readers'
// manifests under _manifest/; with Options.Store the same under an object
// prefix) whose catalog of record is etcd (package catalog). A Coordinator
// (New) is the table's one merge job: it holds the table's merge lock, and
// each RunOnce publishes what the writers (package engine) committed since
// the last pass. It plans from the shards' manifests (package shardmeta),
// writes the new rows as base files, and commits them in one etcd
// transaction that also raises each shard's watermark, the last generation
// merged, so that a commit whose answer was lost, a crash between passes or
// a coordinator that lost its lock never publishes a generation twice. The writers then
// drop the generations the watermark covers.
//
// A row can still come twice, and the merge must drop the second copy:
// a writer restart can replay a WAL tail whose rows were already published
// into new generation numbers. The planner knows from each shard's epochs
// which generations a replay can have made, and only those are checked
// against the ids already in the base (the ID check, below), so the check
// costs what the replayed tail costs, not what the base holds.
//
// Readers need none of this: after each commit the coordinator writes a
// readers' manifest naming the Parquet files of the new version, which any
// Parquet reader opens (LatestReaderManifest reads it in Go,
// LatestStoreReaderManifest for a base in a store); Iceberg readers use the
// metadata file it names, or the read-only REST catalog (package
// catalog/rest). LoadBase reads the committed base from etcd without
// taking the lock.
//
// # Roles and keys
//
// One Coordinator per table holds base/lock: a put-if-absent transaction
// binds the key to the coordinator's own lease; a second coordinator
// watches the key for its DELETE. The lock's ModRevision guards every
// write the coordinator makes to base/state (shardmeta.BaseState: version,
// and per shard {watermark, observed_epoch, cutoff}) and to the Iceberg
// table's record, which changes only in the transactions that write
// base/state. The
// coordinator reads shard manifests and never writes them: the shard owner
// drains generations at or below the watermark on its next commit, and only
// then deletes their files.
//
// # One pass: Plan → Stage → Commit → readers' manifest
//
//	Plan    read the table's current schema record (version V: the pass
//	        publishes in V), base/state (revision R) and every shard manifest
//	        (writer epoch e, flushed F, current generation c); per shard:
//	          malformed state, observed epoch without cutoff, o > e → fail
//	            closed (ErrInvalidState naming the shard), nothing written
//	          o absent (new or legacy state) → k = max(k, max F, c), o = e
//	          o < e, provenance for every epoch in (o, e] → o = e, k kept:
//	            only replay ranges are checked (precise)
//	          o < e, provenance missing → k = max(k, max F, c), o = e
//	          o == e → k kept: steady state stays lookup-free
//	        persist {o, k}: Txn If ModRev(lock)=L ∧ ModRev(state)=R Then put
//	        plan = flushed generations above the watermark, ascending; each
//	          ID-check if g <= k, or g in [start_generation,
//	          replay_end_generation] of an epoch, or g (flushed by epoch x)
//	          starts at a WAL position <= the tail x inherited at its claim
//	          (replayed rows keep their positions; new rows get higher ones)
//	Stage   read each generation (the local file, or with Options.Store the
//	        object layout.GenerationKey(table, shard, file), fetched in 8 MiB
//	        ranged reads; missing or unreadable: the pass fails naming it)
//	        with the schema in its footer and convert
//	        its rows to V by field id (a generation newer than V:
//	        ErrSchemaMoved, replan); drop ids seen earlier in the pass; for
//	        ID-check generations drop ids already in the base (see below);
//	        write the rest as a new base file (generation.Write: temp,
//	        fsync, rename, dir fsync; bloom filter on id; with
//	        Options.Store written in memory and uploaded, If-None-Match,
//	        as <table>/base/data/<shard>/<name>) recording its
//	        shard and position range in the state; stop at a whole
//	        generation once MemoryBudget is used (a copied one counts
//	        its file size).
//	        A generation not newer than V whose footer schema is V's
//	        columns (schema.Same) and whose chunks are in the base codec
//	        is copied instead (copy.go, generation.OpenCopy): only id,
//	        _seq and _epoch are decoded; if every id is new to the pass
//	        and, for an ID-check generation, the ID check finds none of
//	        them in the base, its column chunks are placed byte for byte under a
//	        new footer (the rollwal.* pairs a base file gets; the same
//	        protocol as Write), after every page's CRC-32 and the offset
//	        indexes are checked, and the id bloom filter and _seq
//	        statistics and column index are held to the values read.
//	        The file is the one decoding and re-encoding would write, up
//	        to the footer's created time; any other generation, or one
//	        with a repeated id, takes the decode path (from the same
//	        open file or fetched object, with the ID check's answer)
//	Commit  check every staged generation is still in its shard manifest
//	        as planned (else ErrBaseMoved: replan); write the Iceberg
//	        metadata (V as the current schema when the table is behind it,
//	        append snapshot of the new files, summary with the
//	        generations and epochs, expiry; attempt-unique names) and the
//	        new version's readers' manifest under a temporary name, synced
//	        in one round — prepared while base/state is read, and dropped
//	        (left to orphan removal) when the state is no longer the plan's;
//	        one Txn If ModRev(lock)=L ∧ ModRev(state)=R' ∧ ModRev(table
//	        record)=T Then put state with version+1 and the raised
//	        watermarks, put the record naming the new metadata; a part
//	        at or below the watermark is a no-op, a part straddling it is
//	        ErrStalePrefix; a lost response is resolved by reading back
//	        (exact bytes → committed; unchanged → ErrNotApplied; read fails
//	        → ErrUnknownOutcome), never by a blind retry
//	then    rename it to _manifest/<version %020d>.json (files relative to
//	        the base dir, row counts) and sync the directory; RunOnce
//	        repairs a missing one first
//
// A revoked lease deletes the lock, so the guard fails (ErrLockLost) and
// nothing lands; a successor's New removes the files no live snapshot
// names (RemoveOrphans). RunOnce loops Plan/Stage/Commit until nothing is
// left, then compacts small files (Compact) and, every SweepEvery commits,
// removes orphans. The Iceberg side is docs/format/iceberg.md.
//
// # The ID check, bounded by the replayed tail
//
// A replay keeps a row's WAL position (_seq), so the earlier copy of a
// replayed row, if any, is in a base file of the same shard whose position
// range covers it. The check of a generation therefore opens only the base
// files of its shard whose [seq_first, seq_last] meets the span of the
// generation's positions (base files from before these fields existed are
// always opened); inside them it skips row groups whose _seq statistics
// miss the span, loads each remaining row group's id bloom filter once,
// and confirms candidates by streaming the id column from the first page
// whose _seq range meets the span. Its cost follows the replayed tail, not
// the size of the base (BenchmarkMerge). It relies on the contract that ids
// are unique per table: a producer that sends one id twice into different
// generations gets two rows (the writer dedupes only within its
// memtables).
//
// Why epoch changes: replay happens only when a writer opens, and every
// open claims a new epoch; extending the cutoff to the active generation c
// protects a plan made between the claim and the replay's flush. The
// writer's own source-side exclusion is the first defence; this cutoff is
// the second and holds on its own (engine.Options.DisableSourceExclusion).
//
// The format of the base table is docs/format/base.md.
package publish
