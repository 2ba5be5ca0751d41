package engine

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/shardmeta"
)

// etcdBoundNoCompaction, set in the environment, runs TestEtcdStaysBounded
// with compaction off, to see it fail: ROLLWAL_ETCDBOUND_NO_COMPACTION=1.
const etcdBoundNoCompaction = "ROLLWAL_ETCDBOUND_NO_COMPACTION"

// TestEtcdStaysBounded drives 10,000 flush commits through one shard on an
// embedded etcd of its own that compacts to a retention of 1,000 revisions
// and defragments through its maintenance loop, with a merge (base state
// watermark) and a drain every mergeEvery flushes. The database, as etcd's
// Status reports it, stays under maxDB throughout and after a final pass.
// Without compaction it grows past maxDB, since every manifest revision is
// kept: ROLLWAL_ETCDBOUND_NO_COMPACTION=1 shows it.
//
// The commits are the engine's own etcd writes (shardmeta.Store Claim and
// guarded Commit, the base state put a merge makes) without the Parquet
// files: through engine.Host and publish.Coordinator 10,000 flushes took
// over seven minutes and the base state, which lists every merged
// generation's file in one value, passed etcd's request limit after 9,400
// (the bounded base state is separate work).
func TestEtcdStaysBounded(t *testing.T) {
	const (
		flushes    = 10_000
		mergeEvery = 200
		// 1,000 retained revisions of a manifest that holds 0 to 200
		// generations (about 170 bytes each, 17 KB on average) are ~17 MiB
		// of history; bbolt's pages and free list add the rest. Without
		// compaction the history is all 10,000 revisions, ~170 MiB.
		maxDB = 32 << 20
	)
	ctx := context.Background()
	opts := etcdembed.Options{Dir: t.TempDir(), MaintenanceInterval: 100 * time.Millisecond,
		DefragFloorBytes: 4 << 20,
		UnsafeNoFsync:    true} // the test measures sizes, not durability: no fsync keeps 10k commits fast
	if os.Getenv(etcdBoundNoCompaction) != "" {
		opts.CompactionRetention = -1
	}
	srv, err := etcdembed.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli := srv.Client()
	keys := shardmeta.Keys{Prefix: "rollwal", Table: tableName(t, "")}
	store := shardmeta.NewStore(cli, keys, shardmeta.StoreOptions{RequestTimeout: 5 * time.Second})
	// No keepalive: a TTL far above the run (about 4 s, 30 s and more under
	// -race on a loaded machine) keeps the claim for all of it.
	lease, err := cli.Grant(ctx, 900)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Revoke(context.Background(), lease.ID)
	claim, err := store.Claim(ctx, "s0", shardmeta.Owner{Writer: "w", Address: "http://127.0.0.1:1"}, lease.ID, nil)
	if err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	var peak etcdembed.Stats
	for i := range flushes {
		if err := store.Commit(ctx, claim, flushed(claim)); err != nil {
			t.Fatalf("flush commit %d: %v", i, err)
		}
		if (i+1)%mergeEvery == 0 {
			merge(t, cli, keys, claim)
			if err := store.Commit(ctx, claim, drainedManifest(claim)); err != nil {
				t.Fatalf("drain commit after flush %d: %v", i, err)
			}
		}
		if st := srv.Stats(); st.DBBytes > peak.DBBytes {
			peak = st
		}
		if (i+1)%2000 == 0 {
			st := srv.Stats()
			t.Logf("%5d flushes, %s: db %.1f MiB, in use %.1f MiB, revision %d, compacted to %d, %d compactions, %d defrags",
				i+1, time.Since(began).Round(time.Millisecond), mib(st.DBBytes), mib(st.DBInUseBytes),
				st.Revision, st.CompactRevision, st.Compactions, st.Defrags)
		}
	}
	final, err := srv.Maintain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d flush commits, %d merges in %s; peak db %.1f MiB (revision %d); after a final pass db %.1f MiB, in use %.1f MiB, %d compactions, %d defrags",
		flushes, flushes/mergeEvery, time.Since(began).Round(time.Millisecond), mib(peak.DBBytes), peak.Revision,
		mib(final.DBBytes), mib(final.DBInUseBytes), final.Compactions, final.Defrags)
	if got := claim.Manifest.CurrentGeneration; got != flushes+1 {
		t.Fatalf("current generation %d after %d flushes", got, flushes)
	}
	if peak.DBBytes > maxDB || final.DBBytes > maxDB {
		t.Fatalf("etcd database peaked at %.1f MiB and ends at %.1f MiB; want at most %.0f MiB",
			mib(peak.DBBytes), mib(final.DBBytes), mib(maxDB))
	}
}

// flushed is the manifest a flush of one row commits: the active
// generation joins the flushed list, the replay cursor moves past its row.
func flushed(c *shardmeta.Claim) *shardmeta.Manifest {
	m := c.Manifest.Clone()
	g := m.CurrentGeneration
	seq := m.ReplayCursor + 1
	m.Flushed = append(m.Flushed, shardmeta.Generation{Number: g, File: fmt.Sprintf("%020d-e%d-a1.parquet", g, c.Epoch),
		Rows: 1, Bytes: 2400, SeqFirst: seq, SeqLast: seq, Epoch: c.Epoch})
	m.CurrentGeneration, m.ReplayCursor = g+1, seq
	return m
}

// merge writes the base state a merge of every flushed generation leaves:
// the watermark at the last of them.
func merge(t *testing.T, cli *clientv3.Client, keys shardmeta.Keys, c *shardmeta.Claim) {
	t.Helper()
	b := shardmeta.NewBaseState()
	w := c.Manifest.Flushed[len(c.Manifest.Flushed)-1].Number
	epoch := c.Epoch
	b.Version = w
	b.Shards[c.Shard] = shardmeta.ShardMergeState{Watermark: w, ObservedEpoch: &epoch, Cutoff: new(uint64)}
	data, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), keys.BaseState(), string(data)); err != nil {
		t.Fatalf("merge: %v", err)
	}
}

// drainedManifest is the manifest a drain commits once the watermark covers every
// flushed generation.
func drainedManifest(c *shardmeta.Claim) *shardmeta.Manifest {
	m := c.Manifest.Clone()
	m.Flushed = m.Flushed[:0]
	return m
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
