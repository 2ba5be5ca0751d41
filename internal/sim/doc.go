// Package sim is a seeded, randomized crash-and-failover simulation of
// rollwal, checked against a model: the promise that every acknowledged row
// reaches the base table exactly once, held against crashes, lease loss,
// zombies, epoch bumps and merges that die half-way. The package has no API;
// everything is in its tests (TestSimulation in sim_test.go).
//
// # The world
//
// One seed builds one world, drawn from the seed: one table with 2–3 shards,
// 2–3 writer processes (engine.Host, each with its own etcd client) and 1–2
// merge coordinator slots (publish.Coordinator, one holding the table's merge
// lock at a time), all over ONE strict in-memory filesystem
// (vfs.NewStrictMem behind a vfs.Injector: shared storage that forgets
// whatever was not synced when it crashes), one real embedded etcd (shared
// by every seed; it survives every crash, as a separate cluster would) and
// the etcd snapshot store. The seed also draws the flush threshold (small
// ones make replays flush part-way), how often a writer runs with
// engine.Options.DisableSourceExclusion (replays then bypass the writer's
// own exclusion and only the merge's ID check keeps duplicates out), whether
// writers flush when closing, and the coordinators' memory budget (a tiny one
// stages one generation per pass).
//
// # The ops
//
// Every step draws one op and four numbers from the seed's generator, whole,
// whatever the state, so that a seed's op sequence never depends on timing
// (the state an op finds may: background flushes and keepalives run on
// their own goroutines). The mix (opWeights in ops_test.go):
//
//   - append: a batch of 1–16 fresh rows (unique ids, a source offset) to
//     the shard's writer, claiming the shard on a host first if it has none;
//     one acknowledged append in eight loses its response on the way (a
//     timeout, a dropped connection), so its producer must retry it;
//   - retry: a batch whose outcome was unknown, sent again with the same ids
//     (late: after whatever happened since);
//   - flush, drain: of the shard's writer;
//   - merge: RunOnce; or Plan+Stage+Commit; or Plan+Stage and then the
//     coordinator dies before Commit; or a plan made now and staged and
//     committed steps later (stale by then); or a zombie coordinator: its
//     lock lease is revoked after Stage, a successor merges, and the zombie's
//     Commit must be refused;
//   - handoff: close the shard's writer (flushing or not) and claim it on a
//     host drawn from the seed; the closed Shard object stays a zombie;
//   - epoch-bump: write the shard's epoch counter ahead, as an operator
//     would; the writer is fenced at its next commit (or handed off at once)
//     and the next claim's epoch jumps, leaving a gap in the provenance;
//   - restart-host: close a writer process and start a new one in its slot;
//   - crash: arm a crash at one of the next 80 mutating filesystem ops. When
//     it fires, every process on the storage is dead: their leases are
//     revoked (as expiry would), they are closed, the storage is replaced by
//     its CrashClone, and new processes start;
//   - revoke: revoke a writer's lease; producers keep appending from their
//     own goroutines (one append every 2ms) until the writer knows (bounded
//     wait), then a host claims its shards and the producers retry at once
//     every batch whose outcome was unknown (the prompt retry
//     docs/guarantees.md asks for);
//   - partition: cut a writer off etcd (close its client). Its producers
//     keep appending; the successor's claim waits for the lease to expire on
//     the server; appends that begin after that claim must not be
//     acknowledged, and the zombie's flushes and drains must commit nothing;
//     then the prompt retries;
//   - zombie: call a zombie Shard object (append, flush or drain);
//   - lag-cursor: the incident the merge-side cutoff exists for: once all of
//     a shard's generations are merged and drained, its replay cursor is set
//     back to an earlier cursor, so the next writer replays published rows.
//
// # The model and the checker
//
// The model records, per id, every attempt and its outcome (acked; unknown:
// ErrUnknownOutcome, a WAL failure, a crash; refused: fenced or closed before
// the WAL write), the epochs every claim returned, and the last observation of
// everything that must only move forward. After every step it reads etcd and
// checks: claimed epochs strictly increase per shard; manifests never move
// writer_epoch, current_generation, replay_cursor (but for the lag fault),
// source offsets or epoch records backwards; base/state's version, files
// (append-only), watermarks, observed epochs and cutoffs never go back;
// stored snapshot offsets never go back and never exceed the highest offset
// an append that reached a WAL carried; no zombie acknowledges or commits
// after its successor claimed; no coordinator commits after losing its lock;
// no operation fails without a fault to explain it (a coordinator failing
// closed on state the system made itself, a claim that fails without a
// crash, a panic).
//
// A retry that stores ids again although an earlier attempt of them is
// already committed (in a flushed generation or the base) is outside what
// docs/guarantees.md promises ("retries after an unknown outcome are
// deduplicated only while the first attempt is still in a memtable"): such
// ids may be in the base twice, and the per-seed summary counts them (and
// how many of them came from prompt retries) instead of failing. Every other
// acknowledged id must be there exactly once.
//
// At the end a pending crash point is taken, every process is closed, a new
// writer claims and flushes every shard, and merges and drains run until
// nothing is left. The base table is then read the way a reader reads it,
// through the latest readers' manifest (which must match base/state), and
// checked: every acknowledged id exactly once, every id of unknown outcome at
// most once, no id that was refused every time or never sent.
//
// # Running it
//
//	go test ./internal/sim/                       normal run: -sim.seeds (40) seeds of -sim.steps
//	                                              (100) steps from -sim.first (1; 0 draws one)
//	go test ./internal/sim/ -v                    ... with a one-line summary per seed
//	go test ./internal/sim/ -run 'TestSimulation$' -count=1 -v -sim.seed N -sim.steps S
//	                                              replay one seed (every failure prints this line)
//	go test ./internal/sim/ -run 'TestSimulation$' -v -timeout 0 -sim.soak 1h
//	ROLLWAL_SIM_SOAK=1h go test ./internal/sim/ -run 'TestSimulation$' -v -timeout 0
//	                                              soak: random seeds until the time is up;
//	                                              prints the seed count and the failing seeds
//
// -sim.trace logs every step as it happens; -sim.enginelog sends the writers'
// and coordinators' logs to stderr. A failing seed prints its trace and the
// command that replays it. Replays repeat the op sequence exactly; what the
// ops meet can differ with goroutine timing, so a rare failure may need a few
// replays (-count=N).
//
// Bugs the simulation found in other packages are kept as regression tests
// named TestSimulationSeed<N>_<Bug>, the seed that found the bug, next to a
// minimal reproduction (bugs_test.go).
package sim
