package engine_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// ExampleNewHost hosts two shards of the table "rollouts" in one process.
// Opening a shard claims it in etcd with a new writer epoch, so that no
// other writer can commit to it until this host closes it or loses its
// lease.
func ExampleNewHost() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rollwal-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer vfs.Default.RemoveAll(dir)

	// The metadata plane: an etcd embedded in this process. Production
	// passes an external cluster's client instead.
	etcd, err := etcdembed.Start(ctx, etcdembed.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		log.Fatal(err)
	}
	defer etcd.Close()

	host, err := engine.NewHost(engine.Options{DataDir: dir, Table: "rollouts", Etcd: etcd.Client()})
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"s0", "s1"} {
		shard, err := host.Open(ctx, name)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("claimed", shard.Name(), "at epoch", shard.Epoch())
	}
	fmt.Println("open shards:", len(host.Shards()))

	// Close flushes every shard, releases its owner key and revokes the
	// lease, so that a successor can claim the shards at once.
	if err := host.Close(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// claimed s0 at epoch 1
	// claimed s1 at epoch 1
	// open shards: 2
}

// ExampleShard_Append appends a batch with a producer session and sends it
// again, as a producer does after losing the answer: the retry is
// acknowledged as duplicates and stores nothing twice.
func ExampleShard_Append() {
	ctx := context.Background()
	shard, done := exampleShard(ctx)
	defer done()

	rows := []schema.Row{
		{"id": "r1", "prompt": "2+2?", "completion": "4", "reward": 1.0},
		{"id": "r2", "prompt": "3+3?", "completion": "7", "reward": 0.0},
	}
	session := engine.AppendOptions{Producer: engine.Producer{ID: "producer-1", Seq: 0}}
	for range 2 {
		// Append returns once the rows are durable in the WAL.
		res, err := shard.AppendWith(ctx, rows, session)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("stored", res.Stored, "duplicates", res.Duplicates)
	}
	next, _ := shard.ProducerNextSeq("producer-1")
	fmt.Println("next sequence of producer-1:", next)

	// A row that breaks the schema refuses the whole batch.
	_, err := shard.Append(ctx, []schema.Row{{"id": "r3", "prompt": 42}}, engine.Source{})
	fmt.Println("invalid batch refused:", err != nil)
	// Output:
	// stored 2 duplicates 0
	// stored 0 duplicates 2
	// next sequence of producer-1: 2
	// invalid batch refused: true
}

// ExampleShard_Flush turns the rows in memory into a generation: a Parquet
// file, committed to the shard's manifest in etcd. From then on the rows
// no longer need the WAL, and a merge can publish them (package publish).
func ExampleShard_Flush() {
	ctx := context.Background()
	shard, done := exampleShard(ctx)
	defer done()

	for i, batch := range [][]schema.Row{
		{{"id": "r1", "prompt": "2+2?", "completion": "4"}, {"id": "r2", "prompt": "3+3?", "completion": "6"}},
		{{"id": "r3", "prompt": "5+5?", "completion": "10"}},
	} {
		if _, err := shard.Append(ctx, batch, engine.Source{Name: "queue", Offset: int64(i)}); err != nil {
			log.Fatal(err)
		}
		gen, err := shard.Flush(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("committed generation", gen)
	}
	m := shard.Manifest()
	for _, g := range m.Flushed {
		fmt.Printf("generation %d: %d rows at WAL positions %d-%d\n", g.Number, g.Rows, g.SeqFirst, g.SeqLast)
	}
	fmt.Println("replay would start after position", m.ReplayCursor)
	fmt.Println("source offset committed:", m.SourceOffsets["queue"])
	// Output:
	// committed generation 1
	// committed generation 2
	// generation 1: 2 rows at WAL positions 1-2
	// generation 2: 1 rows at WAL positions 3-3
	// replay would start after position 3
	// source offset committed: 1
}

// exampleShard starts what ExampleNewHost starts (a data directory, an
// embedded etcd, a host) and opens the shard "default" on it, without
// age-based flushes, so that the examples decide when to flush. done closes
// and removes everything.
func exampleShard(ctx context.Context) (shard *engine.Shard, done func()) {
	dir, err := os.MkdirTemp("", "rollwal-example-")
	if err != nil {
		log.Fatal(err)
	}
	etcd, err := etcdembed.Start(ctx, etcdembed.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		log.Fatal(err)
	}
	host, err := engine.NewHost(engine.Options{DataDir: dir, Etcd: etcd.Client(), FlushAge: -1})
	if err != nil {
		log.Fatal(err)
	}
	if shard, err = host.Open(ctx, "default"); err != nil {
		log.Fatal(err)
	}
	return shard, func() {
		if err := host.Close(ctx); err != nil {
			log.Fatal(err)
		}
		etcd.Close()
		vfs.Default.RemoveAll(dir)
	}
}
