// Package engine is the shard writer: claim → replay → append → flush →
// commit → close, and a Host that serves many shards of one table.
//
// # Lifecycle of a shard
//
//	Open:   grant a lease; read the WAL's tail read-only (wal.ReadTail);
//	        claim the next writer epoch in etcd (one transaction recording
//	        that tail; its revision is the fencing token); only then open
//	        the WAL for that epoch; load the producer state the manifest
//	        names; replay the exact range (replay_cursor, tail] into the
//	        current generation, restoring rows, source offsets and producer
//	        sequences. When replayFlushClaims claims started above the
//	        replay cursor (writers that died before their first flush),
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
