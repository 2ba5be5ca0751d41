package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/objstore/storetest"
	"github.com/rollwal/rollwal/vfs"
)

func openFile(t testing.TB, fs vfs.FS, dir string) objstore.Store {
	t.Helper()
	s, err := objstore.Open(context.Background(), "file://"+dir, objstore.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFileContractStrictMem(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store { return openFile(t, vfs.NewStrictMem(), "/data/objects") })
}

func TestFileContractOS(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store { return openFile(t, vfs.Default, t.TempDir()) })
}

// TestFileCreateIsDurable: an object whose Create returned survives a
// crash whole, on the strict filesystem that forgets everything unsynced,
// directory entries included.
func TestFileCreateIsDurable(t *testing.T) {
	mem := vfs.NewStrictMem()
	s := openFile(t, mem, "/data")
	want := storetest.Bytes(rand.New(rand.NewPCG(1, 2)), 70_000)
	storetest.Create(t, s, "gen/deep/dir/00000001.parquet", want)
	after := openFile(t, mem.CrashClone(), "/data")
	if got := storetest.ReadAll(t, after, "gen/deep/dir/00000001.parquet"); !bytes.Equal(got, want) {
		t.Fatalf("after a crash the object holds %d bytes, want %d", len(got), len(want))
	}
}

// TestFileCrashDuringCreate crashes at every mutating operation a Create
// makes, on clones that keep none, some or all of what was not synced: the
// object is then absent or whole, never partial; List never shows a
// temporary file; and the name can be created afresh when it is absent.
func TestFileCrashDuringCreate(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	want := storetest.Bytes(rng, 40_000)
	const name = "gen/00000007.parquet"

	// Count the operations of a whole Create.
	var count vfs.Injector
	s := openFile(t, vfs.Inject(vfs.NewStrictMem(), &count), "/data")
	before := count.Ops()
	storetest.Create(t, s, name, want)
	total := count.Ops()
	if total-before < 4 {
		t.Fatalf("a Create made %d mutating operations; the walk below would test nothing", total-before)
	}
	var absent, whole int
	for k := int64(1); k <= total+1; k++ {
		for _, percent := range []int{0, 50, 100} {
			mem := vfs.NewStrictMem()
			inj := &vfs.Injector{}
			inj.CrashAt(k)
			s, err := objstore.Open(context.Background(), "file:///data", objstore.Options{FS: vfs.Inject(mem, inj)})
			if err == nil {
				err = s.Create(context.Background(), name, bytes.NewReader(want), int64(len(want)))
			}
			if k <= total && err == nil {
				t.Fatalf("crash at op %d: Create returned nil", k)
			}
			clone := mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: percent, RNG: rand.New(rand.NewPCG(seed, uint64(k)))})
			if err := clone.MkdirAll("/data", 0o755); err != nil {
				t.Fatal(err)
			}
			after := openFile(t, clone, "/data")
			names := storetest.Names(t, after, "")
			switch {
			case len(names) == 0:
				absent++
				if _, err := after.Stat(context.Background(), name); !errors.Is(err, objstore.ErrNotFound) {
					t.Errorf("crash at op %d (%d%% kept): List shows nothing but Stat = %v", k, percent, err)
				}
				storetest.Create(t, after, name, want) // a leftover temporary file is in nobody's way
			case slices.Equal(names, []string{name}):
				whole++
				if got := storetest.ReadAll(t, after, name); !bytes.Equal(got, want) {
					t.Errorf("crash at op %d (%d%% kept): the object holds %d bytes, not the %d written", k, percent, len(got), len(want))
				}
			default:
				t.Errorf("crash at op %d (%d%% kept): List = %q", k, percent, names)
			}
			if err == nil && len(names) == 0 {
				t.Errorf("crash at op %d: Create returned nil but the object is gone", k)
			}
		}
	}
	if absent == 0 || whole == 0 {
		t.Errorf("outcomes: %d absent, %d whole; the crash points missed one side", absent, whole)
	}
}

// TestFileFailedSyncLeavesNothing: a Create whose file sync fails returns
// the error, naming the object, and leaves no file behind.
func TestFileFailedSyncLeavesNothing(t *testing.T) {
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	s := openFile(t, vfs.Inject(mem, inj), "/data")
	inj.FailAt(inj.Count(vfs.OpSync)+1, vfs.OpSync, nil)
	err := s.Create(context.Background(), "a/b", bytes.NewReader([]byte("hello")), 5)
	if !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("Create = %v, want the injected error", err)
	}
	storetest.NamesObject(t, err, "create", s, "a/b")
	var left []string
	entries, _ := mem.List("/data/a")
	left = append(left, entries...)
	if len(left) != 0 {
		t.Errorf("files left behind: %q", left)
	}
}

// TestFileFailedLinkLeavesNothing: a Create whose link into place fails
// returns the error, naming the object, and leaves neither the object nor
// its temporary file; the name can then be created.
func TestFileFailedLinkLeavesNothing(t *testing.T) {
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	s := openFile(t, vfs.Inject(mem, inj), "/data")
	inj.FailAt(inj.Count(vfs.OpLink)+1, vfs.OpLink, nil)
	err := s.Create(context.Background(), "a/b", bytes.NewReader([]byte("hello")), 5)
	if !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("Create = %v, want the injected error", err)
	}
	storetest.NamesObject(t, err, "create", s, "a/b")
	if left, _ := mem.List("/data/a"); len(left) != 0 {
		t.Errorf("files left behind: %q", left)
	}
	storetest.Create(t, s, "a/b", []byte("hello"))
}

// TestFileListSkipsTemporaryFiles: a temporary file left by a crash is
// not an object.
func TestFileListSkipsTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, vfs.Default, dir)
	storetest.Create(t, s, "g/1", []byte("one"))
	f, err := vfs.Default.Create(filepath.Join(dir, "g", "2.0123456789abcdef"+objstore.TempSuffix))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := storetest.Names(t, s, ""); !slices.Equal(got, []string{"g/1"}) {
		t.Errorf("List = %q, want only g/1", got)
	}
}

func TestOpenRefusesBadURLs(t *testing.T) {
	for _, url := range []string{
		"", "relative/dir", "file://host/dir", "file:///rel/../dir", "file:///dir/", "ftp://x/y",
		"s3://", "s3:///prefix", "s3://b/a//b", "s3://b/p?x=1", "file:///d#frag",
	} {
		if _, err := objstore.Open(context.Background(), url, objstore.Options{FS: vfs.NewStrictMem()}); err == nil {
			t.Errorf("Open(%q) succeeded", url)
		} else if !strings.Contains(err.Error(), "objstore: open") {
			t.Errorf("Open(%q) = %v: want it to name the operation", url, err)
		}
	}
	for _, o := range []objstore.Options{{MaxAttempts: -1}, {PartSize: 1 << 20}, {ListPageSize: 1001}, {AccessKey: "a"}} {
		o.FS = vfs.NewStrictMem()
		if _, err := objstore.Open(context.Background(), "file:///d", o); err == nil {
			t.Errorf("Open with %+v succeeded", o)
		}
	}
}

// TestFileMetrics: file:// operations are counted by operation and
// outcome, with the bytes written and read.
func TestFileMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	s, err := objstore.Open(context.Background(), "file:///d", objstore.Options{FS: vfs.NewStrictMem(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Create(t, s, "a", []byte("12345"))
	_ = createErr(s, "a", []byte("other"))
	_, _ = s.Stat(context.Background(), "missing")
	got := storetest.ReadAll(t, s, "a")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"writer_objstore_requests_total", map[string]string{"op": "create", "outcome": "ok"}, 1},
		{"writer_objstore_requests_total", map[string]string{"op": "create", "outcome": "exists"}, 1},
		{"writer_objstore_requests_total", map[string]string{"op": "stat", "outcome": "not_found"}, 1},
		{"writer_objstore_requests_total", map[string]string{"op": "open", "outcome": "ok"}, 1},
		{"writer_objstore_bytes_total", map[string]string{"op": "create"}, 5},
		{"writer_objstore_bytes_total", map[string]string{"op": "read"}, float64(len(got))},
		{"writer_objstore_request_duration_seconds", map[string]string{"op": "create"}, 2},
	} {
		c.labels["backend"] = "file"
		if v := counter(t, reg, c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	// A second store on the same registry shares the metrics.
	if _, err := objstore.Open(context.Background(), "file:///e", objstore.Options{FS: vfs.NewStrictMem(), Registerer: reg}); err != nil {
		t.Fatalf("a second store on one Registerer: %v", err)
	}
}
