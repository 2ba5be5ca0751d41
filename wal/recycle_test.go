package wal

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

func spares(n int) func(*Options) { return func(o *Options) { o.Spares = n } }

// filesOfKind returns the names in testDir of the given kind.
func filesOfKind(t testing.TB, fs vfs.FS, kind fileKind) []string {
	t.Helper()
	names, err := fs.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(names, func(name string) bool {
		k, _, _, ok := parseFileName(name)
		return !ok || k != kind
	})
}

// scanFileResult scans a segment file as Open does.
func scanFileResult(t testing.TB, fs vfs.FS, name string) scanResult {
	t.Helper()
	epoch, _, ok := parseSegmentName(name)
	if !ok {
		t.Fatalf("%s is not a segment", name)
	}
	data := readFile(t, fs, filepath.Join(testDir, name))
	res, err := scanSegment(bytes.NewReader(data), int64(len(data)), name, epoch,
		func(recordHeader, int64) error { return nil })
	if err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	return res
}

// activeName is the name of w's active segment.
func activeName(w *WAL) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active.name
}

// appendUntilRecycled appends records one at a time until a roll writes a
// segment over a spare, then a few more, and returns their headers.
func appendUntilRecycled(t *testing.T, w *WAL) []Header {
	t.Helper()
	before := counterValue(w.m.recycled)
	var hs []Header
	for counterValue(w.m.recycled) == before {
		if len(hs) > 1000 {
			t.Fatal("no segment was written over a spare")
		}
		hs = append(hs, appendN(t, w, 1, 1)...)
	}
	return append(hs, appendN(t, w, 1, 2)...)
}

// checkSuffix checks that got is want[i:] for some i: records of removed
// segments are gone, every later one is there once, in order, and nothing
// else, a spare's older records above all, is.
func checkSuffix(t *testing.T, what string, got, want []Header) {
	t.Helper()
	i := len(want) - len(got)
	if i < 0 || !slices.Equal(got, want[i:]) {
		t.Fatalf("%s: replayed %d records, not a suffix of the %d appended\ngot  %v\nwant %v", what, len(got), len(want), got, want)
	}
}

// Segments drained by RemoveThrough become spares, later rolls write over
// them, and whoever opens the log next (the epoch itself, which cuts the
// spare's rest, or the next one, which leaves it) replays exactly the
// records appended, in order, none of the spares' older ones. Sealed
// recycled segments, and the last one at a clean Close, are cut to their
// records.
func TestRecycledSegmentReplaysOnlyNewRecords(t *testing.T) {
	fs := vfs.NewStrictMem()
	const segSize = 2 << 10
	w := open(t, fs, 1, segmentSize(segSize), preallocate(segSize), spares(3))
	var want []Header
	var cursor uint64
	for range 4 {
		want = append(want, appendN(t, w, 1, 30)...)
		cursor = want[len(want)-3].lastPos()
		if err := w.RemoveThrough(cursor); err != nil {
			t.Fatal(err)
		}
		if n := len(filesOfKind(t, fs, spareFile)); n != 3 {
			t.Fatalf("%d spare files after RemoveThrough, want 3", n)
		}
	}
	// Two rolls over spares, with small records: the first recycled
	// segment is sealed, and stays for the reopens to walk; the second is
	// the last, its few records followed by whole older ones.
	big := want[len(want)-1].lastPos()
	for range 2 {
		before := counterValue(w.m.recycled)
		for counterValue(w.m.recycled) == before {
			want = append(want, Header{Epoch: 1, Generation: 2, FirstPos: appendSynced(t, w, 2, 1, smallPayload(w.Tail()+1)), Count: 1})
		}
	}
	made, recycled := counterValue(w.m.spares), counterValue(w.m.recycled)
	if made < 6 || recycled < 5 {
		t.Fatalf("%v spares made, %v segments recycled; want several of each", made, recycled)
	}
	active := activeName(w)
	if res := scanFileResult(t, fs, active); !res.stale {
		t.Fatalf("the recycled active segment %s holds no older records after its own (%+v): the test proves nothing", active, res)
	}
	// Everything is synced: a crash now leaves the spare's rest behind
	// the records, which a clean Close cuts.
	crashed := fs.CrashClone()
	mustClose(t, w)
	if res := scanFileResult(t, fs, active); res.stale || res.torn {
		t.Fatalf("Close left the spare's rest in %s: %+v", active, res)
	}
	check := func(what string, w *WAL) {
		t.Helper()
		gots := replayAll(t, w, 0, w.Tail())
		checkSuffix(t, what, headers(gots), want)
		for _, g := range gots {
			p := payloadFor(g.FirstPos, 1)
			if g.FirstPos > big {
				p = smallPayload(g.FirstPos)
			}
			if !bytes.Equal(g.payload, p) {
				t.Fatalf("%s: position %d holds a payload that was not appended there", what, g.FirstPos)
			}
		}
		if len(gots) == 0 || gots[0].FirstPos > cursor+1 {
			t.Fatalf("%s: replay starts past the cursor %d", what, cursor)
		}
	}

	own := crashed.CrashClone()
	w = open(t, own, 1, segmentSize(segSize))
	check("own epoch", w)
	mustClose(t, w)
	if res := scanFileResult(t, own, active); res.stale || res.torn {
		t.Fatalf("the epoch's own reopen left the spare's rest in %s: %+v", active, res)
	}

	before := readFile(t, crashed, filepath.Join(testDir, active))
	w = open(t, crashed, 2)
	check("next epoch", w)
	mustClose(t, w)
	if !bytes.Equal(readFile(t, crashed, filepath.Join(testDir, active)), before) {
		t.Fatalf("epoch 2 changed epoch 1's last segment %s", active)
	}

	w = open(t, fs, 2)
	defer mustClose(t, w)
	check("after a clean close", w)
	rep, err := Scan(ScanOptions{FS: fs, Dir: testDir})
	if err != nil || len(rep.Tails) != 0 || len(rep.Spares) == 0 {
		t.Fatalf("scan: tails %+v, spares %v, %v; want no tail and the spares listed", rep.Tails, rep.Spares, err)
	}
}

// smallPayload is a few bytes derived from a position.
func smallPayload(pos uint64) []byte { return fmt.Appendf(nil, "p%d", pos) }

// recycledSegments returns, as a test knows them, a spare's records
// (positions 1-5, big), the sealed segment after it (6-10), and the records
// written over the spare (11-13, small): 11 and 12 end exactly where the
// spare's second record starts.
func recycledSegments() (spareData, sealed, fresh []byte, offs []int64) {
	r := func(first uint64, n int) rec {
		return rec{epoch: 1, gen: 1, first: first, count: 1, payload: bytes.Repeat([]byte{byte(first)}, n)}
	}
	spareData, _ = frame(r(1, 2*30+headerSize), r(2, 200), r(3, 200), r(4, 200), r(5, 200))
	sealed, _ = frame(r(6, 50), r(7, 50), r(8, 50), r(9, 50), r(10, 50))
	fresh, offs = frame(r(11, 30), r(12, 30), r(13, 30))
	return spareData, sealed, fresh, offs
}

// A record torn by a crash while it overwrote a spare's records, at every
// byte, is a torn tail like any other: the spare's whole records after it
// are older than the segment's first and never count as records after
// damage. The epoch's own reopen cuts the tail, the next epoch's leaves it,
// and both read up to the last whole new record.
func TestTornNewRecordOverOlderRecords(t *testing.T) {
	spareData, sealed, fresh, offs := recycledSegments()
	for cut := offs[2]; cut <= int64(len(fresh)); cut++ {
		data := bytes.Clone(spareData)
		copy(data, fresh[:cut])
		wantTail := uint64(12)
		if cut == int64(len(fresh)) {
			wantTail = 13
		}
		for _, epoch := range []uint64{1, 2} {
			t.Run(fmt.Sprintf("cut %d, epoch %d", cut, epoch), func(t *testing.T) {
				fs := vfs.NewStrictMem()
				writeFile(t, fs, segPath(1, 2), sealed)
				writeFile(t, fs, segPath(1, 3), data)
				w := open(t, fs, epoch, segmentSize(1<<10))
				defer mustClose(t, w)
				if w.Tail() != wantTail {
					t.Fatalf("tail %d, want %d", w.Tail(), wantTail)
				}
				var want []Header
				for pos := uint64(6); pos <= wantTail; pos++ {
					want = append(want, Header{Epoch: 1, Generation: 1, FirstPos: pos, Count: 1})
				}
				if got := headers(replayAll(t, w, 0, w.Tail())); !slices.Equal(got, want) {
					t.Fatalf("replayed %v, want %v", got, want)
				}
				left := readFile(t, fs, segPath(1, 3))
				end := offs[2]
				if wantTail == 13 {
					end = int64(len(fresh))
				}
				if epoch == 1 && int64(len(left)) != end {
					t.Fatalf("own reopen left %d bytes, want the %d of the new records", len(left), end)
				}
				if epoch == 2 && !bytes.Equal(left, data) {
					t.Fatal("the next epoch changed the segment")
				}
			})
		}
	}
}

// Spares an epoch drained are written over by the next epoch: their old
// records, of another epoch, never parse as the new segment's, so they are
// the end of its data, never damage nor records. Scan lists no tail for
// them, and every reader agrees.
func TestSparesOfOlderEpochReused(t *testing.T) {
	fs := vfs.NewStrictMem()
	const segSize = 2 << 10
	w := open(t, fs, 1, segmentSize(segSize))
	want := appendN(t, w, 1, 40)
	cursor := want[len(want)-2].lastPos()
	if err := w.RemoveThrough(cursor); err != nil {
		t.Fatal(err)
	}
	mustClose(t, w)
	old := filesOfKind(t, fs, spareFile)
	if len(old) != DefaultSpares {
		t.Fatalf("epoch 1 left spares %v, want %d", old, DefaultSpares)
	}

	w = open(t, fs, 2, segmentSize(segSize))
	want = append(want, appendUntilRecycled(t, w)...)
	active := activeName(w)
	data := readFile(t, fs, filepath.Join(testDir, active))
	res := scanFileResult(t, fs, active)
	if !res.stale || findOlderRecord(data[res.end:], 2, 0) < 0 {
		t.Fatalf("epoch 2's segment %s holds no epoch 1 record after its own (%+v): the test proves nothing", active, res)
	}
	if left := filesOfKind(t, fs, spareFile); len(left) >= len(old) {
		t.Fatalf("spares %v before epoch 2's appends, %v after: none was taken", old, left)
	}
	crashed := fs.CrashClone() // everything synced, the epoch 1 records still there
	mustClose(t, w)
	above := slices.DeleteFunc(slices.Clone(want), func(h Header) bool { return h.lastPos() <= cursor })
	slices.SortFunc(above, byPosition)

	rep, err := Scan(ScanOptions{FS: crashed, Dir: testDir})
	if err != nil || len(rep.Tails) != 0 {
		t.Fatalf("scan: tails %+v, %v; want none: another epoch's records are the end of data, not damage", rep.Tails, err)
	}
	if tail, err := ReadTail(Options{FS: crashed, Dir: testDir}); err != nil || tail != want[len(want)-1].lastPos() {
		t.Fatalf("ReadTail = %d, %v", tail, err)
	}
	for _, epoch := range []uint64{2, 3} { // its own reopen, which cuts, and the next
		w := open(t, crashed.CrashClone(), epoch)
		checkGot(t, replayAll(t, w, cursor, w.Tail()), above)
		mustClose(t, w)
	}
}

// Open keeps up to Options.Spares spares, deletes the rest and every
// recycling file (a roll a crash cut short), and syncs the directory, so
// that a crash right after Open finds the same.
func TestOpenTrimsSpares(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1, segmentSize(1<<10), spares(5))
	appendN(t, w, 1, 60)
	if err := w.RemoveThrough(w.Tail()); err != nil {
		t.Fatal(err)
	}
	mustClose(t, w)
	made := filesOfKind(t, fs, spareFile)
	if len(made) != 5 {
		t.Fatalf("spares %v, want 5", made)
	}
	unfinished := filepath.Join(testDir, fileName(recyclingFile, 1, 999))
	writeFile(t, fs, unfinished, []byte("a roll's first records, never named"))

	w = open(t, fs, 2, segmentSize(1<<10), spares(2))
	for _, f := range []*vfs.MemFS{fs, fs.CrashClone()} {
		if got := filesOfKind(t, f, spareFile); !slices.Equal(got, made[:2]) {
			t.Errorf("spares %v after Open with Spares 2, want %v", got, made[:2])
		}
		if got := filesOfKind(t, f, recyclingFile); len(got) != 0 {
			t.Errorf("recycling files %v after Open, want none", got)
		}
	}
	appendUntilRecycled(t, w)
	mustClose(t, w)
}

// With Spares negative, Open deletes every spare it finds, and the WAL
// neither keeps nor recycles any.
func TestNegativeSparesDeletesSpares(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1, segmentSize(1<<10))
	appendN(t, w, 1, 40)
	if err := w.RemoveThrough(w.Tail()); err != nil {
		t.Fatal(err)
	}
	mustClose(t, w)
	if len(filesOfKind(t, fs, spareFile)) == 0 {
		t.Fatal("no spares to delete: the test proves nothing")
	}
	w = open(t, fs, 2, segmentSize(1<<10), spares(-1))
	if got := filesOfKind(t, fs.CrashClone(), spareFile); len(got) != 0 {
		t.Fatalf("spares %v after Open with Spares -1, want none", got)
	}
	for range 3 {
		appendN(t, w, 1, 20)
		if err := w.RemoveThrough(w.Tail()); err != nil {
			t.Fatal(err)
		}
	}
	if got := filesOfKind(t, fs, spareFile); len(got) != 0 || counterValue(w.m.recycled) != 0 || counterValue(w.m.spares) != 0 {
		t.Fatalf("spares %v, %v recycled, %v made with Spares -1; want none", got,
			counterValue(w.m.recycled), counterValue(w.m.spares))
	}
	mustClose(t, w)
}

// sealedRecycled writes a log in which a segment written over a spare was
// then sealed, and returns the file system and that segment's name.
func sealedRecycled(t *testing.T) (*vfs.MemFS, string) {
	t.Helper()
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1, segmentSize(2<<10))
	appendN(t, w, 1, 40)
	if err := w.RemoveThrough(w.Tail()); err != nil {
		t.Fatal(err)
	}
	appendUntilRecycled(t, w)
	recycled := activeName(w)
	for activeName(w) == recycled {
		appendN(t, w, 1, 1)
	}
	mustClose(t, w)
	return fs, recycled
}

// A sealed segment that was written over a spare is cut to its records
// when sealed, and is judged like any sealed segment: a damaged header in
// it is corruption at Open, a damaged payload at Replay and Scan, and the
// spare's older records after its own (had the seal not cut them) are
// corruption too, since only an epoch's last segment can hold them.
func TestDamageInSealedRecycledSegmentRefused(t *testing.T) {
	fs, recycled := sealedRecycled(t)
	path := filepath.Join(testDir, recycled)
	data := readFile(t, fs, path)
	var offs []int64
	res, err := scanSegment(bytes.NewReader(data), int64(len(data)), recycled, 1, func(_ recordHeader, off int64) error {
		offs = append(offs, off)
		return nil
	})
	if err != nil || res.end != int64(len(data)) || len(offs) < 3 {
		t.Fatalf("sealed recycled segment %s: %d bytes, records end at %d (%d records, %v); want cut to its records",
			recycled, len(data), res.end, len(offs), err)
	}
	damaged := func(t *testing.T, change func([]byte) []byte) *vfs.MemFS {
		f := fs.CrashClone()
		writeFile(t, f, path, change(bytes.Clone(data)))
		return f
	}
	mid := offs[1]
	t.Run("header", func(t *testing.T) {
		f := damaged(t, func(b []byte) []byte { b[mid+offFirst] ^= 1; return b })
		_, err := Open(testOptions(f, 2))
		checkCorruption(t, err, recycled, mid)
	})
	t.Run("payload", func(t *testing.T) {
		f := damaged(t, func(b []byte) []byte { b[mid+headerSize] ^= 1; return b })
		w := open(t, f, 2)
		defer mustClose(t, w)
		err := w.Replay(0, w.Tail(), func(Header, []byte) error { return nil })
		checkCorruption(t, err, recycled, mid)
		_, err = Scan(ScanOptions{FS: f, Dir: testDir})
		checkCorruption(t, err, recycled, mid)
	})
	t.Run("older records after its own", func(t *testing.T) {
		older, _ := frame(rec{epoch: 1, gen: 1, first: 1, count: 1, payload: []byte("drained long ago")})
		f := damaged(t, func(b []byte) []byte { return append(b, older...) })
		_, err := Open(testOptions(f, 2))
		checkCorruption(t, err, recycled, int64(len(data)))
		if !errors.Is(err, errOlder) {
			t.Fatalf("err = %v, want an older record", err)
		}
	})
}

// Spare and recycling files have the segments' numbered names with their
// own suffixes, which older builds refuse. A file of a newer epoch of any
// kind means a newer writer exists: Open refuses it, ReadTail reads past.
func TestSpareFileNames(t *testing.T) {
	for kind, want := range map[fileKind]string{
		segmentFile:   "00000000000000000003-000012.wal",
		spareFile:     "00000000000000000003-000012.spare",
		recyclingFile: "00000000000000000003-000012.recycling",
	} {
		name := fileName(kind, 3, 12)
		k, e, i, ok := parseFileName(name)
		if name != want || !ok || k != kind || e != 3 || i != 12 {
			t.Errorf("fileName(%d, 3, 12) = %q, parsed %d %d %d %v", kind, name, k, e, i, ok)
		}
	}
	for _, bad := range []string{"000012.spare", "00000000000000000003-000012.spare.wal",
		"00000000000000000003-000000.spare", "00000000000000000003-000012.spares", "00000000000000000003-000012."} {
		if _, _, _, ok := parseFileName(bad); ok {
			t.Errorf("parseFileName(%q) accepted", bad)
		}
	}
	fs := vfs.NewStrictMem()
	w := open(t, fs, 3)
	appendN(t, w, 1, 3)
	mustClose(t, w)
	writeFile(t, fs, filepath.Join(testDir, fileName(spareFile, 4, 1)), []byte("newer"))
	if _, err := Open(testOptions(fs, 3)); !errors.Is(err, ErrNewerEpoch) || !strings.Contains(err.Error(), ".spare") {
		t.Fatalf("Open with a newer epoch's spare: %v, want ErrNewerEpoch naming it", err)
	}
	if tail, err := ReadTail(Options{FS: fs, Dir: testDir}); err != nil || tail != 6 {
		t.Fatalf("ReadTail = %d, %v; want 6", tail, err)
	}
}

// opLog wraps an FS and records its mutating operations, one line each,
// with base names: "create N", "rename A B", "remove N", "syncdir",
// "write N records|zeros", "sync N", "truncate N". A file's operations
// name it as it was named when opened.
type opLog struct {
	vfs.FS
	mu  sync.Mutex
	ops []string
}

func (l *opLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, fmt.Sprintf(format, args...))
}

// take returns the operations recorded since the last take.
func (l *opLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ops := l.ops
	l.ops = nil
	return ops
}

func (l *opLog) Create(name string) (vfs.File, error) {
	l.add("create %s", filepath.Base(name))
	f, err := l.FS.Create(name)
	return &loggedFile{File: f, log: l, name: filepath.Base(name)}, err
}

func (l *opLog) OpenReadWrite(name string) (vfs.File, error) {
	f, err := l.FS.OpenReadWrite(name)
	return &loggedFile{File: f, log: l, name: filepath.Base(name)}, err
}

func (l *opLog) OpenDir(name string) (vfs.File, error) {
	f, err := l.FS.OpenDir(name)
	return &loggedFile{File: f, log: l, dir: true}, err
}

func (l *opLog) Rename(a, b string) error {
	l.add("rename %s %s", filepath.Base(a), filepath.Base(b))
	return l.FS.Rename(a, b)
}

func (l *opLog) Remove(name string) error {
	l.add("remove %s", filepath.Base(name))
	return l.FS.Remove(name)
}

type loggedFile struct {
	vfs.File
	log  *opLog
	name string
	dir  bool
}

func (f *loggedFile) WriteAt(p []byte, off int64) (int, error) {
	what := "records"
	if allZero(p) {
		what = "zeros"
	}
	f.log.add("write %s %s", f.name, what)
	return f.File.WriteAt(p, off)
}

func (f *loggedFile) Sync() error {
	if f.dir {
		f.log.add("syncdir")
	} else {
		f.log.add("sync %s", f.name)
	}
	return f.File.Sync()
}

func (f *loggedFile) Truncate(size int64) error {
	f.log.add("truncate %s", f.name)
	return f.File.Truncate(size)
}

// A roll over a spare goes in this order, each step durable before the
// next: the sealed segment synced; the spare renamed to the new segment's
// recycling name, the directory synced (no write can land under the
// spare's name); the first records written and synced; the file renamed to
// the segment's name, the directory synced. Sealing a recycled segment
// cuts it before its sync. While spares last, no file is created and no
// zero written: appends go over blocks already written.
func TestRecycleOrder(t *testing.T) {
	l := &opLog{FS: vfs.NewStrictMem()}
	const segSize = 4 << 10
	w := open(t, l, 1, segmentSize(segSize), preallocate(segSize), spares(3))
	defer mustClose(t, w)
	appendN(t, w, 1, 60)
	if err := w.RemoveThrough(w.Tail()); err != nil {
		t.Fatal(err)
	}
	old := filesOfKind(t, l, spareFile)
	if len(old) != 3 {
		t.Fatalf("spares %v, want 3", old)
	}
	l.take()
	sealed := activeName(w)
	appendUntilRecycled(t, w)
	seg := activeName(w)
	tmp := strings.TrimSuffix(seg, fileSuffixes[segmentFile]) + fileSuffixes[recyclingFile]
	want := []string{"sync " + sealed, "rename " + old[0] + " " + tmp, "syncdir",
		"write " + tmp + " records", "sync " + tmp, "rename " + tmp + " " + seg, "syncdir"}
	ops := l.take()
	if !containsRun(ops, want) {
		t.Fatalf("operations of a roll over a spare:\n%s\nwant the run\n%s", strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}
	for seg == activeName(w) {
		appendN(t, w, 1, 1)
	}
	ops = append(ops, l.take()...)
	if !containsRun(ops, []string{"truncate " + tmp, "sync " + tmp}) {
		t.Fatalf("sealing %s, written over a spare, did not cut it before its sync:\n%s", seg, strings.Join(ops, "\n"))
	}
	for _, op := range ops {
		if strings.HasPrefix(op, "create ") || strings.HasSuffix(op, " zeros") {
			t.Fatalf("%q while spares were left: appends over a spare write nothing ahead\n%s", op, strings.Join(ops, "\n"))
		}
	}
}

// containsRun reports whether run appears in ops, consecutively.
func containsRun(ops, run []string) bool {
	for i := 0; i+len(run) <= len(ops); i++ {
		if slices.Equal(ops[i:i+len(run)], run) {
			return true
		}
	}
	return false
}
