package generation

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// After Write returns, a crash keeps the file under its final name, whole.
func TestWriteIsDurableWhenItReturns(t *testing.T) {
	s := allTypes(t)
	mem, dir := newMemDir(t)
	d := allTypesRows(t, s, 300, 10)
	f := mustWrite(t, Options{FS: mem, RowGroupRows: 100}, dir, s, testMeta(), d)

	crashed := mem.CrashClone()
	names, err := crashed.List(dir)
	if err != nil || len(names) != 1 || names[0] != f.Name {
		t.Fatalf("after a crash the directory holds %v (%v), want [%s]\n%s", names, err, f.Name, crashed)
	}
	m, got, err := Read(crashed, f.Path, s)
	if err != nil {
		t.Fatal(err)
	}
	if m != f.Meta {
		t.Errorf("meta after crash %+v, want %+v", m, f.Meta)
	}
	requireSameData(t, d, got)
}

// A crash at any mutating operation before Write returns leaves no file
// under a generation name: only, perhaps, nothing at all (the temporary
// file's entry was never synced either).
func TestCrashBeforeWriteReturnsLeavesNoGeneration(t *testing.T) {
	s := allTypes(t)
	d := allTypesRows(t, s, 3000, 11)
	// Small pages and row groups: many writes, so many crash points.
	opts := Options{RowGroupRows: 100, PageBufferSize: 4 << 10}

	// Count the operations of a clean run.
	mem, dir := newMemDir(t)
	var probe vfs.Injector
	opts.FS = vfs.Inject(mem, &probe)
	mustWrite(t, opts, dir, s, testMeta(), d)
	total := probe.Ops()
	if total < 5 || probe.Count(vfs.OpSync) != 2 || probe.Count(vfs.OpRename) != 1 {
		t.Fatalf("clean run: %d ops, %d syncs, %d renames; want file sync, rename, dir sync",
			total, probe.Count(vfs.OpSync), probe.Count(vfs.OpRename))
	}

	t.Logf("a clean write takes %d mutating operations (%d writes)", total, probe.Count(vfs.OpWrite))
	for k := int64(1); k <= total; k++ {
		mem, dir := newMemDir(t)
		inj := &vfs.Injector{}
		inj.CrashAt(k)
		opts.FS = vfs.Inject(mem, inj)
		_, err := Write(context.Background(), opts, dir, s, testMeta(), d)
		if !errors.Is(err, vfs.ErrCrashed) {
			t.Fatalf("crash at op %d/%d: Write returned %v, want the crash", k, total, err)
		}
		crashed := mem.CrashClone()
		names, err := crashed.List(dir)
		if err != nil {
			t.Fatalf("crash at op %d: %v", k, err)
		}
		for _, n := range names {
			if _, _, _, err := ParseName(n); err == nil {
				t.Fatalf("crash at op %d/%d left a generation file %s\n%s", k, total, n, crashed)
			}
			if !IsTemp(n) {
				t.Fatalf("crash at op %d/%d left an unexpected file %s", k, total, n)
			}
		}
	}
}

// A failed operation (not a crash) makes Write return an error and leave
// the directory as it found it: the temporary file is removed, and so is
// the renamed file when the directory sync fails.
func TestFailedWriteCleansUp(t *testing.T) {
	s := allTypes(t)
	d := allTypesRows(t, s, 200, 12)
	opts := Options{RowGroupRows: 100, PageBufferSize: 4 << 10}

	mem, dir := newMemDir(t)
	var probe vfs.Injector
	opts.FS = vfs.Inject(mem, &probe)
	mustWrite(t, opts, dir, s, testMeta(), d)

	for _, kind := range []vfs.OpKind{vfs.OpCreate, vfs.OpWrite, vfs.OpSync, vfs.OpRename} {
		for n := int64(1); n <= probe.Count(kind); n++ {
			mem, dir := newMemDir(t)
			inj := &vfs.Injector{}
			inj.FailAt(n, kind, nil)
			opts.FS = vfs.Inject(mem, inj)
			_, err := Write(context.Background(), opts, dir, s, testMeta(), d)
			if !errors.Is(err, vfs.ErrInjected) {
				t.Fatalf("%v #%d failed: Write returned %v", kind, n, err)
			}
			if names, _ := mem.List(dir); len(names) != 0 {
				t.Fatalf("%v #%d failed: directory holds %v", kind, n, names)
			}
			if !strings.Contains(err.Error(), dir+"/") {
				t.Errorf("%v #%d: error %q does not name the file", kind, n, err)
			}
		}
	}
}
