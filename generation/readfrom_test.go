package generation

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// The ReaderAt path (ReadStoredFrom, ReadMetaFrom: a generation held by an
// object store) and the file path (ReadStored, ReadMeta) are one code path:
// these tests hold that they accept the same bytes, refuse the same bytes
// with the same error, and check the name the same way.

// objectName is a generation's name as an object store holds it.
func objectName(file string) string {
	return ObjectKey("rollouts", "s-07", file)
}

// TestReadStoredFromMatchesReadStored: the same bytes read as a file and as
// a ReaderAt give the same Meta and rows.
func TestReadStoredFromMatchesReadStored(t *testing.T) {
	_, _, f, b := smallGeneration(t)
	fs := vfs.NewStrictMem()
	putFile(t, fs, "/"+f.Name, b)
	wantMeta, want, err := ReadStored(fs, "/"+f.Name)
	if err != nil {
		t.Fatal(err)
	}
	m, got, err := ReadStoredFrom(bytes.NewReader(b), int64(len(b)), objectName(f.Name))
	if err != nil {
		t.Fatal(err)
	}
	if m != wantMeta || m != f.Meta {
		t.Fatalf("ReadStoredFrom meta %+v, ReadStored %+v, written %+v", m, wantMeta, f.Meta)
	}
	if got.Rows.Schema.Fingerprint() != want.Rows.Schema.Fingerprint() {
		t.Fatalf("ReadStoredFrom schema %s, ReadStored %s", got.Rows.Schema.Fingerprint(), want.Rows.Schema.Fingerprint())
	}
	requireSameData(t, want, got)
	if m, err := ReadMetaFrom(bytes.NewReader(b), int64(len(b)), objectName(f.Name)); err != nil || m != f.Meta {
		t.Fatalf("ReadMetaFrom: %+v, %v; want %+v", m, err, f.Meta)
	}
}

// TestReadFromRefusesWhatReadRefuses: truncations, every footer byte flip
// and seeded random damage give, through the ReaderAt, exactly the result
// of the file: both accept (the same rows), or both refuse with the same
// *CorruptError naming the file.
func TestReadFromRefusesWhatReadRefuses(t *testing.T) {
	_, _, f, b := smallGeneration(t)
	var cases []struct {
		what string
		b    []byte
	}
	add := func(what string, c []byte) {
		cases = append(cases, struct {
			what string
			b    []byte
		}{what, c})
	}
	for n := 0; n < len(b); n += 7 {
		add(fmt.Sprintf("cut to %d of %d bytes", n, len(b)), b[:n])
	}
	footerLen := int(binary.LittleEndian.Uint32(b[len(b)-8:]))
	for i := len(b) - 8 - footerLen; i < len(b); i++ {
		c := bytes.Clone(b)
		c[i] ^= 0x80
		add(fmt.Sprintf("byte %d ^ 0x80", i), c)
	}
	const seed = 20260717
	rng := rand.New(rand.NewPCG(seed, 0))
	for it := range 300 {
		c, how := damage(rng, b)
		add(fmt.Sprintf("seed %d iteration %d (%s)", seed, it, how), c)
	}
	path := "/data/gen/" + f.Name // a path that is also a valid object name's form
	refused := 0
	for _, tc := range cases {
		fs := vfs.NewStrictMem()
		if err := fs.MkdirAll("/data/gen", 0o755); err != nil {
			t.Fatal(err)
		}
		putFile(t, fs, path, tc.b)
		fm, fd, ferr := ReadStored(fs, path)
		rm, rd, rerr := ReadStoredFrom(bytes.NewReader(tc.b), int64(len(tc.b)), path)
		switch {
		case (ferr == nil) != (rerr == nil):
			t.Fatalf("%s: file read %v, ReaderAt read %v", tc.what, ferr, rerr)
		case ferr != nil:
			requireCorrupt(t, rerr, path, tc.what)
			if ferr.Error() != rerr.Error() {
				t.Fatalf("%s: file read %q, ReaderAt read %q", tc.what, ferr, rerr)
			}
			_, merr := ReadMetaFrom(bytes.NewReader(tc.b), int64(len(tc.b)), path)
			_, fmerr := ReadMeta(fs, path)
			if (merr == nil) != (fmerr == nil) || merr != nil && merr.Error() != fmerr.Error() {
				t.Fatalf("%s: ReadMeta %v, ReadMetaFrom %v", tc.what, fmerr, merr)
			}
			refused++
		default:
			if fm != rm || rm != f.Meta {
				t.Fatalf("%s: accepted with meta %+v (file %+v), want %+v", tc.what, rm, fm, f.Meta)
			}
			requireSameData(t, fd, rd)
		}
	}
	t.Logf("%d of %d damaged copies refused, identically by both paths", refused, len(cases))
	if refused < len(cases)/2 {
		t.Fatalf("only %d of %d damaged copies refused", refused, len(cases))
	}
}

// TestReadFromChecksTheName: the last element of the name must agree with
// the footer, as a file's name must: a generation's bytes under another
// generation's object name (or URL) are refused as corrupt. A name that is
// not a generation file name at all is not checked, as for files.
func TestReadFromChecksTheName(t *testing.T) {
	_, _, f, b := smallGeneration(t)
	_, _, attempt, err := ParseName(f.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		objectName(Name(f.Meta.Generation+1, f.Meta.Epoch, attempt)),
		"s3://bucket/lake/" + objectName(Name(f.Meta.Generation, f.Meta.Epoch+1, attempt)),
		Name(f.Meta.Generation+1, f.Meta.Epoch, attempt),
	} {
		_, _, err := ReadStoredFrom(bytes.NewReader(b), int64(len(b)), name)
		requireCorrupt(t, err, name, "under "+name)
		if !strings.Contains(err.Error(), "named for generation") {
			t.Fatalf("under %s: %v, want the name check's refusal", name, err)
		}
		if _, err := ReadMetaFrom(bytes.NewReader(b), int64(len(b)), name); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("ReadMetaFrom under %s: %v, want ErrCorrupt", name, err)
		}
	}
	if _, _, err := ReadStoredFrom(bytes.NewReader(b), int64(len(b)), "some/object"); err != nil {
		t.Fatalf("under a name that is not a generation file name: %v", err)
	}
}

// TestReadFromWrongSizeIsCorrupt: a size that is not the object's (a
// stale Stat, a truncated upload) is refused, never read as other rows.
func TestReadFromWrongSizeIsCorrupt(t *testing.T) {
	_, _, f, b := smallGeneration(t)
	name := objectName(f.Name)
	for _, size := range []int64{-1, 0, 11, int64(len(b)) - 1, int64(len(b)) + 1, int64(len(b)) + 4096} {
		_, _, err := ReadStoredFrom(bytes.NewReader(b), size, name)
		requireCorrupt(t, err, name, fmt.Sprintf("size %d of %d", size, len(b)))
	}
}

// eioReader fails every ReadAt from the n-th on.
type eioReader struct {
	r        io.ReaderAt
	n, calls int
}

func (e *eioReader) ReadAt(p []byte, off int64) (int, error) {
	e.calls++
	if e.calls >= e.n {
		return 0, fmt.Errorf("objstore: read s3://bucket/x: %w", syscall.ECONNREFUSED)
	}
	return e.r.ReadAt(p, off)
}

// TestReadFromErrorsAreNotCorruption: a store failing at any read is an
// I/O error naming the object and wrapping the store's error, not
// ErrCorrupt (the pass retries it; a corrupt file is an alert).
func TestReadFromErrorsAreNotCorruption(t *testing.T) {
	_, _, f, b := smallGeneration(t)
	name := objectName(f.Name)
	probe := &eioReader{r: bytes.NewReader(b), n: math.MaxInt}
	if _, _, err := ReadStoredFrom(probe, int64(len(b)), name); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= probe.calls; n++ {
		_, _, err := ReadStoredFrom(&eioReader{r: bytes.NewReader(b), n: n}, int64(len(b)), name)
		if !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) {
			t.Fatalf("error from read call %d of %d: %v", n, probe.calls, err)
		}
	}
}
