package wal

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// TestRepair: a torn tail is reported and left alone without cut, cut
// with it, and the cut survives a crash (it was synced); the log then
// scans clean and replays every whole record. A hole with whole records
// after it, or damage before a whole record, is refused and nothing
// changes.
func TestRepair(t *testing.T) {
	data, offs := baseSegment(t) // epoch 1, five records
	last := offs[len(offs)-1]
	torn := data[:len(data)-3]
	holed := append(append(bytes.Clone(data[:last]), make([]byte, 100)...), data[last:]...)
	flipped := bytes.Clone(data)
	flipped[offs[1]+3] ^= 0xff

	t.Run("torn tail", func(t *testing.T) {
		fs := vfs.NewStrictMem()
		writeFile(t, fs, segPath(1, 1), torn)
		rep, err := Repair(ScanOptions{FS: fs, Dir: testDir}, false)
		if err != nil || len(rep.Tails) != 1 || rep.Tails[0].Offset != last {
			t.Fatalf("dry repair: %+v, %v; want one tail at %d", rep.Tails, err, last)
		}
		if got := readFile(t, fs, segPath(1, 1)); !bytes.Equal(got, torn) {
			t.Fatal("a dry repair changed the segment")
		}
		if _, err := Repair(ScanOptions{FS: fs, Dir: testDir}, true); err != nil {
			t.Fatal(err)
		}
		crashed := fs.CrashClone()
		if got := readFile(t, crashed, segPath(1, 1)); !bytes.Equal(got, data[:last]) {
			t.Fatalf("after the cut and a crash the segment has %d bytes, want %d", len(got), last)
		}
		rep, err = Scan(ScanOptions{FS: crashed, Dir: testDir})
		if err != nil || len(rep.Tails) != 0 || rep.Records != len(offs)-1 {
			t.Fatalf("scan after repair: %d records, tails %+v, %v; want %d records, clean", rep.Records, rep.Tails, err, len(offs)-1)
		}
	})
	for _, tc := range []struct {
		name, want string
		seg        []byte
	}{
		{"hole before a whole record", "hole of zeros", holed},
		{"damage before a whole record", "only a torn tail", flipped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewStrictMem()
			writeFile(t, fs, segPath(1, 1), tc.seg)
			_, err := Repair(ScanOptions{FS: fs, Dir: testDir}, true)
			if !errors.Is(err, ErrRepairRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("repair: %v; want ErrRepairRefused saying %q", err, tc.want)
			}
			if got := readFile(t, fs, segPath(1, 1)); !bytes.Equal(got, tc.seg) {
				t.Fatal("a refused repair changed the segment")
			}
		})
	}
}
