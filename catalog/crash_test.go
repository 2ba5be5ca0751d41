package catalog

import (
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// TestPreparedFilesSurviveCrash: every file a prepared commit names (the
// metadata JSON, the manifest list, the manifest) is durable before
// PrepareAppend returns, so a machine that crashes right after the etcd
// transaction still reads the committed table. The strict in-memory FS
// forgets whatever was not synced, directory entries included.
func TestPreparedFilesSurviveCrash(t *testing.T) {
	mem := vfs.NewStrictMem()
	e := newEnvFS(t, mem)
	p, err := e.cat.PrepareAppend(e.ctx, e.ident, []File{e.baseFile("s0", 1, 1, "a", 5, 1)}, nil)
	fatalIf(t, err, "prepare")
	resp, err := e.cli.Txn(e.ctx).If(p.Cmps...).Then(p.Ops...).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("commit: %v %v", resp, err)
	}

	crashed := mem.CrashClone()
	after, err := New(Options{Client: e.cli, FS: crashed, Prefix: e.cat.opts.Prefix})
	fatalIf(t, err, "catalog after the crash")
	tbl, err := after.LoadTable(e.ctx, e.ident)
	fatalIf(t, err, "load after the crash")
	e.scan(tbl)
	names, err := crashed.List(e.dir + "/base/metadata")
	fatalIf(t, err, "list metadata")
	for _, n := range names {
		if isTemp(n) {
			t.Errorf("temporary file %s left in metadata/", n)
		}
	}
}
