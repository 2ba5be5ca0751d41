package publish_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/parquet-go/parquet-go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// ExampleCoordinator_RunOnce merges what two shards flushed into the base
// table. The merge publishes each row exactly once: a second run finds
// nothing new, and a replayed row (one a restarted writer flushed again)
// would be dropped by the ID check.
func ExampleCoordinator_RunOnce() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rollwal-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer vfs.Default.RemoveAll(dir)
	etcd, err := etcdembed.Start(ctx, etcdembed.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		log.Fatal(err)
	}
	defer etcd.Close()
	// Writers flushed generations: s0 two rows, s1 one (see engine's examples).
	flushRows(ctx, etcd.Client(), dir, "s0", "r1", "r2")
	flushRows(ctx, etcd.Client(), dir, "s1", "r3")

	// One coordinator per table: New takes the table's merge lock.
	coord, err := publish.New(ctx, publish.Options{Etcd: etcd.Client(), DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer coord.Close()
	for range 2 {
		res, err := coord.RunOnce(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("merged %d generations, %d rows: base version %d\n", res.Generations, res.RowsStaged, res.Version)
	}
	// Output:
	// merged 2 generations, 3 rows: base version 1
	// merged 0 generations, 0 rows: base version 1
}

// ExampleLatestReaderManifest reads the table's current files as a reader
// without an Iceberg library does: the newest readers' manifest names the
// Parquet files of the latest base version, which any Parquet reader opens.
// Listing base/data instead would also find files no commit published.
func ExampleLatestReaderManifest() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rollwal-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer vfs.Default.RemoveAll(dir)
	etcd, err := etcdembed.Start(ctx, etcdembed.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		log.Fatal(err)
	}
	defer etcd.Close()
	flushRows(ctx, etcd.Client(), dir, "default", "r1", "r2", "r3")
	coord, err := publish.New(ctx, publish.Options{Etcd: etcd.Client(), DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer coord.Close()
	if _, err := coord.RunOnce(ctx); err != nil {
		log.Fatal(err)
	}

	// The reader needs only the base directory, <data>/<table>/base.
	baseDir := filepath.Join(dir, "rollouts", "base")
	m, ok, err := publish.LatestReaderManifest(vfs.Default, baseDir)
	if err != nil || !ok {
		log.Fatal("no readers' manifest: ", err)
	}
	fmt.Printf("base version %d: %d rows in %d files\n", m.Version, m.Rows, len(m.Files))
	var rows int64
	for _, f := range m.Files {
		file, err := os.Open(filepath.Join(baseDir, filepath.FromSlash(f.Path)))
		if err != nil {
			log.Fatal(err)
		}
		st, err := file.Stat()
		if err != nil {
			log.Fatal(err)
		}
		pf, err := parquet.OpenFile(file, st.Size())
		if err != nil {
			log.Fatal(err)
		}
		rows += pf.NumRows()
		file.Close()
	}
	fmt.Println("the files hold", rows, "rows")
	// Output:
	// base version 1: 3 rows in 1 files
	// the files hold 3 rows
}

// flushRows is a writer of the table "rollouts" (engine's default) that
// appends rows with the given ids to shard, flushes them into a generation
// and closes the shard.
func flushRows(ctx context.Context, cli *clientv3.Client, dir, shard string, ids ...string) {
	host, err := engine.NewHost(engine.Options{DataDir: dir, Etcd: cli, FlushAge: -1})
	if err != nil {
		log.Fatal(err)
	}
	s, err := host.Open(ctx, shard)
	if err != nil {
		log.Fatal(err)
	}
	var rows []schema.Row
	for _, id := range ids {
		rows = append(rows, schema.Row{"id": id, "prompt": "prompt " + id, "completion": "completion " + id})
	}
	if _, err := s.Append(ctx, rows, engine.Source{}); err != nil {
		log.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	if err := host.Close(ctx); err != nil {
		log.Fatal(err)
	}
}
