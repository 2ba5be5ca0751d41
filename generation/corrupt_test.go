package generation

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// readBoth runs ReadMeta and Read on path and returns Read's results; it
// fails the test if the two disagree about whether the footer is valid in
// a way that is not explained by the rows.
func readBoth(t *testing.T, fs vfs.FS, path string, s *schema.Schema) (Meta, Data, error) {
	t.Helper()
	_, metaErr := ReadMeta(fs, path)
	m, d, err := Read(fs, path, s)
	if metaErr != nil && err == nil {
		t.Fatalf("ReadMeta refused %s (%v) but Read accepted it", path, metaErr)
	}
	return m, d, err
}

func requireCorrupt(t *testing.T, err error, path, what string) {
	t.Helper()
	var ce *CorruptError
	switch {
	case err == nil:
		t.Fatalf("%s: accepted", what)
	case !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce):
		t.Fatalf("%s: error %v does not wrap ErrCorrupt", what, err)
	case ce.Path != path || !strings.Contains(err.Error(), path):
		t.Fatalf("%s: error %q does not name %s", what, err, path)
	}
}

func fileBytes(t testing.TB, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func putFile(t testing.TB, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// smallGeneration writes a small generation and returns its bytes.
func smallGeneration(t testing.TB) (*schema.Schema, Data, File, []byte) {
	t.Helper()
	s := allTypes(t)
	fs, dir := newMemDir(t)
	d := allTypesRows(t, s, 40, 20)
	f := mustWrite(t, Options{FS: fs, RowGroupRows: 16}, dir, s, testMeta(), d)
	return s, d, f, fileBytes(t, fs, f.Path)
}

func TestNotParquetIsCorrupt(t *testing.T) {
	s := allTypes(t)
	fs := vfs.NewStrictMem()
	cases := map[string][]byte{
		"empty":        nil,
		"text":         []byte("hello, this is not a parquet file at all\n"),
		"json":         []byte(`{"rows":[{"id":"a"}]}`),
		"magic only":   []byte("PAR1"),
		"two magics":   []byte("PAR1PAR1"),
		"empty footer": []byte("PAR1\x00\x00\x00\x00PAR1"),
		"huge footer":  append([]byte("PAR1xxxxxxxxxxxxxxxx"), 0xff, 0xff, 0xff, 0x7f, 'P', 'A', 'R', '1'),
		"zeros":        make([]byte, 4096),
	}
	for name, b := range cases {
		path := "/" + strings.ReplaceAll(name, " ", "-")
		putFile(t, fs, path, b)
		_, _, err := readBoth(t, fs, path, s)
		requireCorrupt(t, err, path, name)
	}
	// A missing file is not corrupt: it is the filesystem's error.
	if _, err := ReadMeta(fs, "/missing"); err == nil || errors.Is(err, ErrCorrupt) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestTruncatedIsCorrupt(t *testing.T) {
	s, _, _, b := smallGeneration(t)
	fs := vfs.NewStrictMem()
	for n := 0; n < len(b); n++ {
		path := fmt.Sprintf("/cut-%d", n)
		putFile(t, fs, path, b[:n])
		_, _, err := readBoth(t, fs, path, s)
		requireCorrupt(t, err, path, fmt.Sprintf("cut to %d of %d bytes", n, len(b)))
		_ = fs.Remove(path)
	}
}

// Every single-byte flip in the footer (Thrift metadata, length, magic) is
// either refused as corrupt or harmless: the file still reads back the same
// rows and Meta. Never a panic, never another error, never wrong data.
func TestFlippedFooterBytes(t *testing.T) {
	s, d, f, b := smallGeneration(t)
	footerLen := int(binary.LittleEndian.Uint32(b[len(b)-8:]))
	start := len(b) - 8 - footerLen
	fs := vfs.NewStrictMem()
	detected := 0
	for i := start; i < len(b); i++ {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			c := bytes.Clone(b)
			c[i] ^= mask
			path := "/" + f.Name
			putFile(t, fs, path, c)
			m, got, err := readBoth(t, fs, path, s)
			what := fmt.Sprintf("byte %d of %d (footer offset %d) ^ %#x", i, len(b), i-start, mask)
			if err != nil {
				requireCorrupt(t, err, path, what)
				detected++
				continue
			}
			if m != f.Meta {
				t.Fatalf("%s: accepted with meta %+v, want %+v", what, m, f.Meta)
			}
			requireSameData(t, d, got)
		}
	}
	t.Logf("%d of %d footer byte flips detected; the rest did not change what is read", detected, 3*(len(b)-start))
	if detected < (len(b)-start)*3/2 {
		t.Fatalf("only %d of %d flips detected", detected, 3*(len(b)-start))
	}
}

// rewrite copies the generation src to dst with edited footer metadata.
// With resum, the checksum is recomputed, so that the check under test is
// the one that refuses the file.
func rewrite(t *testing.T, fs vfs.FS, src, dst string, resum bool, edit func(kv map[string]string)) {
	t.Helper()
	pf := openRaw(t, fs, src)
	kv := map[string]string{}
	for _, p := range pf.Metadata().KeyValueMetadata {
		kv[p.Key] = p.Value
	}
	edit(kv)
	if resum {
		var pairs [][2]string
		for _, f := range metaFields {
			pairs = append(pairs, [2]string{f.key, kv[f.key]})
		}
		kv[keyChecksum] = checksum(append(pairs, [2]string{keySchema, kv[keySchema]}))
	}
	var buf bytes.Buffer
	opts := []parquet.WriterOption{pf.Schema()}
	for k, v := range kv {
		opts = append(opts, parquet.KeyValueMetadata(k, v))
	}
	w := parquet.NewGenericWriter[any](&buf, opts...)
	for _, rg := range pf.RowGroups() {
		if _, err := w.WriteRowGroup(rg); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	putFile(t, fs, dst, buf.Bytes())
}

func TestFooterMetadataIsValidated(t *testing.T) {
	s := allTypes(t)
	fs, dir := newMemDir(t)
	d := allTypesRows(t, s, 30, 21)
	f := mustWrite(t, Options{FS: fs}, dir, s, testMeta(), d)

	// The copy itself must read: the rewrite is faithful.
	same := filepath.Join(dir, "copy.parquet")
	rewrite(t, fs, f.Path, same, false, func(map[string]string) {})
	if _, got, err := Read(fs, same, s); err != nil {
		t.Fatalf("unedited copy: %v", err)
	} else {
		requireSameData(t, d, got)
	}

	other, _ := schema.New([]schema.Column{{Name: "s", Type: schema.String}})
	cases := []struct {
		name  string
		resum bool
		edit  func(kv map[string]string)
		want  string
	}{
		{"checksum", false, func(kv map[string]string) { kv[keyTable] = "other" }, "checksum mismatch"},
		{"no checksum", false, func(kv map[string]string) { delete(kv, keyChecksum) }, keyChecksum + " is missing"},
		{"future version", true, func(kv map[string]string) { kv[keyFormatVersion] = "2" }, "unknown format version 2"},
		{"rows", true, func(kv map[string]string) { kv[keyRows] = "31" }, "footer says 31 rows, the file holds 30"},
		{"zero rows", true, func(kv map[string]string) { kv[keyRows] = "0" }, "at least one"},
		{"unparsable rows", true, func(kv map[string]string) { kv[keyRows] = "thirty" }, `cannot parse "thirty"`},
		{"negative generation", true, func(kv map[string]string) { kv[keyGeneration] = "-1" }, keyGeneration},
		{"fingerprint", true, func(kv map[string]string) { kv[keySchemaFingerprint] = other.Fingerprint() }, "fingerprint"},
		{"schema json", true, func(kv map[string]string) { kv[keySchema] = `[{"name":` }, keySchema},
		{"schema invalid", true, func(kv map[string]string) { kv[keySchema] = `[]` }, "no columns"},
		{"schema other", true, func(kv map[string]string) {
			kv[keySchema] = `[{"name":"s","type":"string"}]`
			kv[keySchemaFingerprint] = other.Fingerprint()
		}, "written with schema"},
		{"seq range empty", true, func(kv map[string]string) { kv[keySeqFirst] = "5000"; kv[keySeqLast] = "10" }, "is empty"},
		{"seq range misses rows", true, func(kv map[string]string) { kv[keySeqFirst] = "1001" }, "outside the footer's range"},
		{"epoch below rows", true, func(kv map[string]string) { kv[keyEpoch] = "6" }, "above the file's epoch"},
	}
	for _, key := range []string{keyFormatVersion, keyTable, keyShard, keyGeneration, keyEpoch, keySeqFirst,
		keySeqLast, keyRows, keySchemaFingerprint, keyCreatedUnixNano, keySchema} {
		cases = append(cases, struct {
			name  string
			resum bool
			edit  func(kv map[string]string)
			want  string
		}{"missing " + key, true, func(kv map[string]string) { delete(kv, key) }, key + " is missing"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "edited.parquet")
			rewrite(t, fs, f.Path, path, tc.resum, tc.edit)
			_, _, err := Read(fs, path, s)
			requireCorrupt(t, err, path, tc.name)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}

	t.Run("read with another schema", func(t *testing.T) {
		_, _, err := Read(fs, f.Path, other)
		requireCorrupt(t, err, f.Path, "other schema")
	})
	t.Run("renamed to another generation", func(t *testing.T) {
		_, _, attempt, _ := ParseName(f.Name)
		path := filepath.Join(dir, Name(f.Meta.Generation+1, f.Meta.Epoch, attempt))
		putFile(t, fs, path, fileBytes(t, fs, f.Path))
		_, err := ReadMeta(fs, path)
		requireCorrupt(t, err, path, "renamed")
		if !strings.Contains(err.Error(), "named for generation 43") {
			t.Fatalf("error %q", err)
		}
	})
	t.Run("columns differ from the stored schema", func(t *testing.T) {
		// A Parquet file whose rollwal footer is valid but whose columns are
		// not the generation layout of the stored schema.
		type row struct {
			ID string `parquet:"id"`
		}
		var buf bytes.Buffer
		kv, err := keyValues(&f.Meta, s)
		if err != nil {
			t.Fatal(err)
		}
		var opts []parquet.WriterOption
		for _, p := range kv {
			opts = append(opts, parquet.KeyValueMetadata(p[0], p[1]))
		}
		w := parquet.NewGenericWriter[row](&buf, opts...)
		rows := make([]row, 30)
		for i := range rows {
			rows[i].ID = fmt.Sprint(i)
		}
		if _, err := w.Write(rows); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "foreign.parquet")
		putFile(t, fs, path, buf.Bytes())
		_, err = ReadMeta(fs, path)
		requireCorrupt(t, err, path, "foreign columns")
		if !strings.Contains(err.Error(), "columns do not match") {
			t.Fatalf("error %q", err)
		}
	})
}

// FuzzRead: no input makes Read panic or return an error other than
// ErrCorrupt (the file always exists), and whatever it accepts holds
// exactly Meta.Rows rows. The seeds run as part of go test.
func FuzzRead(f *testing.F) {
	s, _, _, b := smallGeneration(f)
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add(b[len(b)/2:])
	f.Add([]byte("PAR1"))
	flipped := bytes.Clone(b)
	flipped[len(flipped)-20] ^= 0x55
	f.Add(flipped)
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := vfs.NewStrictMem()
		putFile(t, fs, "/f.parquet", data)
		m, d, err := Read(fs, "/f.parquet", s)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if int64(d.Rows.Len()) != m.Rows || len(d.Seq) != d.Rows.Len() || len(d.Epoch) != d.Rows.Len() {
			t.Fatalf("accepted %d rows, %d seq, %d epoch, footer says %d", d.Rows.Len(), len(d.Seq), len(d.Epoch), m.Rows)
		}
	})
}

// Seeded random damage anywhere in the file (flips, inserted, deleted and
// overwritten bytes): Read never panics, and either refuses the file as
// corrupt or returns exactly the rows that were written.
func TestRandomDamageNeverReadsWrongRows(t *testing.T) {
	s, d, f, b := smallGeneration(t)
	const seed = 20260301
	rng := rand.New(rand.NewPCG(seed, 0))
	iterations := 3000
	if testing.Short() {
		iterations = 300
	}
	detected := 0
	for it := range iterations {
		c, how := damage(rng, b)
		fs := vfs.NewStrictMem()
		putFile(t, fs, "/"+f.Name, c)
		m, got, err := Read(fs, "/"+f.Name, s)
		if err != nil {
			requireCorrupt(t, err, "/"+f.Name, fmt.Sprintf("seed %d iteration %d (%s)", seed, it, how))
			detected++
			continue
		}
		if m != f.Meta {
			t.Fatalf("seed %d iteration %d (%s): accepted with meta %+v, want %+v", seed, it, how, m, f.Meta)
		}
		requireSameData(t, d, got)
	}
	t.Logf("seed %d: %d of %d damaged files refused, the rest read back intact", seed, detected, iterations)
}

func damage(rng *rand.Rand, b []byte) ([]byte, string) {
	c := bytes.Clone(b)
	var how []string
	for range 1 + rng.IntN(3) {
		i := rng.IntN(len(c))
		switch rng.IntN(4) {
		case 0:
			m := byte(1 + rng.IntN(255))
			c[i] ^= m
			how = append(how, fmt.Sprintf("flip %d^%#x", i, m))
		case 1:
			n := 1 + rng.IntN(8)
			c = append(c[:i:i], append(bytes.Repeat([]byte{byte(rng.IntN(256))}, n), c[i:]...)...)
			how = append(how, fmt.Sprintf("insert %d@%d", n, i))
		case 2:
			j := min(len(c)-1, i+1+rng.IntN(16))
			c = append(c[:i:i], c[j:]...)
			how = append(how, fmt.Sprintf("delete [%d,%d)", i, j))
		case 3:
			v := []byte{0x00, 0x7f, 0xff}[rng.IntN(3)]
			for k := i; k < min(len(c), i+4); k++ {
				c[k] = v
			}
			how = append(how, fmt.Sprintf("set [%d,+4)=%#x", i, v))
		}
	}
	return c, strings.Join(how, ", ")
}

// eioFS fails every ReadAt from the n-th on with EIO.
type eioFS struct {
	vfs.FS
	n, calls int
}

type eioFile struct {
	vfs.File
	fs *eioFS
}

func (fs *eioFS) Open(name string) (vfs.File, error) {
	f, err := fs.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return &eioFile{File: f, fs: fs}, nil
}

func (f *eioFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.calls++
	if f.fs.calls >= f.fs.n {
		return 0, &os.PathError{Op: "read", Path: "disk", Err: syscall.EIO}
	}
	return f.File.ReadAt(p, off)
}

// A failing disk is an I/O error, not a corrupt file: callers retry or
// alert on the one and fail closed on the other.
func TestReadErrorsAreNotCorruption(t *testing.T) {
	s, _, f, b := smallGeneration(t)
	mem := vfs.NewStrictMem()
	putFile(t, mem, "/"+f.Name, b)
	probe := &eioFS{FS: mem, n: math.MaxInt}
	if _, _, err := Read(probe, "/"+f.Name, s); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= probe.calls; n++ {
		_, _, err := Read(&eioFS{FS: mem, n: n}, "/"+f.Name, s)
		if !errors.Is(err, syscall.EIO) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), f.Name) {
			t.Fatalf("EIO from read call %d of %d: %v", n, probe.calls, err)
		}
	}
}
