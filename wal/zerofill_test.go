package wal

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// Segments zero-filled whole at creation end in a long run of zeros after
// their last record. Every reader takes the first all-zero header for the
// end of data: Open of another epoch (which leaves the files alone) and of
// the epoch itself (which cuts the zeros), ReadTail, Replay, Scan and
// Repair (which finds nothing to cut). Segments roll by the bytes of
// records written, not by their file size, which is the segment size from
// the start.
func TestZeroTailIsEndOfData(t *testing.T) {
	const segSize = 4 << 10
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1, segmentSize(segSize), preallocate(segSize))
	want := appendN(t, w, 1, 40)
	mustClose(t, w)
	last := want[len(want)-1].lastPos()
	before := fs.String()

	rep, err := Repair(ScanOptions{FS: fs, Dir: testDir}, true)
	if err != nil || len(rep.Tails) != 0 {
		t.Fatalf("repair: tails %+v, %v; want nothing to cut", rep.Tails, err)
	}
	if len(rep.Segments) < 3 {
		t.Fatalf("%d segments, want several", len(rep.Segments))
	}
	var bytesSum int64
	for i, s := range rep.Segments {
		if s.Size != segSize {
			t.Errorf("segment %s has %d bytes, want %d: zero-filled whole", s.Name, s.Size, segSize)
		}
		if i < len(rep.Segments)-1 && s.End < segSize-700 {
			t.Errorf("segment %s rolled with %d bytes of records: a segment is full by the bytes written", s.Name, s.End)
		}
		bytesSum += s.End
	}
	if bytesSum != rep.Bytes || rep.Records != len(want) {
		t.Fatalf("scan: %d records, %d bytes; segments end at %d in all; want %d records", rep.Records, rep.Bytes, bytesSum, len(want))
	}
	if tail, err := ReadTail(Options{FS: fs, Dir: testDir}); err != nil || tail != last {
		t.Fatalf("ReadTail = %d, %v; want %d", tail, err, last)
	}
	if after := fs.String(); after != before {
		t.Fatalf("repair or ReadTail changed the files:\n%s\nthen\n%s", before, after)
	}

	own := fs.CrashClone()
	w = open(t, fs, 2)
	checkGot(t, replayAll(t, w, 0, w.Tail()), want)
	mustClose(t, w)
	if got := readFile(t, fs, segPath(1, uint64(len(rep.Segments)))); int64(len(got)) != segSize {
		t.Fatalf("epoch 2 changed epoch 1's last segment to %d bytes", len(got))
	}

	w = open(t, own, 1, segmentSize(segSize), preallocate(segSize))
	if w.Tail() != last {
		t.Fatalf("epoch 1 reopened at tail %d, want %d", w.Tail(), last)
	}
	want = append(want, appendN(t, w, 1, 5)...)
	checkGot(t, replayAll(t, w, 0, w.Tail()), want)
	mustClose(t, w)
	lastSeg := rep.Segments[len(rep.Segments)-1]
	if got := readFile(t, own, filepath.Join(testDir, lastSeg.Name)); int64(len(got)) != lastSeg.End {
		t.Fatalf("epoch 1's own reopen left its last segment at %d bytes, want the %d of its records", len(got), lastSeg.End)
	}
}

// A WAL written by a build that reserved space with fallocate (no zeros
// after the records: on MemFS, nothing reserved at all) opens with the
// default zero-filling one, which appends to it and replays it whole.
func TestOpenFallocatedWAL(t *testing.T) {
	for _, fsys := range []struct {
		name string
		fs   func(t *testing.T) (vfs.FS, string)
	}{
		{"mem", func(*testing.T) (vfs.FS, string) { return vfs.NewStrictMem(), testDir }},
		{"os", func(t *testing.T) (vfs.FS, string) { return vfs.Default, filepath.Join(t.TempDir(), "wal") }},
	} {
		t.Run(fsys.name, func(t *testing.T) {
			fs, dir := fsys.fs(t)
			inDir := func(o *Options) { o.Dir = dir }
			fallocate := func(o *Options) { o.PreallocateMode = Fallocate }
			w := open(t, fs, 1, inDir, segmentSize(2<<10), preallocate(1<<10), fallocate)
			want := appendN(t, w, 1, 30)
			mustClose(t, w)
			names := segmentFilesIn(t, fs, dir)
			for _, name := range names {
				data := readFile(t, fs, filepath.Join(dir, name))
				if len(data) < headerSize || allZero(data[len(data)-headerSize:]) {
					t.Fatalf("fallocate mode left zeros at the end of %s (%d bytes)", name, len(data))
				}
			}
			for _, epoch := range []uint64{1, 2} { // its own epoch after a crash, and the next
				w = open(t, fs, epoch, inDir, segmentSize(2<<10), preallocate(1<<10))
				want = append(want, appendN(t, w, 1, 20)...)
				mustClose(t, w)
			}
			w = open(t, fs, 3, inDir)
			defer mustClose(t, w)
			got := headers(replayAll(t, w, 0, w.Tail()))
			slices.SortFunc(want, byPosition)
			if !slices.Equal(got, want) {
				t.Fatalf("replayed %d records, want %d", len(got), len(want))
			}
		})
	}
}

// sizeWatch wraps an FS to see, for each fsync of a file, whether records
// were written since the last one and whether the file's size changed: an
// fsync that carries both commits a size change on an append's path, the
// cost zero-filling ahead exists to avoid.
type sizeWatch struct {
	vfs.FS
	mu         sync.Mutex
	sizeSyncs  int // fsyncs with records and a size change
	dataSyncs  int // fsyncs with records
	grownWrite int // record writes past the file's size
	// zerosAfter counts the zeros written to files after their first
	// record.
	zerosAfter int64
}

type watchedFile struct {
	vfs.File
	w          *sizeWatch
	syncedSize int64
	records    bool
	anyRecord  bool // a record was ever written
	lastZero   bool // the last write was zeros: a fill, whose own fsync follows
}

func (s *sizeWatch) Create(name string) (vfs.File, error) {
	f, err := s.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &watchedFile{File: f, w: s}, nil
}

func (f *watchedFile) size() int64 {
	info, err := f.Stat()
	if err != nil {
		return -1
	}
	return info.Size()
}

func (f *watchedFile) WriteAt(p []byte, off int64) (int, error) {
	f.lastZero = allZero(p)
	if f.lastZero && f.anyRecord {
		f.w.mu.Lock()
		f.w.zerosAfter += int64(len(p))
		f.w.mu.Unlock()
	}
	if !f.lastZero {
		f.records, f.anyRecord = true, true
		if off+int64(len(p)) > f.size() {
			f.w.mu.Lock()
			f.w.grownWrite++
			f.w.mu.Unlock()
		}
	}
	return f.File.WriteAt(p, off)
}

func (f *watchedFile) Sync() error {
	size := f.size()
	f.w.mu.Lock()
	if f.records {
		f.w.dataSyncs++
		// A fill ahead that follows records written but not yet synced
		// syncs them with its zeros: not an append's fsync waiting on a
		// size change, which writes records last.
		if size != f.syncedSize && !f.lastZero {
			f.w.sizeSyncs++
		}
	}
	f.w.mu.Unlock()
	f.syncedSize, f.records = size, false
	return f.File.Sync()
}

// With zero-filling, the syncer fills the next step ahead of the records,
// between rounds, so a writer that syncs every record never writes past
// the file's size and no fsync of records commits a size change; with
// fallocate, every one does.
func TestZeroFillAhead(t *testing.T) {
	for _, c := range []struct {
		mode                  Preallocation
		wantGrown, wantSizing bool
	}{
		{ZeroFill, false, false},
		{Fallocate, true, true},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			watch := &sizeWatch{FS: vfs.NewStrictMem()}
			w := open(t, watch, 1, segmentSize(16<<10), preallocate(2<<10), func(o *Options) { o.PreallocateMode = c.mode })
			for range 150 { // about 25 KiB: several steps, two segments
				appendSynced(t, w, 1, 1, crashPayload(w.Tail()+1))
			}
			mustClose(t, w)
			if watch.dataSyncs < 150 {
				t.Fatalf("%d fsyncs of records, want one per record", watch.dataSyncs)
			}
			if grown := watch.grownWrite > 0; grown != c.wantGrown {
				t.Errorf("%d of the record writes went past the file's size; want some: %v", watch.grownWrite, c.wantGrown)
			}
			if sizing := watch.sizeSyncs > 0; sizing != c.wantSizing {
				t.Errorf("%d of %d fsyncs of records committed a size change; want some: %v", watch.sizeSyncs, watch.dataSyncs, c.wantSizing)
			}
		})
	}
}

// crashZeroWorkload appends on fs in zero-filled steps of 256 bytes within
// segments of 1 KiB, so that creates, step fills (ahead and on need),
// appends into filled steps and rolls all happen, syncing every one to
// three records. It returns the positions acknowledged; each record's
// payload is crashPayload(first).
func crashZeroWorkload(fs vfs.FS) (acked []uint64) {
	w, err := Open(testOptions(fs, 1, segmentSize(1<<10), preallocate(256)))
	if err != nil {
		return nil
	}
	defer w.Close()
	for i := range 20 {
		var batch []uint64
		for range 1 + i%3 {
			first, err := w.Append(1, 1, crashPayload(w.Tail()+1))
			if err != nil {
				return acked
			}
			batch = append(batch, first)
		}
		if w.SyncTo(w.Tail()) != nil {
			return acked
		}
		acked = append(acked, batch...)
	}
	return acked
}

// crashPayload is 20–300 bytes derived from first: records shorter and
// longer than half a step.
func crashPayload(first uint64) []byte {
	return textPayload(rand.New(rand.NewPCG(first, 9)), 20+int(first*97%280))
}

// A crash at any write or fsync, during a step's zero-fill or an append
// into a filled step, keeps every acknowledged record, whether nothing
// unsynced survives or a random part of it does (a torn write inside the
// zeros); no record appears that was not appended, and the positions stay
// dense.
func TestCrashDuringZeroFill(t *testing.T) {
	counter := &vfs.Injector{}
	mem := vfs.NewStrictMem()
	if acked := crashZeroWorkload(vfs.Inject(mem, counter)); len(acked) < 30 {
		t.Fatalf("workload acknowledged only %d records without faults", len(acked))
	}
	if names := segmentFiles(t, mem); len(names) < 3 {
		t.Fatalf("workload wrote %d segments, want several", len(names))
	}
	total := counter.Ops()
	for k := int64(1); k <= total+1; k++ {
		mem := vfs.NewStrictMem()
		inj := &vfs.Injector{}
		inj.CrashAt(k)
		acked := crashZeroWorkload(vfs.Inject(mem, inj))
		checkCrashed(t, fmt.Sprintf("crash at op %d of %d, nothing unsynced kept", k, total), mem.CrashClone(), acked)
		for seed := range uint64(4) {
			torn := mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(k), seed))})
			checkCrashed(t, fmt.Sprintf("crash at op %d of %d, torn (seed %d)", k, total, seed), torn, acked)
		}
	}
}

// checkCrashed opens what a crash left, as the epoch itself (which
// truncates a torn tail) and as the next one (which leaves it), and checks
// each time that every acknowledged position is there with its payload,
// and that every record there is one the workload appended.
func checkCrashed(t *testing.T, what string, fs *vfs.MemFS, acked []uint64) {
	t.Helper()
	for _, epoch := range []uint64{1, 2} {
		w, err := Open(testOptions(fs.CrashClone(), epoch))
		if err != nil {
			t.Fatalf("%s: reopen as epoch %d: %v", what, epoch, err)
		}
		found, err := replayDense(w)
		mustClose(t, w)
		if err != nil {
			t.Fatalf("%s: epoch %d: %v", what, epoch, err)
		}
		for i, pos := range acked {
			if found[pos] == nil {
				t.Fatalf("%s: epoch %d: acknowledged position %d (%d of %d) lost after a crash (tail %d)",
					what, epoch, pos, i+1, len(acked), w.Tail())
			}
		}
	}
}

// replayDense replays the whole log, checking that positions are dense
// and each payload is crashPayload's, and returns the payloads.
func replayDense(w *WAL) (map[uint64][]byte, error) {
	found := map[uint64][]byte{}
	var prev uint64
	err := w.Replay(0, w.Tail(), func(h Header, p []byte) error {
		if h.FirstPos != prev+1 || h.Count != 1 {
			return fmt.Errorf("record at %d+%d after position %d", h.FirstPos, h.Count, prev)
		}
		if !bytes.Equal(p, crashPayload(h.FirstPos)) {
			return fmt.Errorf("position %d holds %d bytes that were never appended there", h.FirstPos, len(p))
		}
		prev = h.FirstPos
		found[h.FirstPos] = bytes.Clone(p)
		return nil
	})
	return found, err
}

// Rounds of bigRound bytes or more take their space by fallocate and fill
// nothing ahead: no zeros are written after the segment's first step,
// and every record is read back.
func TestBigRoundsReserveWithoutZeros(t *testing.T) {
	watch := &sizeWatch{FS: vfs.NewStrictMem()}
	const step = 4 << 20
	w := open(t, watch, 1, segmentSize(4*step), preallocate(step))
	payload := bytes.Repeat([]byte("R"), 512<<10)
	if len(payload) < bigRound {
		t.Fatalf("rounds of %d bytes are not big (bigRound %d)", len(payload), bigRound)
	}
	for i := range 2 * step / len(payload) {
		if i%2 == 0 {
			appendSynced(t, w, 1, 1, payload)
			continue
		}
		// Written in a round of its own, then synced by a round that
		// writes nothing: that round must not fill ahead either.
		first, err := w.Append(1, 1, payload)
		if err != nil {
			t.Fatal(err)
		}
		waitWritten(w, first)
		if err := w.SyncTo(first); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, w)
	if watch.zerosAfter != 0 {
		t.Fatalf("%d bytes of zeros written after the first record of rounds of %d bytes; want none", watch.zerosAfter, len(payload))
	}
	w = open(t, watch, 2)
	defer mustClose(t, w)
	got := replayAll(t, w, 0, w.Tail())
	if len(got) != 2*step/len(payload) || !bytes.Equal(got[len(got)-1].payload, payload) {
		t.Fatalf("replayed %d records, want %d", len(got), 2*step/len(payload))
	}
}
