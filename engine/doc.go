// Package engine is the writer of a table's shards: it takes rows in,
// makes them durable before it acknowledges them, and hands them on as
// committed generation files for the merge to publish.
//
// A Host (NewHost) serves many shards of one table from one process; they
// share one etcd lease, one memory budget and one set of metrics.
// Host.Open claims a Shard: its process becomes the shard's one writer,
// under a new writer epoch, and a writer that lost its claim (a paused or
// partitioned process, a zombie) can no longer commit anything.
// Shard.Append validates a
// batch against the table's schema (package schema), writes it to the
// shard's write-ahead log (package wal) and returns once the log is
// fsynced; the rows wait in memory (package memtable). Shard.Flush, or the
// shard's flusher once the memtable is large or old enough, writes them
// as a Parquet generation file (package generation) and commits it to the
// shard's manifest in etcd (package shardmeta); from then on the log no
// longer needs them. A merge (package publish) puts the committed
// generations into the table's base table, and the shard drops them once
// the base covers them. Package server puts HTTP in front of a Host;
// package client is the producers' side of it.
//
// What an embedder can rely on: an acknowledged row is in the WAL and
// reaches a committed generation, since if this writer dies first the next
// one to claim the shard replays it (on the same data directory, or on any
// machine with the object WAL, WALObject); generations commit strictly in
// order; a retried batch of a producer
// session (Producer) is recognized and not stored again, across flushes and
// restarts; and a writer that has been fenced (ErrFenced) refuses appends
// instead of acknowledging what it can no longer commit.
//
// # Lifecycle of a shard
//
//	Open:   grant a lease; read the WAL's tail read-only (wal.ReadTail);
//	        claim the next writer epoch in etcd (one transaction recording
//	        that tail; its revision is the fencing token); only then open
//	        the WAL for that epoch; load the producer state the manifest
//	        names; replay the exact range (replay_cursor, tail] into the
//	        current generation, restoring rows, source offsets and producer
//	        sequences. When shardmeta.RecentEpochs/2 claims started above
//	        the replay cursor (writers that died before their first flush),
//	        commit the replayed rows before serving, so that the manifest's
//	        epoch records stay bounded (shardmeta.PruneEpochs).
//	Append: validate the whole batch, check the producer session's
//	        sequence (a retry of an acknowledged batch is all duplicates; a
//	        gap is a *SequenceError), drop ids already in the shard's
//	        memtables, write one WAL record tagged (epoch, generation) that
//	        carries the rows, the session and the source offset (a record of
//	        those alone when every row was a duplicate), insert into the
//	        active memtable, and return once the record is covered by a
//	        group fsync.
//	Flush:  seal the active memtable (generation g; new records are tagged
//	        g+1), write generation g as a Parquet file under a name unique
//	        to the attempt, then commit the shard manifest (g added,
//	        current_generation = g+1, replay_cursor = g's last position,
//	        the source offsets, and the producer-state file written for g)
//	        with a transaction guarded by the owner key's ModRevision.
//	        Generations commit strictly in order. After the commit the
//	        offsets are persisted to the snapshot store; a persist that
//	        fails is retried in the background until it lands or is fenced.
//	Close:  stop intake, flush (optional), sync and close the WAL, release
//	        the owner key and the lease so a successor can claim at once.
//
// # Failure policy
//
// A failed WAL write or fsync stops the shard for good (fail-stop): it never
// retries an fsync and never acknowledges what it could not sync. A guarded
// metadata write that fails its guard fences the shard (ErrFenced): nothing
// more is committed and appends are refused. A failed flush keeps the sealed
// memtable and is retried, oldest generation first.
//
// A full disk is not a failure (space.go): the WAL meets it before it
// writes a byte of a record, a flush before anything it writes is
// committed. The shard refuses appends with ErrNoSpace, says "disk full" in
// Status.Degraded, and takes appends again by itself once space is back.
//
// The shards of a host share one memory budget. When it runs low the host
// seals and flushes the largest active memtables (pressure.go), so that no
// shard waits behind others' memtables that are below FlushBytes.
//
// # Concurrency
//
// Append is safe for concurrent use; appenders of one shard are serialized
// only for the short section that assigns WAL positions and inserts into the
// memtable, and then share fsyncs (group commit). One flusher goroutine per
// shard seals and commits generations.
package engine
