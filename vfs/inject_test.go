package vfs_test

import (
	"errors"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

func TestOpKindString(t *testing.T) {
	for kind, want := range map[vfs.OpKind]string{
		vfs.OpWrite:    "write",
		vfs.OpSync:     "sync",
		vfs.OpRename:   "rename",
		vfs.OpCreate:   "create",
		vfs.OpRemove:   "remove",
		vfs.OpMkdirAll: "mkdirall",
		vfs.OpTruncate: "truncate",
		vfs.OpLink:     "link",
		vfs.OpKind(99): "OpKind(99)",
	} {
		if got := kind.String(); got != want {
			t.Errorf("OpKind(%d).String() = %q, want %q", kind, got, want)
		}
	}
}

// step is one operation of the injector workload and the kind it counts as.
type step struct {
	kind vfs.OpKind
	do   func() error
}

// injectorWorkload returns twelve counted steps over fs, each independent of
// whether the ones before it failed. /d/a and /d/r must exist; f is /d/a
// opened for writing (opening is a read, so it is not counted).
func injectorWorkload(fs vfs.FS, f vfs.File) []step {
	write := func(s string) func() error {
		return func() error { _, err := io.WriteString(f, s); return err }
	}
	create := func(name string) func() error {
		return func() error {
			g, err := fs.Create(name)
			if err == nil {
				err = g.Close()
			}
			return err
		}
	}
	return []step{
		{vfs.OpMkdirAll, func() error { return fs.MkdirAll("/d/sub", 0o755) }}, // 0
		{vfs.OpWrite, write("aa")},                                        // 1
		{vfs.OpCreate, create("/d/c")},                                    // 2
		{vfs.OpWrite, write("bb")},                                        // 3
		{vfs.OpSync, f.Sync},                                              // 4
		{vfs.OpCreate, create("/d/e")},                                    // 5
		{vfs.OpTruncate, func() error { return f.Truncate(3) }},           // 6
		{vfs.OpWrite, write("cc")},                                        // 7
		{vfs.OpSync, f.Sync},                                              // 8
		{vfs.OpRename, func() error { return fs.Rename("/d/a", "/d/b") }}, // 9
		{vfs.OpRemove, func() error { return fs.Remove("/d/r") }},         // 10
		{vfs.OpRemove, func() error { return fs.RemoveAll("/d/sub") }},    // 11
	}
}

// runWorkload runs the workload on a fresh MemFS behind inj and returns the
// indexes of the failed steps, their errors, and the final /d/b.
func runWorkload(t *testing.T, inj *vfs.Injector) (failed []int, errs []error, b string) {
	mem := vfs.NewStrictMem()
	h := fsHelper{t, mem}
	h.mkdir("/d")
	h.ok(h.create("/d/a").Close())
	h.ok(h.create("/d/r").Close())
	fs := vfs.Inject(mem, inj)
	f, err := fs.OpenReadWrite("/d/a")
	h.ok(err)
	defer f.Close()
	for i, s := range injectorWorkload(fs, f) {
		if err := s.do(); err != nil {
			failed, errs = append(failed, i), append(errs, err)
		}
	}
	return failed, errs, h.readIfExists("/d/b")
}

func TestInjectorCounts(t *testing.T) {
	inj := &vfs.Injector{}
	failed, _, b := runWorkload(t, inj)
	if len(failed) != 0 || b != "aab\x00cc" {
		t.Fatalf("unarmed run: failed steps %v, /d/b = %q", failed, b)
	}
	want := map[vfs.OpKind]int64{
		vfs.OpWrite: 3, vfs.OpSync: 2, vfs.OpRename: 1, vfs.OpCreate: 2,
		vfs.OpRemove: 2, vfs.OpMkdirAll: 1, vfs.OpTruncate: 1,
	}
	for kind, n := range want {
		if got := inj.Count(kind); got != n {
			t.Errorf("Count(%v) = %d, want %d", kind, got, n)
		}
	}
	if inj.Ops() != 12 || inj.Crashed() {
		t.Errorf("Ops() = %d, Crashed() = %v, want 12, false", inj.Ops(), inj.Crashed())
	}
}

func TestFailAt(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name   string
		n      int64
		kind   vfs.OpKind
		err    error
		failed []int
		b      string // /d/b afterwards: a failed operation did nothing
	}{
		{"second write", 2, vfs.OpWrite, boom, []int{3}, "aacc"},
		{"first sync", 1, vfs.OpSync, boom, []int{4}, "aab\x00cc"},
		{"second create", 2, vfs.OpCreate, boom, []int{5}, "aab\x00cc"},
		{"truncate", 1, vfs.OpTruncate, boom, []int{6}, "aabbcc"},
		{"rename", 1, vfs.OpRename, boom, []int{9}, "<absent>"},
		{"second remove", 2, vfs.OpRemove, boom, []int{11}, "aab\x00cc"},
		{"mkdirall", 1, vfs.OpMkdirAll, boom, []int{0}, "aab\x00cc"},
		{"nil error means ErrInjected", 1, vfs.OpWrite, nil, []int{1}, "bbcc"},
		{"beyond the workload", 4, vfs.OpWrite, boom, nil, "aab\x00cc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inj := &vfs.Injector{}
			inj.FailAt(tc.n, tc.kind, tc.err)
			failed, errs, b := runWorkload(t, inj)
			if !slices.Equal(failed, tc.failed) {
				t.Fatalf("failed steps %v, want %v (errors %v)", failed, tc.failed, errs)
			}
			want := tc.err
			if want == nil {
				want = vfs.ErrInjected
			}
			for _, err := range errs {
				if !errors.Is(err, want) {
					t.Errorf("error %v, want %v", err, want)
				}
			}
			if b != tc.b {
				t.Errorf("/d/b = %q, want %q", b, tc.b)
			}
		})
	}
}

func TestFailAtSeveralArms(t *testing.T) {
	inj := &vfs.Injector{}
	inj.FailAt(1, vfs.OpWrite, nil)
	inj.FailAt(3, vfs.OpWrite, nil)
	inj.FailAt(2, vfs.OpSync, nil)
	failed, _, _ := runWorkload(t, inj)
	if want := []int{1, 7, 8}; !slices.Equal(failed, want) {
		t.Fatalf("failed steps %v, want %v", failed, want)
	}
}

func TestCrashAtStopsEverything(t *testing.T) {
	for k := int64(1); k <= 13; k++ {
		inj := &vfs.Injector{}
		inj.CrashAt(k)
		failed, errs, _ := runWorkload(t, inj)
		first := int(k - 1) // steps are numbered from 0
		var want []int
		for i := first; i < 12; i++ {
			want = append(want, i)
		}
		if !slices.Equal(failed, want) {
			t.Fatalf("CrashAt(%d): failed steps %v, want %v", k, failed, want)
		}
		for _, err := range errs {
			if !errors.Is(err, vfs.ErrCrashed) || !errors.Is(err, vfs.ErrInjected) {
				t.Fatalf("CrashAt(%d): error %v, want ErrCrashed", k, err)
			}
		}
		if inj.Crashed() != (k <= 12) {
			t.Fatalf("CrashAt(%d): Crashed() = %v", k, inj.Crashed())
		}
	}
}

func TestCrashFailsReads(t *testing.T) {
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	fs := vfs.Inject(mem, inj)
	h := fsHelper{t, fs}
	h.mkdir("/d")
	f := h.create("/d/f")
	h.write(f, "abc")
	inj.CrashAt(inj.Ops() + 1)
	if err := f.Sync(); !errors.Is(err, vfs.ErrCrashed) || !inj.Crashed() {
		t.Fatalf("Sync at the crash point = %v, want ErrCrashed", err)
	}
	for name, err := range map[string]error{
		"Read":          second(f.Read(make([]byte, 1))),
		"ReadAt":        second(f.ReadAt(make([]byte, 1), 0)),
		"File.Stat":     second(f.Stat()),
		"Preallocate":   f.Preallocate(0, 10),
		"Open":          second(fs.Open("/d/f")),
		"OpenReadWrite": second(fs.OpenReadWrite("/d/f")),
		"OpenDir":       second(fs.OpenDir("/d")),
		"List":          second(fs.List("/d")),
		"Stat":          second(fs.Stat("/d/f")),
		"MkdirAll":      fs.MkdirAll("/e", 0o755),
		"Close":         f.Close(),
	} {
		if !errors.Is(err, vfs.ErrCrashed) {
			t.Errorf("%s after the crash = %v, want ErrCrashed", name, err)
		}
	}
	// The underlying file was closed all the same, and the crash did not
	// touch the filesystem below.
	if got := (fsHelper{t, mem}).read("/d/f"); got != "abc" {
		t.Errorf("/d/f below the injector = %q, want %q", got, "abc")
	}
}

// publish writes a file atomically: temp file, fsync, rename, fsync dir.
// Without syncFile it is the classic bug the strict MemFS must expose.
func publish(fs vfs.FS, syncFile bool) error {
	if err := fs.MkdirAll("/d", 0o755); err != nil {
		return err
	}
	if err := syncDir(fs, "/"); err != nil {
		return err
	}
	f, err := fs.Create("/d/tmp")
	if err != nil {
		return err
	}
	defer f.Close()
	for _, s := range []string{"hello", " world"} {
		if _, err := io.WriteString(f, s); err != nil {
			return err
		}
	}
	if syncFile {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := fs.Rename("/d/tmp", "/d/final"); err != nil {
		return err
	}
	return syncDir(fs, "/d")
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// publishOutcomes crashes publish at every mutating operation in turn and
// returns, per k, /d/final as it is after the crash ("<absent>" if gone).
func publishOutcomes(t *testing.T, syncFile bool) []string {
	probe := &vfs.Injector{}
	if err := publish(vfs.Inject(vfs.NewStrictMem(), probe), syncFile); err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for k := int64(1); k <= probe.Ops()+1; k++ {
		mem, inj := vfs.NewStrictMem(), &vfs.Injector{}
		inj.CrashAt(k)
		err := publish(vfs.Inject(mem, inj), syncFile)
		if (err != nil) != (k <= probe.Ops()) || (err != nil && !errors.Is(err, vfs.ErrCrashed)) {
			t.Fatalf("CrashAt(%d) of %d ops: publish = %v", k, probe.Ops(), err)
		}
		outcomes = append(outcomes, finalAfterCrash(t, mem))
	}
	return outcomes
}

func finalAfterCrash(t *testing.T, mem *vfs.MemFS) string {
	return fsHelper{t, mem.CrashClone()}.readIfExists("/d/final")
}

// TestCrashAtEveryOp is the pattern other packages follow: count a
// workload's operations, crash at each, and check the invariant on what
// survives. It also proves the harness catches a missing fsync.
func TestCrashAtEveryOp(t *testing.T) {
	outcomes := publishOutcomes(t, true)
	for k, got := range outcomes {
		if got != "<absent>" && got != "hello world" {
			t.Errorf("crash at op %d: /d/final = %q, want absent or whole", k+1, got)
		}
	}
	if last := outcomes[len(outcomes)-1]; last != "hello world" {
		t.Errorf("without a crash /d/final = %q", last)
	}

	broken := publishOutcomes(t, false)
	if !slices.Contains(broken, "") {
		t.Errorf("publish without the file fsync left %q: the torn file went unnoticed", broken)
	}
}

func TestNoSpaceAfter(t *testing.T) {
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	fs := vfs.Inject(mem, inj)
	h := fsHelper{t, fs}
	f := h.create("/f")
	h.write(f, "abcdef")
	inj.NoSpaceAfter(4)
	for _, tc := range []struct {
		data string
		full bool
	}{
		{"ghijk", true}, // does not fit: nothing of it is written
		{"gh", false},
		{"ij", false},
		{"k", true},
	} {
		n, err := io.WriteString(f, tc.data)
		if full := errors.Is(err, syscall.ENOSPC); full != tc.full || (full && n != 0) {
			t.Fatalf("Write(%q) = %d, %v; want ENOSPC %v", tc.data, n, err, tc.full)
		}
		if errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("ENOSPC must look real, got %v", err)
		}
	}
	if got := h.read("/f"); got != "abcdefghij" {
		t.Errorf("/f = %q, want %q", got, "abcdefghij")
	}
}

// Under a space budget Preallocate reserves space as fallocate does:
// writes into the reserved range take none, a range that does not fit
// fails with ENOSPC, and raising the budget frees space again.
func TestNoSpacePreallocate(t *testing.T) {
	inj := &vfs.Injector{}
	fs := vfs.Inject(vfs.NewStrictMem(), inj)
	h := fsHelper{t, fs}
	f := h.create("/f")
	inj.NoSpaceAfter(8)
	h.ok(f.Preallocate(0, 6))
	h.write(f, "abcdef") // reserved: takes nothing more
	if err := f.Preallocate(6, 4); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Preallocate past the budget: %v, want ENOSPC", err)
	}
	h.write(f, "gh") // the 2 bytes left
	if _, err := io.WriteString(f, "i"); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write on a full disk: %v, want ENOSPC", err)
	}
	inj.NoSpaceAfter(1 << 20)
	h.ok(f.Preallocate(8, 4))
	h.write(f, "ijkl")
	if got := h.read("/f"); got != "abcdefghijkl" {
		t.Errorf("/f = %q", got)
	}
}

// WriteAt is a write to the Injector: counted as one, charged only for
// bytes past what the file holds or reserved, refused whole with ENOSPC,
// and failed after a crash.
func TestInjectorWriteAt(t *testing.T) {
	inj := &vfs.Injector{}
	fs := vfs.Inject(vfs.NewStrictMem(), inj)
	h := fsHelper{t, fs}
	f := h.create("/f")
	inj.NoSpaceAfter(8)
	if _, err := f.WriteAt(make([]byte, 6), 0); err != nil { // zero-fill ahead: takes 6
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("abcdef"), 0); err != nil { // into the zeros: takes nothing
		t.Fatal(err)
	}
	if n, err := f.WriteAt([]byte("ghi"), 6); n != 0 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("WriteAt past the budget = %d, %v, want 0 and ENOSPC", n, err)
	}
	if _, err := f.WriteAt([]byte("gh"), 6); err != nil {
		t.Fatal(err)
	}
	if left := inj.SpaceLeft(); left != 0 {
		t.Errorf("space left %d, want 0", left)
	}
	if got := inj.Count(vfs.OpWrite); got != 4 {
		t.Errorf("%d writes counted, want 4", got)
	}
	if got := h.read("/f"); got != "abcdefgh" {
		t.Errorf("/f = %q", got)
	}
	inj.CrashAt(inj.Ops() + 1)
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, vfs.ErrCrashed) {
		t.Fatalf("WriteAt at the crash = %v, want ErrCrashed", err)
	}
}

// TestInjectorConcurrentCounts checks that counting loses nothing when
// many goroutines write at once (run with -race).
func TestInjectorConcurrentCounts(t *testing.T) {
	inj := &vfs.Injector{}
	fs := vfs.Inject(vfs.NewStrictMem(), inj)
	h := fsHelper{t, fs}
	f := h.create("/f")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if _, err := f.Write([]byte("x")); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if inj.Count(vfs.OpWrite) != 800 || inj.Ops() != 801 {
		t.Fatalf("Count(write) = %d, Ops() = %d, want 800, 801", inj.Count(vfs.OpWrite), inj.Ops())
	}
}

func TestInjectNil(t *testing.T) {
	mem := vfs.NewStrictMem()
	if vfs.Inject(mem, nil) != vfs.FS(mem) {
		t.Fatal("Inject(fs, nil) must return fs")
	}
}

// TestInjectorLink: Link is a mutating operation of its own kind, failed
// and crashed like a rename, and a failed Link creates nothing.
func TestInjectorLink(t *testing.T) {
	mem := vfs.NewStrictMem()
	h := fsHelper{t, mem}
	h.mkdir("/d")
	h.durableFile("/d/src", "abc")
	inj := &vfs.Injector{}
	fs := vfs.Inject(mem, inj)
	boom := errors.New("boom")
	inj.FailAt(1, vfs.OpLink, boom)
	if err := fs.Link("/d/src", "/d/a"); !errors.Is(err, boom) {
		t.Fatalf("armed Link = %v, want boom", err)
	}
	h.absent("/d/a")
	if err := fs.Link("/d/src", "/d/a"); err != nil {
		t.Fatalf("second Link = %v", err)
	}
	if got := h.read("/d/a"); got != "abc" {
		t.Fatalf("/d/a = %q", got)
	}
	if err := fs.Link("/d/src", "/d/a"); !errors.Is(err, os.ErrExist) {
		t.Fatalf("Link over an existing name through the injector = %v, want ErrExist", err)
	}
	if inj.Count(vfs.OpLink) != 3 || inj.Ops() != 3 {
		t.Fatalf("Count(link) = %d, Ops = %d, want 3, 3", inj.Count(vfs.OpLink), inj.Ops())
	}
	inj.CrashAt(inj.Ops() + 1)
	if err := fs.Link("/d/src", "/d/b"); !errors.Is(err, vfs.ErrCrashed) {
		t.Fatalf("Link at the crash point = %v, want ErrCrashed", err)
	}
	h.absent("/d/b")
}
