// Package shardmeta is the metadata of one shard: its manifest (which
// generations are committed and which WAL positions they cover), the epoch
// of its writer, and the owner that holds it — their types, their strict
// encoding and validation, and their etcd store with its claim and fencing
// protocol.
//
// This is where the writer (package engine) and the merge (package publish)
// meet. The writer claims a shard and commits its generations here; the
// merge reads the manifests to plan, and keeps in the same table's keys
// the two records it alone writes: the base table's state (BaseState, at
// Keys.BaseState: the base version and, per shard, the watermark up to
// which generations are merged) and the merge lock (Keys.BaseLock). The
// table's schema record (SchemaRecord, at Keys.Schema, every version at
// Keys.SchemaVersion) is here too: EnsureSchema holds every writer and
// merge to the table's current columns, ApplySchema moves them to a new
// version. Everything is strict, because etcd is the one record of what
// is committed: a value that does not decode or breaks an invariant fails
// closed, and is never taken for an empty or default one.
//
// # Keys
//
// Under a table's root (Keys.Root) each shard has three keys:
//
//	key                                     value                          lease
//	/<prefix>/<table>/shards/<s>/epoch      "7"                            none
//	/<prefix>/<table>/shards/<s>/owner      {"writer","epoch","address"}   the owner's
//	/<prefix>/<table>/shards/<s>/manifest   Manifest JSON                  none
//
// The epoch key is a dense counter of claims, canonical decimal. The owner
// key exists while a writer holds the shard and disappears when its lease
// expires or is revoked, or on Release; its value is informational. The
// manifest has exactly one writer, the current owner; merge coordinators
// read it (Load) and never write it.
//
// # Claim
//
// A writer opening a shard reads the three keys at one revision and, in one
// transaction guarded by "owner absent, epoch and manifest unchanged",
// writes epoch = max(epoch, manifest.writer_epoch)+1, the owner under its
// lease, and the manifest with the new writer_epoch and a new EpochRecord
// (start_generation = current_generation, start_position = the WAL tail it
// inherits). The transaction's revision R is the claim's fencing token:
// after it, ModRevision(owner) == ModRevision(epoch) == R.
//
//	writer                       etcd
//	  │ Txn: Get epoch, owner, manifest
//	  │◄──────────────── e, eR; (no owner); m, mR
//	  │ Txn If  CreateRevision(owner)=0 ∧ ModRevision(epoch)=eR ∧ ModRevision(manifest)=mR
//	  │     Then epoch=max(e,m.writer_epoch)+1, owner (lease), manifest'
//	  │◄──────────────── ok at revision R   →  Claim{Epoch, Token: R}
//
// While an owner exists Claim returns an *OwnedError; WaitOwnerGone watches
// the owner key for its DELETE (never a local clock) before claiming again.
// Seeding the epoch from the manifest keeps epochs monotonic if the counter
// is lost; a counter that is unparsable or behind the manifest fails closed
// (ErrInvalidEpoch) instead, as does an undecodable manifest
// (ErrInvalidManifest).
//
// # Every later write: Commit and Release
//
// Each write of the owner is one transaction guarded by ModRevision(owner)
// == R and ModRevision(epoch) == R — ModRevision, not CreateRevision, which
// an overwrite of the owner key would keep — and, for Commit, by the
// manifest's revision as last committed. A false guard is ErrFenced: stop
// accepting appends and never retry with that claim; a new claim has a new
// epoch. The fenced state is sticky on the Claim.
//
// A request that fails ambiguously (deadline, lost connection) is resolved by
// reading the keys back: the manifest equal to what was sent means committed;
// an unchanged manifest under an unchanged owner means not applied
// (ErrNotApplied, safe to retry); a moved owner means fenced; a failed read
// means ErrUnknownOutcome. See Commit.
//
// # The manifest
//
// The manifest is JSON with snake_case fields (see NewManifest for the
// empty one, Manifest for each field). Version is ManifestVersion; the
// encoding is wire format. Decode is strict — unknown, missing, null,
// duplicate or differently cased fields are errors — and every manifest
// decoded, encoded, claimed or committed passes Validate, which fails closed
// on any broken invariant. CheckTransition refuses a change that moves
// writer_epoch, current_generation, replay_cursor or a source offset
// backwards, rewrites committed history, or drops an epoch record that is
// still needed. The encoding's size is bounded (bound.go, ManifestBound;
// docs/format/etcd.md).
//
//	version             1
//	writer_epoch        epoch of the latest claim (= last epochs[].epoch)
//	current_generation  the active generation; everything below committed
//	replay_cursor       highest WAL position covered by committed generations
//	flushed[]           committed, undrained: number, file, rows, bytes,
//	                    seq_first..seq_last, epoch — ascending, disjoint
//	epochs[]            per claim: epoch, start_generation, start_position,
//	                    replay_end_generation — each claim drops the ones
//	                    nothing needs any more (PruneEpochs, epochs.go)
//	source_offsets{}    highest producer offset per source covered
//	producer_state      optional (absent until a producer session appears):
//	                    file (relative to the shard's directory), size,
//	                    crc32c, producers — the producer-state file as of
//	                    the committed generations (docs/format/producer-state.md)
//
// A flush of generation g commits flushed += g, current_generation = g+1,
// replay_cursor = g.seq_last, strictly in generation order. A generation
// whose records were all duplicates (offsets and producer sequences only)
// commits current_generation = g+1 with no flushed entry and the cursor
// unchanged. A drain removes a prefix of flushed once the base table's
// watermark covers it.
//
// # Concurrency
//
// Store is safe for concurrent use. A Claim serialises its own Commit and
// Release; read Claim.Manifest only from the goroutine that commits.
package shardmeta
