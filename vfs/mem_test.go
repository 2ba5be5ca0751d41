package vfs_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// fsHelper runs filesystem steps that must succeed, so that test cases
// read as the sequence of operations they check.
type fsHelper struct {
	t  *testing.T
	fs vfs.FS
}

func (h fsHelper) ok(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h fsHelper) mkdir(dir string) { h.t.Helper(); h.ok(h.fs.MkdirAll(dir, 0o755)) }

func (h fsHelper) create(name string) vfs.File {
	h.t.Helper()
	f, err := h.fs.Create(name)
	h.ok(err)
	h.t.Cleanup(func() { _ = f.Close() })
	return f
}

func (h fsHelper) openRW(name string) vfs.File {
	h.t.Helper()
	f, err := h.fs.OpenReadWrite(name)
	h.ok(err)
	h.t.Cleanup(func() { _ = f.Close() })
	return f
}

func (h fsHelper) write(f vfs.File, s string) {
	h.t.Helper()
	_, err := io.WriteString(f, s)
	h.ok(err)
}

func (h fsHelper) syncDir(dir string) {
	h.t.Helper()
	d, err := h.fs.OpenDir(dir)
	h.ok(err)
	h.ok(d.Sync())
	h.ok(d.Close())
}

// durableFile creates name with data and makes both durable.
func (h fsHelper) durableFile(name, data string) {
	h.t.Helper()
	f := h.create(name)
	h.write(f, data)
	h.ok(f.Sync())
	h.ok(f.Close())
	h.syncDir(filepath.Dir(name))
}

func (h fsHelper) read(name string) string {
	h.t.Helper()
	f, err := h.fs.Open(name)
	h.ok(err)
	defer f.Close()
	b, err := io.ReadAll(f)
	h.ok(err)
	return string(b)
}

// readIfExists is read, or "<absent>" when name does not exist.
func (h fsHelper) readIfExists(name string) string {
	h.t.Helper()
	if _, err := h.fs.Stat(name); errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	return h.read(name)
}

func (h fsHelper) absent(name string) {
	h.t.Helper()
	if _, err := h.fs.Stat(name); !errors.Is(err, os.ErrNotExist) {
		h.t.Fatalf("Stat(%s) = %v, want ErrNotExist", name, err)
	}
}

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   vfs.FS
		dir  func(t *testing.T) string
	}{
		{"os", vfs.Default, func(t *testing.T) string { return t.TempDir() }},
		{"mem", vfs.NewStrictMem(), func(*testing.T) string { return "/conf" }},
		{"mem-relative", vfs.NewStrictMem(), func(*testing.T) string { return "conf" }},
		{"inject(os)", vfs.Inject(vfs.Default, &vfs.Injector{}), func(t *testing.T) string { return t.TempDir() }},
		{"inject(mem)", vfs.Inject(vfs.NewStrictMem(), &vfs.Injector{}), func(*testing.T) string { return "/conf" }},
	} {
		t.Run(tc.name, func(t *testing.T) { conformance(t, tc.fs, tc.dir(t)) })
	}
}

// conformance checks the behaviour every FS must share with the OS.
func conformance(t *testing.T, fs vfs.FS, dir string) {
	h := fsHelper{t, fs}
	a, sub := filepath.Join(dir, "a"), filepath.Join(dir, "sub")
	b := filepath.Join(sub, "b")
	h.mkdir(sub)
	conformWriteRead(h, a)
	conformWriteAt(h, filepath.Join(dir, "at"))
	conformRename(h, dir, a, b)
	conformRemove(h, dir, sub, b)
	conformMissing(h, dir)
	conformLink(h, dir)
}

func conformWriteRead(h fsHelper, a string) {
	t := h.t
	f := h.create(a)
	h.write(f, "hello")
	if fi, err := f.Stat(); err != nil || fi.Size() != 5 || fi.Name() != "a" || !fi.Mode().IsRegular() {
		t.Fatalf("Stat = %v, %v", fi, err)
	}
	h.ok(f.Sync())
	h.ok(f.Close())
	if err := f.Close(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}

	r, err := h.fs.Open(a)
	h.ok(err)
	buf := make([]byte, 4)
	if n, err := r.ReadAt(buf, 1); n != 4 || err != nil || string(buf) != "ello" {
		t.Fatalf("ReadAt = %d, %v, %q", n, err, buf)
	}
	if _, err := r.ReadAt(buf, 3); err != io.EOF {
		t.Fatalf("ReadAt past the end = %v, want io.EOF", err)
	}
	if got, err := io.ReadAll(r); err != nil || string(got) != "hello" {
		t.Fatalf("ReadAll = %q, %v", got, err)
	}
	if _, err := r.Write([]byte("x")); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("Write to a read-only file = %v, want EBADF", err)
	}
	h.ok(r.Close())

	rw := h.openRW(a)
	h.write(rw, "J")
	h.ok(rw.Truncate(3))
	h.ok(rw.Preallocate(0, 1<<16))
	if fi, err := rw.Stat(); err != nil || fi.Size() != 3 {
		t.Fatalf("Stat after Truncate and Preallocate = %v, %v, want size 3", fi, err)
	}
	h.ok(rw.Close())
	if got := h.read(a); got != "Jel" {
		t.Fatalf("content = %q, want %q", got, "Jel")
	}
}

// conformWriteAt checks that WriteAt overwrites and extends in place,
// zero-fills a gap, and leaves the offset of Write alone.
func conformWriteAt(h fsHelper, name string) {
	t := h.t
	f := h.create(name)
	h.write(f, "abcdef")
	if n, err := f.WriteAt([]byte("XY"), 2); n != 2 || err != nil {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
	if _, err := f.WriteAt([]byte("Z"), 9); err != nil {
		t.Fatal(err)
	}
	h.write(f, "g") // at 6: WriteAt did not move the offset
	if fi, err := f.Stat(); err != nil || fi.Size() != 10 {
		t.Fatalf("Stat after WriteAt past the end = %v, %v, want size 10", fi, err)
	}
	if _, err := f.WriteAt(make([]byte, 2), 10); err != nil { // zeros past the end, as a WAL reserves
		t.Fatal(err)
	}
	buf := []byte("------")
	if n, err := f.ReadAt(buf, 8); n != 4 || err != io.EOF || string(buf[:4]) != "\x00Z\x00\x00" {
		t.Fatalf("ReadAt over the zeros = %d, %v, %q", n, err, buf)
	}
	h.ok(f.Truncate(10))
	h.ok(f.Close())
	if got := h.read(name); got != "abXYefg\x00\x00Z" {
		t.Fatalf("content = %q", got)
	}
	r, err := h.fs.Open(name)
	h.ok(err)
	if _, err := r.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("WriteAt to a read-only file = %v, want EBADF", err)
	}
	h.ok(r.Close())
	h.ok(h.fs.Remove(name))
}

func conformRename(h fsHelper, dir, a, b string) {
	t := h.t
	h.ok(h.fs.Rename(a, b))
	h.absent(a)
	if fi, err := h.fs.Stat(b); err != nil || fi.Size() != 3 || fi.Name() != "b" {
		t.Fatalf("Stat(%s) = %v, %v", b, fi, err)
	}
	if names, err := h.fs.List(dir); err != nil || !slices.Equal(names, []string{"sub"}) {
		t.Fatalf("List(%s) = %v, %v", dir, names, err)
	}
	if names, err := h.fs.List(filepath.Dir(b)); err != nil || !slices.Equal(names, []string{"b"}) {
		t.Fatalf("List(sub) = %v, %v", names, err)
	}
	h.ok(h.create(b).Close()) // Create truncates an existing file.
	if fi, err := h.fs.Stat(b); err != nil || fi.Size() != 0 {
		t.Fatalf("Stat after Create over %s = %v, %v", b, fi, err)
	}
	h.syncDir(dir)
}

func conformRemove(h fsHelper, dir, sub, b string) {
	t := h.t
	if err := h.fs.Remove(sub); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("Remove(non-empty dir) = %v, want ENOTEMPTY", err)
	}
	h.ok(h.fs.Remove(b))
	h.ok(h.fs.Remove(sub))
	h.absent(sub)
	if names, err := h.fs.List(dir); err != nil || len(names) != 0 {
		t.Fatalf("List after Remove = %v, %v", names, err)
	}
	h.mkdir(filepath.Join(sub, "x", "y"))
	h.ok(h.fs.RemoveAll(sub))
	h.absent(sub)
	h.ok(h.fs.RemoveAll(sub))
}

func conformMissing(h fsHelper, dir string) {
	t := h.t
	missing := filepath.Join(dir, "missing")
	for name, err := range map[string]error{
		"Open":          second(h.fs.Open(missing)),
		"OpenReadWrite": second(h.fs.OpenReadWrite(missing)),
		"Create":        second(h.fs.Create(filepath.Join(missing, "f"))),
		"Stat":          second(h.fs.Stat(missing)),
		"List":          second(h.fs.List(missing)),
		"Remove":        h.fs.Remove(missing),
		"Rename":        h.fs.Rename(missing, filepath.Join(dir, "x")),
		"Link":          h.fs.Link(missing, filepath.Join(dir, "x")),
	} {
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s(missing) = %v, want ErrNotExist", name, err)
		}
		var pe *os.PathError
		var le *os.LinkError
		if !errors.As(err, &pe) && !errors.As(err, &le) {
			t.Errorf("%s(missing) = %T, want *os.PathError or *os.LinkError", name, err)
		}
	}
	if fi, err := h.fs.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("Stat(dir) = %v, %v", fi, err)
	}
}

// conformLink: Link makes a second name of one file and never replaces
// an entry, a file's or a directory's; it leaves dir as it found it.
func conformLink(h fsHelper, dir string) {
	t := h.t
	one, two, three := filepath.Join(dir, "one"), filepath.Join(dir, "two"), filepath.Join(dir, "three")
	sub := filepath.Join(dir, "linkdir")
	h.durableFile(one, "one")
	h.durableFile(two, "two")
	h.mkdir(sub)
	h.ok(h.fs.Link(one, three))
	h.write(h.openRW(three), "ONE")
	if got := h.read(one); got != "ONE" {
		t.Fatalf("%s after a write through its link = %q, want %q: not one file", one, got, "ONE")
	}
	for _, target := range []string{two, three, sub} {
		err := h.fs.Link(one, target)
		var le *os.LinkError
		if !errors.Is(err, fs.ErrExist) || !errors.As(err, &le) {
			t.Fatalf("Link over existing %s = %v (%T), want an *os.LinkError that is fs.ErrExist", target, err, err)
		}
	}
	if got := h.read(two); got != "two" {
		t.Fatalf("%s after a refused Link = %q, want it unchanged", two, got)
	}
	if fi, err := h.fs.Stat(sub); err != nil || !fi.IsDir() {
		t.Fatalf("Stat(%s) after a refused Link = %v, %v, want the directory unchanged", sub, fi, err)
	}
	if err := h.fs.Link(sub, filepath.Join(dir, "dirlink")); err == nil {
		t.Fatal("Link of a directory succeeded")
	}
	h.absent(filepath.Join(dir, "dirlink"))
	h.ok(h.fs.Remove(one))
	if got := h.read(three); got != "ONE" {
		t.Fatalf("%s after its other name was removed = %q, want %q", three, got, "ONE")
	}
	for _, name := range []string{two, three, sub} {
		h.ok(h.fs.Remove(name))
	}
	if names, err := h.fs.List(dir); err != nil || len(names) != 0 {
		t.Fatalf("List after the link checks = %v, %v", names, err)
	}
}

func second[T any](_ T, err error) error { return err }

// crashCase runs steps on a MemFS whose /d is durable and checks what a
// crash leaves: want maps paths to their content, gone lists vanished paths.
type crashCase struct {
	name string
	run  func(h fsHelper)
	want map[string]string
	gone []string
}

func TestCrashClone(t *testing.T) {
	for _, tc := range crashCases {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewStrictMem()
			h := fsHelper{t, mem}
			h.mkdir("/d")
			h.syncDir("/")
			tc.run(h)
			after := fsHelper{t, mem.CrashClone()}
			for name, data := range tc.want {
				if got := after.read(name); got != data {
					t.Errorf("%s after crash = %q, want %q\n%s", name, got, data, mem)
				}
			}
			for _, name := range tc.gone {
				after.absent(name)
			}
		})
	}
}

var crashCases = []crashCase{
	{
		name: "unsynced data is lost",
		run: func(h fsHelper) {
			f := h.create("/d/f")
			h.syncDir("/d")
			h.write(f, "abc")
		},
		want: map[string]string{"/d/f": ""},
	},
	{
		name: "synced data is kept",
		run: func(h fsHelper) {
			f := h.create("/d/f")
			h.write(f, "abc")
			h.ok(f.Sync())
			h.syncDir("/d")
		},
		want: map[string]string{"/d/f": "abc"},
	},
	{
		name: "data after the last sync is cut at the synced length",
		run: func(h fsHelper) {
			h.durableFile("/d/f", "abc")
			f := h.openRW("/d/f")
			_, _ = io.ReadAll(f)
			h.write(f, "def")
		},
		want: map[string]string{"/d/f": "abc"},
	},
	{
		name: "an overwrite after the last sync is undone",
		run: func(h fsHelper) {
			h.durableFile("/d/f", "abc")
			h.write(h.openRW("/d/f"), "XY")
		},
		want: map[string]string{"/d/f": "abc"},
	},
	{
		name: "an unsynced truncate and regrowth are undone",
		run: func(h fsHelper) {
			h.durableFile("/d/f", "abc")
			f := h.openRW("/d/f")
			h.ok(f.Truncate(1))
			h.ok(f.Truncate(5))
		},
		want: map[string]string{"/d/f": "abc"},
	},
	{
		name: "a synced truncate is kept",
		run: func(h fsHelper) {
			h.durableFile("/d/f", "abc")
			f := h.openRW("/d/f")
			h.ok(f.Truncate(1))
			h.ok(f.Sync())
		},
		want: map[string]string{"/d/f": "a"},
	},
	{
		name: "Create over a synced file keeps its synced bytes until Sync",
		run: func(h fsHelper) {
			h.durableFile("/d/f", "abc")
			h.write(h.create("/d/f"), "z")
		},
		want: map[string]string{"/d/f": "abc"},
	},
	{
		name: "synced data without a directory sync vanishes",
		run: func(h fsHelper) {
			f := h.create("/d/f")
			h.write(f, "abc")
			h.ok(f.Sync())
		},
		gone: []string{"/d/f"},
	},
	{
		name: "a rename without a directory sync reverts",
		run: func(h fsHelper) {
			h.durableFile("/d/tmp", "abc")
			h.ok(h.fs.Rename("/d/tmp", "/d/final"))
		},
		want: map[string]string{"/d/tmp": "abc"},
		gone: []string{"/d/final"},
	},
	{
		name: "a rename survives after the directory sync",
		run: func(h fsHelper) {
			h.durableFile("/d/tmp", "abc")
			h.ok(h.fs.Rename("/d/tmp", "/d/final"))
			h.syncDir("/d")
		},
		want: map[string]string{"/d/final": "abc"},
		gone: []string{"/d/tmp"},
	},
	{
		name: "synced data follows the inode across directories",
		run: func(h fsHelper) {
			h.mkdir("/e")
			h.syncDir("/")
			h.durableFile("/d/tmp", "abc")
			h.ok(h.fs.Rename("/d/tmp", "/e/final"))
			h.syncDir("/e")
			h.syncDir("/d")
		},
		want: map[string]string{"/e/final": "abc"},
		gone: []string{"/d/tmp"},
	},
	{
		name: "a rename over a synced file without a directory sync keeps the old file",
		run: func(h fsHelper) {
			h.durableFile("/d/final", "old")
			h.durableFile("/d/tmp", "new")
			h.ok(h.fs.Rename("/d/tmp", "/d/final"))
		},
		want: map[string]string{"/d/final": "old", "/d/tmp": "new"},
	},
	{
		name: "a link without a directory sync vanishes",
		run: func(h fsHelper) {
			h.durableFile("/d/tmp", "abc")
			h.ok(h.fs.Link("/d/tmp", "/d/final"))
		},
		want: map[string]string{"/d/tmp": "abc"},
		gone: []string{"/d/final"},
	},
	{
		name: "a link survives after the directory sync",
		run: func(h fsHelper) {
			h.durableFile("/d/tmp", "abc")
			h.ok(h.fs.Link("/d/tmp", "/d/final"))
			h.syncDir("/d")
		},
		want: map[string]string{"/d/tmp": "abc", "/d/final": "abc"},
	},
	{
		name: "a link and the removal of its source, synced, are a rename",
		run: func(h fsHelper) {
			f := h.create("/d/tmp")
			h.write(f, "abc")
			h.ok(f.Sync())
			h.ok(h.fs.Link("/d/tmp", "/d/final"))
			h.ok(h.fs.Remove("/d/tmp"))
			h.syncDir("/d")
		},
		want: map[string]string{"/d/final": "abc"},
		gone: []string{"/d/tmp"},
	},
	{
		name: "a link into another directory needs that directory synced",
		run: func(h fsHelper) {
			h.mkdir("/e")
			h.syncDir("/")
			h.durableFile("/d/tmp", "abc")
			h.ok(h.fs.Link("/d/tmp", "/e/final"))
			h.syncDir("/d")
			h.ok(h.fs.Link("/d/tmp", "/e/other"))
			h.syncDir("/e")
		},
		want: map[string]string{"/d/tmp": "abc", "/e/final": "abc", "/e/other": "abc"},
	},
	{
		name: "data written after the link is cut at the synced length under both names",
		run: func(h fsHelper) {
			h.durableFile("/d/tmp", "abc")
			h.ok(h.fs.Link("/d/tmp", "/d/final"))
			h.syncDir("/d")
			f := h.openRW("/d/final")
			_, _ = io.ReadAll(f)
			h.write(f, "def")
		},
		want: map[string]string{"/d/tmp": "abc", "/d/final": "abc"},
	},
	{
		name: "a remove without a directory sync is undone",
		run: func(h fsHelper) {
			h.durableFile("/d/f", "abc")
			h.ok(h.fs.Remove("/d/f"))
		},
		want: map[string]string{"/d/f": "abc"},
	},
	{
		name: "a remove after the directory sync sticks",
		run: func(h fsHelper) {
			h.durableFile("/d/f", "abc")
			h.ok(h.fs.Remove("/d/f"))
			h.syncDir("/d")
		},
		gone: []string{"/d/f"},
	},
	{
		name: "RemoveAll without a sync of the parent is undone",
		run: func(h fsHelper) {
			h.durableFile("/d/f", "abc")
			h.ok(h.fs.RemoveAll("/d"))
		},
		want: map[string]string{"/d/f": "abc"},
	},
	{
		name: "a file in a never-synced directory vanishes",
		run: func(h fsHelper) {
			h.mkdir("/n")
			h.durableFile("/n/f", "abc")
		},
		gone: []string{"/n", "/n/f"},
	},
	{
		name: "a new directory survives once its parent is synced",
		run: func(h fsHelper) {
			h.mkdir("/n/m")
			h.syncDir("/")
			h.syncDir("/n")
			h.durableFile("/n/m/f", "abc")
		},
		want: map[string]string{"/n/m/f": "abc"},
	},
	{
		name: "relative names are resolved against the root",
		run: func(h fsHelper) {
			h.durableFile("d/./f", "abc")
			h.mkdir("r")
			h.syncDir(".")
		},
		want: map[string]string{"/d/f": "abc", "d/f": "abc"},
	},
}

func TestCrashCloneIsIndependent(t *testing.T) {
	mem := vfs.NewStrictMem()
	h := fsHelper{t, mem}
	h.mkdir("/d")
	h.syncDir("/")
	f := h.create("/d/f")
	h.write(f, "abc")
	h.ok(f.Sync())
	h.syncDir("/d")

	clone := mem.CrashClone()
	c := fsHelper{t, clone}
	h.write(f, "zzz") // through a handle opened before the clone
	h.ok(f.Sync())
	h.durableFile("/d/only-original", "o")
	c.write(c.create("/d/f"), "q")
	c.durableFile("/d/only-clone", "c")

	if got := h.read("/d/f"); got != "abczzz" {
		t.Errorf("original /d/f = %q, want %q", got, "abczzz")
	}
	if got := c.read("/d/f"); got != "q" {
		t.Errorf("clone /d/f = %q, want %q", got, "q")
	}
	h.absent("/d/only-clone")
	c.absent("/d/only-original")

	// A second crash forgets what the clone did not sync.
	again := fsHelper{t, clone.CrashClone()}
	if got := again.read("/d/f"); got != "abc" {
		t.Errorf("clone of clone /d/f = %q, want %q", got, "abc")
	}
	if got := again.read("/d/only-clone"); got != "c" {
		t.Errorf("clone of clone /d/only-clone = %q, want %q", got, "c")
	}
}

func TestMemErrors(t *testing.T) {
	mem := vfs.NewStrictMem()
	h := fsHelper{t, mem}
	h.mkdir("/d/sub")
	h.durableFile("/d/sub/x", "x")
	h.durableFile("/d/f", "abc")
	ro, err := mem.Open("/d/f")
	h.ok(err)
	dir, err := mem.OpenDir("/d")
	h.ok(err)
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"Create under a file", second(mem.Create("/d/f/g")), syscall.ENOTDIR},
		{"Create over a directory", second(mem.Create("/d")), syscall.EISDIR},
		{"OpenDir on a file", second(mem.OpenDir("/d/f")), syscall.ENOTDIR},
		{"OpenReadWrite on a directory", second(mem.OpenReadWrite("/d")), syscall.EISDIR},
		{"MkdirAll through a file", mem.MkdirAll("/d/f/g", 0o755), syscall.ENOTDIR},
		{"List a file", second(mem.List("/d/f")), syscall.ENOTDIR},
		{"Rename a directory into itself", mem.Rename("/d", "/d/sub/d"), syscall.EINVAL},
		{"Rename a file over a directory", mem.Rename("/d/f", "/d/sub"), syscall.EISDIR},
		{"Rename a directory over a file", mem.Rename("/d/sub", "/d/f"), syscall.ENOTDIR},
		{"Remove the root", mem.Remove("/"), syscall.EINVAL},
		{"RemoveAll the root", mem.RemoveAll("."), syscall.EINVAL},
		{"Truncate a read-only file", ro.Truncate(0), syscall.EINVAL},
		{"Read a directory", second(dir.Read(make([]byte, 1))), syscall.EISDIR},
		{"Write a directory", second(dir.Write([]byte("x"))), syscall.EBADF},
		{"ReadAt a negative offset", second(ro.ReadAt(make([]byte, 1), -1)), syscall.EINVAL},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if fi, err := mem.Stat("/"); err != nil || !fi.IsDir() || fi.Name() != "/" {
		t.Errorf("Stat(/) = %v, %v", fi, err)
	}
	if got := h.read("/d/f"); got != "abc" {
		t.Errorf("/d/f after failed operations = %q", got)
	}
}

// TestMemConcurrency lets readers, a writer, a syncer and crash clones run
// at once; -race checks the locking, the readers check the bytes.
func TestMemConcurrency(t *testing.T) {
	mem := vfs.NewStrictMem()
	h := fsHelper{t, mem}
	w := h.create("/log")
	const chunk, chunks = "0123456789", 200
	h.write(w, chunk)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range chunks {
			if _, err := io.WriteString(w, chunk); err != nil {
				t.Error(err)
			}
			if err := w.Sync(); err != nil {
				t.Error(err)
			}
		}
	})
	r, err := mem.Open("/log")
	h.ok(err)
	for range 4 {
		wg.Go(func() { readChunks(t, r, chunk, chunks) })
	}
	wg.Go(func() {
		for range chunks / 10 {
			_ = mem.CrashClone().String()
		}
	})
	wg.Wait()
}

// readChunks reads whole chunks below the size it sees: every write is
// atomic under the lock, so the size is always a multiple of the chunk and
// every chunk is intact.
func readChunks(t *testing.T, r vfs.File, chunk string, n int) {
	width := int64(len(chunk))
	buf := make([]byte, width)
	for i := range int64(n) {
		fi, err := r.Stat()
		if err != nil || fi.Size() == 0 || fi.Size()%width != 0 {
			t.Errorf("Stat = %v, %v: a write was seen half done", fi, err)
			return
		}
		off := i % (fi.Size() / width) * width
		if _, err := r.ReadAt(buf, off); err != nil || string(buf) != chunk {
			t.Errorf("ReadAt(%d) = %q, %v", off, buf, err)
			return
		}
	}
}

func TestMemString(t *testing.T) {
	mem := vfs.NewStrictMem()
	h := fsHelper{t, mem}
	h.mkdir("/d")
	h.syncDir("/")
	h.durableFile("/d/kept", "abc")
	h.write(h.create("/d/new"), "xy")
	got := mem.String()
	for _, line := range []string{
		"/d/\n",
		"/d/kept size=3 synced=3\n",
		"/d/new size=2 synced=0 (entry not synced)\n",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("String() lacks %q:\n%s", line, got)
		}
	}
	if s := fmt.Sprint(mem); s != got {
		t.Errorf("fmt.Sprint(mem) does not use String")
	}
}

func TestMkdirAllDurableSurvivesCrash(t *testing.T) {
	fs := vfs.NewStrictMem()
	if err := vfs.MkdirAllDurable(fs, "/data/t/shards/s0/wal", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.MkdirAll("/data/volatile/a", 0o755); err != nil {
		t.Fatal(err)
	}
	c := fs.CrashClone()
	if _, err := c.Stat("/data/t/shards/s0/wal"); err != nil {
		t.Fatalf("durable directory lost in a crash: %v", err)
	}
	if _, err := c.Stat("/data/volatile"); err == nil {
		t.Fatal("a directory whose parent was never synced survived a crash: the check proves nothing")
	}
}

// tree reads every reachable file of fs: path → bytes (directories map to
// "<dir>").
func tree(t *testing.T, fs vfs.FS) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		names, err := fs.List(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			p := filepath.Join(dir, n)
			info, err := fs.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if info.IsDir() {
				out[p] = "<dir>"
				walk(p)
				continue
			}
			out[p] = fsHelper{t, fs}.read(p)
		}
	}
	walk("/")
	return out
}

func TestCrashCloneWithNothingKeptIsCrashClone(t *testing.T) {
	for _, tc := range crashCases {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewStrictMem()
			h := fsHelper{t, mem}
			h.mkdir("/d")
			h.syncDir("/")
			tc.run(h)
			want := tree(t, mem.CrashClone())
			for seed := range uint64(20) {
				got := tree(t, mem.CrashCloneWith(vfs.CrashCloneOptions{RNG: rand.New(rand.NewPCG(seed, 1))}))
				if !maps.Equal(got, want) {
					t.Fatalf("seed %d: CrashCloneWith(0%%) = %v, CrashClone = %v", seed, got, want)
				}
			}
		})
	}
}

func TestCrashCloneWithEverythingKeptIsTheLiveTree(t *testing.T) {
	for _, tc := range crashCases {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewStrictMem()
			h := fsHelper{t, mem}
			h.mkdir("/d")
			h.syncDir("/")
			tc.run(h)
			got := tree(t, mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(7, 1))}))
			if want := tree(t, mem); !maps.Equal(got, want) {
				t.Fatalf("CrashCloneWith(100%%) = %v, the live tree = %v", got, want)
			}
		})
	}
}

// TestCrashCloneWithTears: over many seeds a partial clone shows each
// kind of damage a real power loss can leave — a torn append, a hole, an
// overwrite half undone, a rename kept and one lost — and never anything
// else: every byte is the file's synced byte or its live one (zero past the
// synced length), the size lies between the synced and the live size,
// synced files and durable entries survive, and a rename is atomic.
func TestCrashCloneWithTears(t *testing.T) {
	const (
		synced = "0123456789abcdef" // durable, then appended to without a sync
		tail   = "APPENDED-NOT-SYNCED-APPENDED-NOT-SYNCED"
	)
	mem := vfs.NewStrictMem()
	h := fsHelper{t, mem}
	h.mkdir("/d")
	h.syncDir("/")
	h.durableFile("/d/durable", "kept as it is")
	h.durableFile("/d/log", synced)
	log := h.openRW("/d/log")
	_, _ = io.ReadAll(log)
	h.write(log, strings.Repeat(tail, 40)) // 1,560 bytes: several 64-byte blocks
	h.durableFile("/d/over", strings.Repeat("o", 200))
	h.write(h.openRW("/d/over"), strings.Repeat("N", 150))
	h.durableFile("/d/tmp", "renamed")
	h.ok(h.fs.Rename("/d/tmp", "/d/final"))
	h.write(h.create("/d/new"), "never synced")

	live := tree(t, mem)
	var torn, hole, halfUndone, renameKept, renameLost bool
	for seed := range uint64(400) {
		clone := mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: 60, RNG: rand.New(rand.NewPCG(seed, 2))})
		got := tree(t, clone)
		if got["/d/durable"] != "kept as it is" {
			t.Fatalf("seed %d: a synced, durable file became %q", seed, got["/d/durable"])
		}
		checkBytes := func(name, old string) string {
			s, ok := got[name]
			if !ok {
				t.Fatalf("seed %d: durable entry %s lost", seed, name)
			}
			cur := live[name]
			if lo, hi := min(len(old), len(cur)), max(len(old), len(cur)); len(s) < lo || len(s) > hi {
				t.Fatalf("seed %d: %s has %d bytes, not between the synced %d and the live %d", seed, name, len(s), len(old), len(cur))
			}
			for i := range len(s) {
				was, is := byte(0), byte(0)
				if i < len(old) {
					was = old[i]
				}
				is = was
				if i < len(cur) {
					is = cur[i]
				}
				if s[i] != was && s[i] != is {
					t.Fatalf("seed %d: %s byte %d is %q, neither the synced %q nor the live %q", seed, name, i, s[i], was, is)
				}
			}
			return s
		}
		l := checkBytes("/d/log", synced)
		if !strings.HasPrefix(l, synced) {
			t.Fatalf("seed %d: the synced prefix of /d/log is damaged: %q", seed, l[:len(synced)])
		}
		switch rest := l[len(synced):]; {
		case strings.Contains(rest, "\x00"):
			hole = hole || strings.Contains(strings.TrimRight(rest, "\x00"), "\x00")
		case rest != "" && len(l) < len(live["/d/log"]):
			torn = true
		}
		o := checkBytes("/d/over", strings.Repeat("o", 200))
		halfUndone = halfUndone || strings.Contains(o, "N") && strings.Contains(o[:150], "o")
		_, fin := got["/d/final"]
		_, tmp := got["/d/tmp"]
		switch {
		case fin == tmp:
			t.Fatalf("seed %d: after an unsynced rename /d/final exists: %v, /d/tmp exists: %v; want exactly one", seed, fin, tmp)
		case fin:
			renameKept = true
			if got["/d/final"] != "renamed" {
				t.Fatalf("seed %d: the renamed file holds %q", seed, got["/d/final"])
			}
		default:
			renameLost = true
		}
		if s, ok := got["/d/new"]; ok && s != "" && !strings.HasPrefix("never synced", strings.TrimRight(s, "\x00")) {
			t.Fatalf("seed %d: a never-synced file holds %q", seed, s)
		}
	}
	for what, seen := range map[string]bool{"a torn append": torn, "a hole": hole, "an overwrite half undone": halfUndone,
		"a rename kept": renameKept, "a rename lost": renameLost} {
		if !seen {
			t.Errorf("no seed produced %s", what)
		}
	}
}

func TestCrashCloneWithIsReproducible(t *testing.T) {
	mem := vfs.NewStrictMem()
	h := fsHelper{t, mem}
	h.mkdir("/d")
	h.syncDir("/")
	for i := range 20 {
		name := fmt.Sprintf("/d/f%02d", i)
		h.durableFile(name, strings.Repeat("s", 100*i))
		h.write(h.openRW(name), strings.Repeat("x", 50*i+7))
		if i%3 == 0 {
			h.ok(h.fs.Rename(name, name+".renamed"))
		}
	}
	clone := func(seed uint64) map[string]string {
		return tree(t, mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, 3))}))
	}
	if a, b := clone(1), clone(1); !maps.Equal(a, b) {
		t.Fatal("two clones from one seed differ")
	}
	if a, b := clone(1), clone(2); maps.Equal(a, b) {
		t.Fatal("clones from seeds 1 and 2 are equal: the choices are not drawn")
	}
	if got := tree(t, mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: 50})); len(got) == 0 {
		t.Fatal("a clone without an RNG lost the directory /d")
	}
	// The receiver is unchanged and stays usable.
	h.durableFile("/d/after", "a")
	if got := tree(t, mem.CrashClone())["/d/after"]; got != "a" {
		t.Fatalf("the receiver after CrashCloneWith: /d/after = %q", got)
	}
}

// TestCrashCloneWithKeepsEntryChangesInOrder: unsynced entry changes
// survive as a prefix of the order they were made in, across directories,
// as a journaling filesystem commits them: a later change never without
// every earlier one. Every prefix shows up over the seeds.
func TestCrashCloneWithKeepsEntryChangesInOrder(t *testing.T) {
	mem := vfs.NewStrictMem()
	h := fsHelper{t, mem}
	h.mkdir("/d")
	h.mkdir("/e")
	h.syncDir("/")
	for _, n := range []string{"/d/s1", "/d/s2", "/d/s3"} {
		h.durableFile(n, n)
	}
	// The changes, in order: 1 remove s1, 2 remove s2, 3 create /e/x,
	// 4 rename s3 to /e/y, 5 mkdir /d/m.
	h.ok(h.fs.Remove("/d/s1"))
	h.ok(h.fs.Remove("/d/s2"))
	h.create("/e/x")
	h.ok(h.fs.Rename("/d/s3", "/e/y"))
	h.mkdir("/d/m")
	applied := func(got map[string]string) []bool {
		_, s1 := got["/d/s1"]
		_, s2 := got["/d/s2"]
		_, x := got["/e/x"]
		_, y := got["/e/y"]
		_, s3 := got["/d/s3"]
		_, m := got["/d/m"]
		if y == s3 {
			t.Fatalf("the rename is half applied: /e/y %v, /d/s3 %v", y, s3)
		}
		return []bool{!s1, !s2, x, y, m}
	}
	prefixes := map[int]bool{}
	for seed := range uint64(300) {
		got := tree(t, mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: 70, RNG: rand.New(rand.NewPCG(seed, 4))}))
		a := applied(got)
		n := slices.Index(a, false)
		if n < 0 {
			n = len(a)
		}
		if slices.Contains(a[n:], true) {
			t.Fatalf("seed %d: changes applied %v: not a prefix of the order they were made in", seed, a)
		}
		prefixes[n] = true
	}
	for n := range 6 {
		if !prefixes[n] {
			t.Errorf("no seed kept exactly the first %d changes", n)
		}
	}
}

// TestCrashCloneWithKeepsLinkInOrder: a link and the removal of its
// source, after the source was made durable, survive a crash as a prefix of
// the two changes (never the removal without the link), and when both names
// survive they are one inode holding the synced bytes. Every prefix shows
// up over the seeds.
func TestCrashCloneWithKeepsLinkInOrder(t *testing.T) {
	mem := vfs.NewStrictMem()
	h := fsHelper{t, mem}
	h.mkdir("/d")
	h.syncDir("/")
	h.durableFile("/d/tmp", "abc")
	h.ok(mem.Link("/d/tmp", "/d/final"))
	h.ok(mem.Remove("/d/tmp"))
	prefixes := map[int]bool{}
	for seed := range uint64(200) {
		clone := mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: 60, RNG: rand.New(rand.NewPCG(seed, 9))})
		got := tree(t, clone)
		_, tmp := got["/d/tmp"]
		final, linked := got["/d/final"]
		applied := []bool{linked, !tmp}
		n := slices.Index(applied, false)
		if n < 0 {
			n = len(applied)
		}
		if slices.Contains(applied[n:], true) {
			t.Fatalf("seed %d: tree %v is not a prefix of link, remove", seed, got)
		}
		prefixes[n] = true
		if linked && final != "abc" {
			t.Fatalf("seed %d: /d/final = %q, want the synced %q", seed, final, "abc")
		}
		if tmp && linked {
			c := fsHelper{t, clone}
			c.write(c.openRW("/d/final"), "X")
			if got := c.read("/d/tmp"); got != "Xbc" {
				t.Fatalf("seed %d: the two names are two files after the crash: /d/tmp = %q", seed, got)
			}
		}
	}
	for n := range 3 {
		if !prefixes[n] {
			t.Errorf("no seed kept exactly the first %d changes", n)
		}
	}
}

// A crash keeps exactly the bytes of the last Sync however writes since
// changed the file in place: overwrites of synced bytes (a WAL segment
// zero-filled ahead, then written record by record), truncations,
// extensions within and past the array, zeros written past the end. A
// random workload is checked against a plain model after every operation,
// and so is a torn crash's size.
func TestCrashCloneAfterWritesInPlace(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 7))
		mem := vfs.NewStrictMem()
		h := fsHelper{t, mem}
		f := h.create("/f")
		h.syncDir("/")
		var live, synced []byte
		for op := range 200 {
			switch op := rng.IntN(6); op {
			case 0, 1, 2:
				off := rng.IntN(len(live) + 64)
				p := make([]byte, 1+rng.IntN(80))
				for i := range p {
					if op > 0 { // else zeros, as a WAL reserves space
						p[i] = byte('a' + rng.IntN(26))
					}
				}
				if _, err := f.WriteAt(p, int64(off)); err != nil {
					t.Fatal(err)
				}
				if end := off + len(p); end > len(live) {
					live = append(live, make([]byte, end-len(live))...)
				}
				copy(live[off:], p)
			case 3:
				size := rng.IntN(len(live) + 100)
				h.ok(f.Truncate(int64(size)))
				if size < len(live) {
					live = live[:size]
				} else {
					live = append(live, make([]byte, size-len(live))...)
				}
			default:
				h.ok(f.Sync())
				synced = slices.Clone(live)
			}
			if got := h.read("/f"); got != string(live) {
				t.Fatalf("seed %d op %d: live bytes differ from the model", seed, op)
			}
			if got := tree(t, mem.CrashClone())["/f"]; got != string(synced) {
				t.Fatalf("seed %d op %d: a crash kept %d bytes, not the %d synced (%q)", seed, op, len(got), len(synced), got)
			}
			torn := tree(t, mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: 50, RNG: rng}))["/f"]
			if lo, hi := min(len(live), len(synced)), max(len(live), len(synced)); len(torn) < lo || len(torn) > hi {
				t.Fatalf("seed %d op %d: a torn crash kept %d bytes, not between %d and %d", seed, op, len(torn), lo, hi)
			}
		}
	}
}
