package catalog

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/vfs"
)

// TestPrepareBaseCommitStoreLocations: a catalog with a store registers
// data files at locations inside it and refuses any other (a local path,
// another bucket), naming the location; without a store it still wants
// absolute paths.
func TestPrepareBaseCommitStoreLocations(t *testing.T) {
	store, err := objstore.Open(context.Background(), "file:///lake", objstore.Options{FS: vfs.NewStrictMem()})
	fatalIf(t, err, "open store")
	e := newStoreEnv(t, store)
	in := StoreLocation(store, "t/base/data/s0/f.parquet")
	p, err := e.cat.PrepareBaseCommit(e.ctx, e.ident, BaseCommit{Files: []File{{Path: in, Rows: 1, Bytes: 10}}})
	fatalIf(t, err, "prepare an append of %s", in)
	tbl, err := e.cat.Apply(e.ctx, p)
	fatalIf(t, err, "apply")
	tasks, err := tbl.Scan().PlanFiles(e.ctx)
	fatalIf(t, err, "plan")
	if len(tasks) != 1 || tasks[0].File.FilePath() != in {
		t.Fatalf("the table holds %d files, want %s", len(tasks), in)
	}
	for _, out := range []string{"s3://other/t/base/data/s0/f.parquet", "file:///elsewhere/f.parquet", "relative/f.parquet"} {
		_, err := e.cat.PrepareBaseCommit(e.ctx, e.ident, BaseCommit{Files: []File{{Path: out, Rows: 1, Bytes: 10}}})
		if !errors.Is(err, ErrOutsideStore) || !strings.Contains(err.Error(), out) {
			t.Fatalf("append of %s: %v, want ErrOutsideStore naming it", out, err)
		}
	}
	if err := checkAbsolute("s3://b/x.parquet"); err == nil {
		t.Fatal("a catalog without a store accepted s3://b/x.parquet")
	}
}
