// Package snapshot stores snapshot offsets — per-key resume points into an
// upstream source — so that a zombie writer can never move one backwards.
//
// A writer that flushed a generation covering source offset N persists
// (key, N, state). After a crash or a failover, the next owner of the key
// resumes from the stored snapshot. The danger is a writer that lost
// ownership but keeps running (a zombie): if its late flush of an older
// offset overwrote the new owner's, the next recovery would resume from the
// past (kafka-flow issue #732). The store refuses that write.
//
// # The fence
//
// The offset itself is the fencing token: Persist(key, s) lands only if the
// key is absent or its stored offset is <= s.Offset, and does so atomically
// with that comparison. A refusal changes nothing and returns a
// *ConflictError carrying the stored offset, read in the same atomic step;
// the caller is behind and must recover from the stored snapshot.
//
//	stored   Persist(o)      result
//	absent   any o           lands
//	  10     o = 12          lands (stored 12)
//	  10     o = 10          lands, replaces value and metadata (a retry of
//	                         one's own write must not fence oneself)
//	  10     o =  7          *ConflictError{Stored: 10, Attempted: 7}
//
// 0 is an offset like any other; an absent key is absent, never "offset 0".
// Why the offset and not the writer's epoch, why <= and not <, and what the
// fence does not cover are in docs/snapshot-fencing.md.
//
// # Outcomes
//
// Persist returns nil (landed), a *ConflictError (ErrConflict: refused,
// nothing changed), ErrUnknownOutcome (sent, no answer: it may have landed,
// or may land later), or another error (nothing was sent, or the request
// was refused before it ran). An unknown outcome is never "not applied":
// persist the same offset again; the equal-offset rule makes that retry
// succeed whether or not the first attempt landed. Do not commit anything
// upstream on an unknown outcome.
//
// # Backends
//
// Both backends pass one conformance suite (conformance_test.go).
//
// Etcd (NewEtcd) is the embedded default. One key per snapshot, a JSON
// record as its value; Persist reads the key, compares offsets, and writes
// in a transaction guarded by the ModRevision it read, re-comparing on a
// lost race. A TTL binds every write to a fresh lease; the replaced
// version's lease is revoked, so leases do not accumulate.
//
// Cassandra (NewCassandra) keeps one single-row partition per key:
//
//	CREATE TABLE <ks>.<table> (
//	    table_name text, shard text, source text,     -- the Key
//	    "offset" bigint, value blob,
//	    metadata frozen<map<text, text>>,
//	    PRIMARY KEY ((table_name, shard, source))     -- one Paxos instance per key
//	) WITH default_time_to_live = 0
//
// Every write is a lightweight transaction (LWT). Persist runs at most
// three rounds of
//
//	advance  UPDATE … USING TTL t SET offset, value, metadata … IF "offset" <= o
//	claim    UPDATE … USING TTL t SET offset, value, metadata … IF "offset" = null
//
// The advance lands on a present row whose offset is at most o, or refuses
// with the stored offset. It cannot land on an absent row, nor on a row
// whose offset cell is null (null <= o is false), so either case goes to
// the claim ("= null" is true for both). A claim that loses to a concurrent
// claimer learns that claimer's offset: above o is a conflict, otherwise the
// round repeats and the advance orders us after it — so among racing first
// writers the highest offset wins.
//
// How a result row is read matters. An LWT that applied returns only
// "[applied]". One that did not returns "[applied]" plus the condition's
// column as stored — unless the row is absent, when it returns "[applied]"
// alone. So a missing offset column means absent, and a present null means
// "row present, offset expired". The driver's MapScanCAS decodes a null
// bigint as 0 and ScanCAS does not scan a one-column result, so this
// package reads the raw iterator: it matches columns by name and scans the
// offset into a **int64. Result metadata is always requested
// (NoSkipMetadata) because one prepared LWT returns different columns from
// one call to the next.
//
// A row present with a null offset arises when a row marker outlives the
// cells: only INSERT writes a marker, and an INSERT without a TTL (an older
// writer, a manual fix) leaves an immortal one. This package only UPDATEs,
// always all three cells with one TTL (empty values are written as empty,
// not null), so its own rows expire whole. The claim repairs a poisoned
// row; Get reads it as absent.
//
// Delete is an LWT too (DELETE … IF EXISTS): a table written by LWTs must
// only be written by LWTs, whose cells carry Paxos ballot timestamps; a
// plain write or delete carries the client's clock and can be silently
// shadowed by, or silently shadow, LWT writes. No statement is retried by
// the driver (gocql 1.7 would retry regardless of idempotence): a second
// Paxos round after a timeout hides the first one's outcome. Every LWT uses
// CassandraOptions.Consistency (commit and reads, quorum-class) and
// SerialConsistency (the Paxos phase). Every node must run Cassandra
// 3.0.24, 3.11.10, 4.0 or later (CASSANDRA-12126); NewCassandra checks.
//
// LegacyLastWriteWins switches the Cassandra backend to plain UPDATE and
// DELETE with no fence, for parity with deployments not yet on LWTs. Never
// run both modes against one table: see the clock hazard above.
//
// # What the fence does not cover
//
//   - Delete is not fenced. After a delete, a stale writer's persist of a
//     lower offset lands and revives the key behind where it was
//     (testDeleteResidual pins this). To retire a key safely, persist an
//     offset-carrying empty value instead of deleting.
//   - The fence lasts as long as the snapshot: once its TTL expires, any
//     offset lands. Choose a TTL longer than any zombie can live.
//   - A zombie *ahead* of the owner wins; the owner then conflicts and
//     re-recovers from the zombie's snapshot. The fence orders by data,
//     not by identity.
//
// # Concurrency
//
// Every Store is safe for concurrent use by any number of goroutines and
// processes. Close releases what the store opened (the Cassandra session);
// the etcd client passed to NewEtcd stays the caller's.
package snapshot
