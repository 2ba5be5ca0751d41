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
// writers flush when closing, the coordinators' memory budget (a tiny one
// stages one generation per pass), the share of appends sent with a
// producer session, and, one seed in four, publish.Options.
// DisableReplayRanges: the coordinators then ignore the writers' recorded
// replay ranges and inherited WAL tails and extend the cutoff at every
// epoch change, so that the ID-check cutoff alone must keep replayed rows
// out of the base twice. One seed in two puts generations in an object
// store as well (engine and publish Options.Store: a file:// store on
// storage of its own, which no crash touches, as a bucket survives the
// machines): writers upload before they commit and delete what they drain
// or no commit names, coordinators read from it, and every checkpoint
// holds every generation a manifest names to being there.
//
// Each writer process sees the storage through its own procFS
// (procfs_test.go), which can stall the process at one of its next
// filesystem calls (descheduled, a GC pause: the others run on) and dies
// with the process (killed: every call fails, as after a SIGKILL, while the
// storage keeps what it wrote); and it talks to etcd through an etcdFaults
// interceptor (etcdfault_test.go) that can let a transaction apply and lose
// its answer, then fail the process's next KV requests as unavailable.
//
// Each shard has three producer sessions (session_test.go): a producer id
// whose rows are numbered 0, 1, 2, … across its batches
// (engine.AppendOptions.Producer). A producer sends each batch, with the
// same sequence number and rows, until it has a definite answer; it may
// pipeline (send its next batch while an earlier one is unresolved).
//
// # The ops
//
// Every step draws one op and four numbers from the seed's generator, whole,
// whatever the state, so that a seed's op sequence never depends on timing
// (the state an op finds may: background flushes and keepalives run on
// their own goroutines, and so do the producers and claimants of the ops
// marked concurrent below). The mix (opWeights in ops_test.go):
//
//   - append: a batch of 1–16 fresh rows (unique ids, a source offset) to
//     the shard's writer, claiming the shard on a host first if it has none;
//     with a session (the seed's share of appends) it is the producer's next
//     batch, or its first unresolved one sent again; one acknowledged append
//     in eight loses its response on the way (a timeout, a dropped
//     connection), so its producer must send it again;
//   - retry: a batch whose outcome was unknown, sent again with the same ids
//     (late: after whatever happened since); for a session, any unresolved
//     batch, not necessarily the first (the writer then refuses it with the
//     sequence it expects, until its predecessors are resolved);
//   - retry-acked: a session batch that was acknowledged, however long ago,
//     sent again (after flushes, merges, drains, crashes and replays,
//     handoffs): it must be answered as all duplicates;
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
//   - crash: arm a crash at one of the next 80 mutating filesystem ops, or
//     (one time in three) at the next sync of a WAL segment while two
//     producer sessions append to the shard, so that the records of a group
//     commit are written and not synced. When it fires, every process on
//     the storage is dead: their leases are revoked (as expiry would), they
//     are closed, the storage is replaced by its crash clone, and new
//     processes start. The clone is vfs.MemFS.CrashCloneWith: it keeps
//     nothing unsynced (the strictest), a random part (each unsynced change
//     survives with a drawn probability: a torn tail, holes, an overwrite
//     half undone; directory entry changes as a prefix of the order they
//     were made in, so a rename lands whole or not at all), or everything
//     (only the processes died);
//   - race (concurrent): two or three writer processes (extra ones on the
//     same directory when the slots run short) claim one shard at the same
//     time — all finding it free, or all waiting for its serving writer,
//     which is then killed or closed — while two producer sessions append
//     to whichever of them owns it, one claimant may stall inside its claim,
//     and a coordinator may merge all along. Each claimant wins in turn: the
//     winner serves (a flush may run meanwhile), is then closed or killed
//     (procFS dead, lease revoked), and the next takes over; the last stays.
//     A loser must never cut or create a file of a winner's epoch;
//   - stream (concurrent): one or two producer sessions of the shard append
//     from their own goroutines through the next 1–6 steps, to whichever
//     writer the shard has at each moment, so that appends are in flight
//     while the other ops flush, merge, hand off, close, claim and crash;
//   - etcd-lost: arm a process's etcdFaults (the next transaction it sends
//     of a drawn kind — any, a claim, a manifest commit, a release —
//     applies, its answer is lost, and its next 1–4 KV requests fail as
//     unavailable), then have it claim and flush, hand the shard off (a
//     close: flush and release), or re-claim it;
//   - schema-change: the table's next schema version (a nullable column
//     added, the token list's elements widened, another column added: at
//     most three a run) is applied while writers serve and coordinators
//     merge; producers keep sending rows of the first version, processes
//     started later are configured with the current one;
//   - stall: a process stalls 20–220 ms at one of its next 40 filesystem
//     calls, whatever it is doing then;
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
//   - zombie: call a zombie Shard object (append, with a session or not;
//     flush; or drain);
//   - lag-cursor: the incident the merge-side cutoff exists for: once all of
//     a shard's generations are merged and drained, its replay cursor is set
//     back to an earlier cursor, so the next writer replays published rows.
//
// # The model and the checker
//
// The model records, per id, every attempt and its outcome (acked; unknown:
// ErrUnknownOutcome, a WAL failure, a crash, a killed process; refused:
// fenced, closed or out of sequence before the WAL write), the epochs every
// claim returned and when, and the last observation of everything that must
// only move forward. After every step it reads etcd and checks: claimed
// epochs strictly increase per shard; manifests never move writer_epoch,
// current_generation, replay_cursor (but for the lag fault), source offsets
// or epoch records backwards; base/state's version, files (append-only),
// watermarks, observed epochs and cutoffs never go back; stored snapshot
// offsets never go back and never exceed the highest offset an append that
// reached a WAL carried (for the sources of producers appending in the
// background, checked when they stop); no writer acknowledges an append it
// began after a successor's claim returned; no zombie commits after its
// successor claimed; no coordinator commits after losing its lock; no
// operation fails without a fault to explain it (a coordinator failing
// closed on state the system made itself, a claim that fails without a
// crash or an injected etcd error, a panic; a claim whose own lease expired
// while it waited at least a TTL is only counted: on a loaded machine
// keepalives starve); a closed writer, or one whose open failed, leaves no
// owner key behind.
//
// With a session the model is strict. Every answer is judged as it comes
// (judgeSession): a batch sent again after it was acknowledged, at any
// time, must be answered with Stored 0 and all its rows as duplicates; a
// sequence error is expected only while an earlier batch of the producer is
// unresolved, and must never name a sequence below what was acknowledged
// (the writer forgot acknowledged batches) — except from a writer a later
// claim superseded, which cannot know the producer's later batches. Before
// the final check every producer sends its unresolved batches, in order,
// until each is acknowledged. Every acknowledged session id must then be in
// the base exactly once, late retries included.
//
// Without a session, a retry that may have stored ids again (it stored
// rows anew, or its outcome was unknown) while an earlier attempt of them
// was already committed (in a flushed generation or the base) is outside
// what docs/guarantees.md promises ("retries after an unknown outcome are
// deduplicated only while the first attempt is still in a memtable"): such
// ids may be in the base twice, and the per-seed summary counts them (and
// how many of them came from prompt retries) instead of failing. Every
// other acknowledged id must be there exactly once.
//
// At the end a pending crash point is taken, every process is closed, a new
// writer claims every shard, the producers resolve their batches, every
// shard is flushed, and merges and drains run until nothing is left. The
// base table is then read the way a reader reads it, through the latest
// readers' manifest (which must match base/state), and checked: every
// acknowledged id exactly once, every id of unknown outcome at most once,
// no id that was refused every time or never sent.
//
// # Running it
//
//	go test ./internal/sim/                       normal run: -sim.seeds (32) seeds of -sim.steps
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
// and coordinators' logs to stderr. Three flags change the worlds, to aim a
// run at one fault or to take one away (a failure prints them in its replay
// line): -sim.weights 'race=20,stream=0' overrides op weights (0 disables an
// op; every seed's op sequence changes), -sim.tear P makes every crash clone
// keep P percent of the unsynced changes (0: strict clones only), and
// -sim.cutoffonly runs every seed's coordinators with DisableReplayRanges.
// A failing seed prints its trace and the command that replays it. Replays
// repeat the op sequence exactly; what the ops meet can differ with
// goroutine timing (more so in the concurrent ops), so a rare failure may
// need a few replays (-count=N).
//
// Bugs the simulation found in other packages are kept as regression tests
// named TestSimulationSeed<N>_<Bug>, the seed that found the bug, next to a
// minimal reproduction (bugs_test.go).
package sim
