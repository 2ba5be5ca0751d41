// Package storetest is the contract every objstore backend must keep, as a
// test suite that each backend's tests run against their own stores.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/objstore"
)

// Run runs the contract. open returns a fresh, empty store for each
// subtest; an S3 store should have a small Options.ListPageSize, so that
// List pages.
func Run(t *testing.T, open func(t *testing.T) objstore.Store) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("storetest seed %d", seed)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, objstore.Store, *rand.Rand)
	}{
		{"CreateOpenReadAt", testCreateOpenReadAt},
		{"EmptyObject", testEmptyObject},
		{"ExistsKeepsFirst", testExistsKeepsFirst},
		{"NotFound", testNotFound},
		{"List", testList},
		{"ListMany", testListMany},
		{"Delete", testDelete},
		{"InvalidNames", testInvalidNames},
		{"ShortReader", testShortReader},
		{"RacingCreates", testRacingCreates},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t), rand.New(rand.NewPCG(seed, uint64(len(tc.name)))))
		})
	}
}

// Bytes returns n seeded random bytes.
func Bytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// Create creates name with b, failing the test on error.
func Create(t testing.TB, s objstore.Store, name string, b []byte) {
	t.Helper()
	if err := s.Create(context.Background(), name, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatalf("Create(%s): %v", name, err)
	}
}

// ReadAll returns the whole object, failing the test on error.
func ReadAll(t testing.TB, s objstore.Store, name string) []byte {
	t.Helper()
	o, err := s.Open(context.Background(), name)
	if err != nil {
		t.Fatalf("Open(%s): %v", name, err)
	}
	defer o.Close()
	b := make([]byte, o.Size())
	if n, err := o.ReadAt(b, 0); n != len(b) || (err != nil && err != io.EOF) {
		t.Fatalf("ReadAt(%s, whole %d bytes) = %d, %v", name, len(b), n, err)
	}
	return b
}

// Names lists the names below prefix.
func Names(t testing.TB, s objstore.Store, prefix string) []string {
	t.Helper()
	infos, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	names := make([]string, len(infos))
	for i, info := range infos {
		names[i] = info.Name
	}
	return names
}

// NamesObject checks that err names the operation and the object's URL.
func NamesObject(t testing.TB, err error, op string, s objstore.Store, name string) {
	t.Helper()
	want := "objstore: " + op + " " + s.String() + "/" + name + ": "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v: want it to begin %q", err, want)
	}
}

func testCreateOpenReadAt(t *testing.T, s objstore.Store, rng *rand.Rand) {
	ctx := context.Background()
	const name = "gen/shard-a/00000001.parquet"
	want := Bytes(rng, 100_000+rng.IntN(1000))
	Create(t, s, name, want)
	o, err := s.Open(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.Size() != int64(len(want)) {
		t.Fatalf("Size = %d, want %d", o.Size(), len(want))
	}
	size := len(want)
	for _, r := range []struct{ off, n int }{
		{0, 1}, {0, 4096}, {1, 17}, {size / 2, 10_000}, {size - 1, 1}, {0, size},
	} {
		got := make([]byte, r.n)
		n, err := o.ReadAt(got, int64(r.off))
		if n != r.n || (err != nil && err != io.EOF) || !bytes.Equal(got, want[r.off:r.off+r.n]) {
			t.Errorf("ReadAt(%d bytes at %d) = %d, %v; bytes equal: %v", r.n, r.off, n, err, bytes.Equal(got[:n], want[r.off:r.off+n]))
		}
	}
	// Past the end: short with io.EOF, then nothing with io.EOF.
	got := make([]byte, 100)
	if n, err := o.ReadAt(got, int64(size-40)); n != 40 || err != io.EOF || !bytes.Equal(got[:40], want[size-40:]) {
		t.Errorf("ReadAt across the end = %d, %v; want 40, EOF", n, err)
	}
	if n, err := o.ReadAt(got, int64(size)); n != 0 || err != io.EOF {
		t.Errorf("ReadAt at the end = %d, %v; want 0, EOF", n, err)
	}
	// Concurrent readers.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			off := i * (size / 8)
			b := make([]byte, size/8)
			if n, err := o.ReadAt(b, int64(off)); n != len(b) || (err != nil && err != io.EOF) || !bytes.Equal(b, want[off:off+len(b)]) {
				errs <- fmt.Errorf("concurrent ReadAt at %d = %d, %v", off, n, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	info, err := s.Stat(ctx, name)
	if err != nil || info.Name != name || info.Size != int64(size) {
		t.Errorf("Stat = %+v, %v; want %s of %d bytes", info, err, name, size)
	}
}

func testEmptyObject(t *testing.T, s objstore.Store, _ *rand.Rand) {
	Create(t, s, "empty", nil)
	if got := ReadAll(t, s, "empty"); len(got) != 0 {
		t.Errorf("empty object reads %d bytes", len(got))
	}
	if info, err := s.Stat(context.Background(), "empty"); err != nil || info.Size != 0 {
		t.Errorf("Stat(empty) = %+v, %v", info, err)
	}
}

func testExistsKeepsFirst(t *testing.T, s objstore.Store, rng *rand.Rand) {
	first, second := Bytes(rng, 3000), Bytes(rng, 2000)
	Create(t, s, "meta/v1.json", first)
	err := s.Create(context.Background(), "meta/v1.json", bytes.NewReader(second), int64(len(second)))
	if !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("second Create = %v, want ErrExists", err)
	}
	NamesObject(t, err, "create", s, "meta/v1.json")
	// The same bytes again: the name is taken all the same.
	err = s.Create(context.Background(), "meta/v1.json", bytes.NewReader(first), int64(len(first)))
	if !errors.Is(err, objstore.ErrExists) {
		t.Errorf("Create with the same bytes again = %v, want ErrExists", err)
	}
	if got := ReadAll(t, s, "meta/v1.json"); !bytes.Equal(got, first) {
		t.Errorf("object holds %d bytes, not the first create's %d", len(got), len(first))
	}
}

func testNotFound(t *testing.T, s objstore.Store, _ *rand.Rand) {
	ctx := context.Background()
	_, err := s.Open(ctx, "no/such")
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Open(missing) = %v, want ErrNotFound", err)
	}
	NamesObject(t, err, "open", s, "no/such")
	_, err = s.Stat(ctx, "no/such")
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat(missing) = %v, want ErrNotFound", err)
	}
	NamesObject(t, err, "stat", s, "no/such")
	if err := s.Delete(ctx, "no/such"); err != nil {
		t.Errorf("Delete(missing) = %v, want nil", err)
	}
	// A directory-like prefix of an object is no object.
	Create(t, s, "dir/obj", []byte("x"))
	if _, err := s.Stat(ctx, "dir"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat(prefix of an object) = %v, want ErrNotFound", err)
	}
}

func testList(t *testing.T, s objstore.Store, _ *rand.Rand) {
	names := []string{"x/2", "x/10", "x/1", "x/sub/3", "x.y", "xy", "y", "x/sub/deeper/4", "é/1"}
	for i, n := range names {
		Create(t, s, n, bytes.Repeat([]byte{'a'}, i+1))
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"x.y", "x/1", "x/10", "x/2", "x/sub/3", "x/sub/deeper/4", "xy", "y", "é/1"}},
		{"x/", []string{"x/1", "x/10", "x/2", "x/sub/3", "x/sub/deeper/4"}},
		{"x", []string{"x.y", "x/1", "x/10", "x/2", "x/sub/3", "x/sub/deeper/4", "xy"}},
		{"x/1", []string{"x/1", "x/10"}},
		{"x/sub", []string{"x/sub/3", "x/sub/deeper/4"}},
		{"x/sub/", []string{"x/sub/3", "x/sub/deeper/4"}},
		{"nope/", nil},
		{"nope", nil},
		{"y", []string{"y"}},
	} {
		if got := Names(t, s, tc.prefix); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	infos, err := s.List(context.Background(), "y")
	if err != nil || len(infos) != 1 || infos[0].Size != int64(slices.Index(names, "y")+1) {
		t.Errorf("List(y) = %+v, %v: want its size", infos, err)
	}
}

func testListMany(t *testing.T, s objstore.Store, rng *rand.Rand) {
	const n = 150
	var want []string
	order := rng.Perm(n)
	for _, i := range order {
		name := fmt.Sprintf("many/%05d", i)
		Create(t, s, name, []byte(name))
	}
	for i := range n {
		want = append(want, fmt.Sprintf("many/%05d", i))
	}
	if got := Names(t, s, "many/"); !slices.Equal(got, want) {
		t.Errorf("List(many/) = %d names %q..., want %d sorted", len(got), got[:min(5, len(got))], n)
	}
}

func testDelete(t *testing.T, s objstore.Store, rng *rand.Rand) {
	ctx := context.Background()
	Create(t, s, "d/a", Bytes(rng, 10))
	Create(t, s, "d/b", Bytes(rng, 10))
	if err := s.Delete(ctx, "d/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "d/a"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat after Delete = %v, want ErrNotFound", err)
	}
	if got := Names(t, s, "d/"); !slices.Equal(got, []string{"d/b"}) {
		t.Errorf("List after Delete = %q", got)
	}
	if err := s.Delete(ctx, "d/a"); err != nil {
		t.Errorf("second Delete = %v, want nil", err)
	}
	again := Bytes(rng, 20)
	Create(t, s, "d/a", again) // the name is free again
	if got := ReadAll(t, s, "d/a"); !bytes.Equal(got, again) {
		t.Error("recreated object reads other bytes")
	}
}

// BadNames break the naming rules.
var BadNames = []string{
	"", "/abs", "a//b", "a/", "../x", "a/../b", "./a", "a/./b", "..",
	"a\x00b", "a\nb", "tab\there", "bad\xffutf8", "back\\slash",
	strings.Repeat("n", objstore.MaxNameLen+1), strings.Repeat("s", 201) + "/x",
	"gen/1" + objstore.TempSuffix, "dir" + objstore.TempSuffix + "/x",
}

func testInvalidNames(t *testing.T, s objstore.Store, _ *rand.Rand) {
	ctx := context.Background()
	for _, name := range BadNames {
		quoted := strconv.Quote(name)
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, objstore.ErrInvalidName) || !strings.Contains(err.Error(), quoted) ||
				!strings.HasPrefix(err.Error(), "objstore: "+op+" ") {
				t.Errorf("%s(%s) = %v: want ErrInvalidName naming the operation and %s", op, quoted, err, quoted)
			}
		}
		check("create", s.Create(ctx, name, bytes.NewReader([]byte("x")), 1))
		_, err := s.Open(ctx, name)
		check("open", err)
		_, err = s.Stat(ctx, name)
		check("stat", err)
		check("delete", s.Delete(ctx, name))
	}
	for _, prefix := range []string{"/abs", "a//", "../", "a\x00"} {
		if _, err := s.List(ctx, prefix); !errors.Is(err, objstore.ErrInvalidName) {
			t.Errorf("List(%q) = %v, want ErrInvalidName", prefix, err)
		}
	}
	if got := Names(t, s, ""); len(got) != 0 {
		t.Errorf("invalid creates left objects: %q", got)
	}
}

func testShortReader(t *testing.T, s objstore.Store, _ *rand.Rand) {
	err := s.Create(context.Background(), "short", bytes.NewReader([]byte("abc")), 10)
	if err == nil {
		t.Fatal("Create of 10 bytes from a 3-byte reader succeeded")
	}
	NamesObject(t, err, "create", s, "short")
	if got := Names(t, s, ""); len(got) != 0 {
		t.Errorf("a failed create left %q", got)
	}
}

// testRacingCreates races 16 creates of one name with different bytes:
// exactly one wins, every other gets ErrExists, and the object holds the
// winner's bytes.
func testRacingCreates(t *testing.T, s objstore.Store, rng *rand.Rand) {
	payloads := make([][]byte, 16)
	for i := range payloads {
		payloads[i] = Bytes(rng, 50_000+i)
	}
	RaceCreates(t, s, "race/obj", payloads)
}

// RaceCreates has one goroutine per payload create name at once: exactly
// one must succeed, every other get ErrExists, and the object hold the
// winner's bytes.
func RaceCreates(t testing.TB, s objstore.Store, name string, payloads [][]byte) {
	t.Helper()
	errs := make([]error, len(payloads))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range payloads {
		wg.Go(func() {
			<-start
			errs[i] = s.Create(context.Background(), name, bytes.NewReader(payloads[i]), int64(len(payloads[i])))
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("racers %d and %d both succeeded", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, objstore.ErrExists):
			t.Errorf("racer %d: %v, want nil or ErrExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no racer succeeded")
	}
	if got := ReadAll(t, s, name); !bytes.Equal(got, payloads[winner]) {
		t.Errorf("the object holds %d bytes, not winner %d's %d", len(got), winner, len(payloads[winner]))
	}
}
