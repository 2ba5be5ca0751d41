// Package embed_test shows rollwal embedded in another program, through
// its public packages alone: an etcd embedded in-process (etcdembed), a
// host of shards (engine), a merge into the base table (publish), and a
// read of the table's current files with parquet-go, as any reader would.
package embed_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// Example hosts a shard, appends rows, flushes them into a generation,
// merges it into the base table and reads the table's current files.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rollwal-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer vfs.Default.RemoveAll(dir)

	// The metadata plane: an etcd embedded in this process, its data under
	// the data directory. Production points engine and publish at an
	// external cluster's client instead.
	etcd, err := etcdembed.Start(ctx, etcdembed.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		log.Fatal(err)
	}
	defer etcd.Close()

	// The writer: a host of shards of the table "rollouts".
	host, err := engine.NewHost(engine.Options{DataDir: dir, Etcd: etcd.Client(), FlushAge: -1})
	if err != nil {
		log.Fatal(err)
	}
	shard, err := host.Open(ctx, "default")
	if err != nil {
		log.Fatal(err)
	}
	res, err := shard.Append(ctx, []schema.Row{
		{"id": "r1", "prompt": "2+2?", "completion": "4", "reward": 1.0},
		{"id": "r2", "prompt": "3+3?", "completion": "7", "reward": 0.0},
		{"id": "r3", "prompt": "5+5?", "completion": "10", "reward": 1.0},
	}, engine.Source{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acknowledged", res.Stored, "rows")
	gen, err := shard.Flush(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed generation", gen)
	if err := host.Close(ctx); err != nil {
		log.Fatal(err)
	}

	// A merge job: one pass publishes the committed generations into the
	// base table (Apache Iceberg, under <dir>/rollouts/base).
	coord, err := publish.New(ctx, publish.Options{Etcd: etcd.Client(), DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer coord.Close()
	merged, err := coord.RunOnce(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("merged", merged.RowsStaged, "rows into base version", merged.Version)

	// A reader: the readers' manifest names the table's current files.
	m, ok, err := publish.LatestReaderManifest(vfs.Default, coord.BaseDir())
	if err != nil || !ok {
		log.Fatal("no readers' manifest: ", err)
	}
	var rows int64
	for _, f := range m.Files {
		file, err := os.Open(filepath.Join(coord.BaseDir(), f.Path))
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
	fmt.Println("the table's files hold", rows, "rows")
	// Output:
	// acknowledged 3 rows
	// committed generation 1
	// merged 3 rows into base version 1
	// the table's files hold 3 rows
}
