package generation

import (
	"path/filepath"
	"testing"
)

func TestBaseNameRoundTrip(t *testing.T) {
	n := BaseName(7, 3, "0a1b2c3d", 0xdeadbeef)
	if want := "g00000000000000000007-e00000000000000000003-0a1b2c3d-cdeadbeef.parquet"; n != want {
		t.Fatalf("BaseName = %q, want %q", n, want)
	}
	gen, epoch, attempt, crc, ok, err := ParseBaseName(n)
	if err != nil || !ok || gen != 7 || epoch != 3 || attempt != "0a1b2c3d" || crc != 0xdeadbeef {
		t.Fatalf("ParseBaseName(%q) = %d %d %q %x %v %v", n, gen, epoch, attempt, crc, ok, err)
	}
	if _, _, _, _, ok, err := ParseBaseName(Name(7, 3, "0a1b2c3d")); ok || err != nil {
		t.Fatalf("a plain generation name: ok %v err %v, want no checksum and no error", ok, err)
	}
	for _, bad := range []string{
		"g00000000000000000007-e00000000000000000003-0a1b2c3d-cDEADBEEF.parquet",
		"g00000000000000000007-e00000000000000000003-0a1b2c3d-xdeadbeef.parquet",
		"g0000000000000000000x-e00000000000000000003-0a1b2c3d-cdeadbeef.parquet",
	} {
		if _, _, _, _, ok, err := ParseBaseName(bad); ok || err == nil {
			t.Errorf("ParseBaseName(%q): ok %v err %v, want an error", bad, ok, err)
		}
	}
}

// TestWriteNamesIndexCRC: with IndexCRCInName the file's name carries the
// checksum that VerifyIndex accepts.
func TestWriteNamesIndexCRC(t *testing.T) {
	fs, dir := newMemDir(t)
	s := allTypes(t)
	f := mustWrite(t, Options{FS: fs, IndexCRCInName: true}, dir, s, testMeta(), allTypesRows(t, s, 50, 1))
	_, _, _, crc, ok, err := ParseBaseName(f.Name)
	if err != nil || !ok || crc != f.IndexCRC {
		t.Fatalf("name %q: crc %x ok %v err %v, want %x", f.Name, crc, ok, err, f.IndexCRC)
	}
	if f.Path != filepath.Join(dir, f.Name) {
		t.Fatalf("path %q, name %q", f.Path, f.Name)
	}
	names, _ := fs.List(dir)
	if len(names) != 1 || names[0] != f.Name {
		t.Fatalf("dir holds %v, want only %s", names, f.Name)
	}
	h, err := fs.Open(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := VerifyIndex(h, f.Size, f.Path, crc); err != nil {
		t.Fatal(err)
	}
}
