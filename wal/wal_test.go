package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rollwal/rollwal/vfs"
)

// appendN appends n records of epoch w's epoch with counts 1..3 and
// payloads from payloadFor, syncing each, and returns their headers.
func appendN(t testing.TB, w *WAL, gen uint64, n int) []Header {
	t.Helper()
	var hs []Header
	for i := range n {
		count := uint32(1 + i%3)
		first, err := w.Append(gen, count, payloadFor(w.Tail()+1, int(w.opts.Epoch)))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, Header{Epoch: w.opts.Epoch, Generation: gen, FirstPos: first, Count: count})
	}
	if err := w.SyncTo(w.Tail()); err != nil {
		t.Fatal(err)
	}
	return hs
}

// segmentFiles returns the names of the segment files in testDir: not
// the spares.
func segmentFiles(t testing.TB, fs vfs.FS) []string {
	t.Helper()
	return segmentFilesIn(t, fs, testDir)
}

func TestRoundTripAcrossRollsAndEpochs(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   func(t *testing.T) (vfs.FS, func(*Options))
	}{
		{"mem", func(t *testing.T) (vfs.FS, func(*Options)) { return vfs.NewStrictMem(), func(*Options) {} }},
		{"os", func(t *testing.T) (vfs.FS, func(*Options)) {
			dir := filepath.Join(t.TempDir(), "wal")
			return vfs.Default, func(o *Options) { o.Dir = dir }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, inDir := tc.fs(t)
			w := open(t, fs, 1, segmentSize(4<<10), inDir)
			if w.Tail() != 0 {
				t.Fatalf("empty log has tail %d", w.Tail())
			}
			want := appendN(t, w, 7, 60)
			mustClose(t, w)

			w = open(t, fs, 2, segmentSize(4<<10), inDir)
			if tail := want[len(want)-1].lastPos(); w.Tail() != tail {
				t.Fatalf("tail after reopen = %d, want %d", w.Tail(), tail)
			}
			if n := len(segmentFilesIn(t, fs, w.dir)); n < 5 {
				t.Fatalf("only %d segments: the log did not roll", n)
			}
			checkGot(t, replayAll(t, w, 0, w.Tail()), want)
			more := appendN(t, w, 8, 40)
			if more[0].FirstPos != want[len(want)-1].lastPos()+1 {
				t.Fatalf("epoch 2 starts at %d, want %d", more[0].FirstPos, want[len(want)-1].lastPos()+1)
			}
			mustClose(t, w)

			w = open(t, fs, 3, inDir)
			defer mustClose(t, w)
			checkGot(t, replayAll(t, w, 0, w.Tail()), append(want, more...))
		})
	}
}

func segmentFilesIn(t testing.TB, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(names, func(name string) bool {
		_, _, ok := parseSegmentName(name)
		return !ok
	})
}

func TestSegmentsStayUnderSize(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1, segmentSize(2<<10))
	appendN(t, w, 1, 50)
	big := appendSynced(t, w, 1, 1, bytes.Repeat([]byte("x"), 5000)) // larger than a segment
	mustClose(t, w)
	for _, name := range segmentFiles(t, fs) {
		info, err := fs.Stat(filepath.Join(testDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() > 2<<10 && info.Size() != headerSize+5000 {
			t.Errorf("segment %s has %d bytes, above the 2 KiB roll threshold", name, info.Size())
		}
	}
	w = open(t, fs, 2)
	defer mustClose(t, w)
	gots := replayAll(t, w, big-1, big)
	if len(gots) != 1 || len(gots[0].payload) != 5000 {
		t.Fatalf("big record not replayed whole: %v", headers(gots))
	}
}

func TestReplayExactRange(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1, segmentSize(1<<10))
	defer mustClose(t, w)
	all := appendN(t, w, 1, 30) // counts 1, 2, 3, 1, 2, 3, ...
	tail := w.Tail()
	for from := uint64(0); from <= tail+1; from++ {
		for to := from; to <= tail+2; to++ {
			var want []Header
			for _, h := range all {
				if from < to && h.lastPos() > from && h.FirstPos <= to {
					want = append(want, h)
				}
			}
			gots := replayAll(t, w, from, to)
			if fmt.Sprint(headers(gots)) != fmt.Sprint(want) {
				t.Fatalf("replay (%d, %d]:\ngot  %v\nwant %v", from, to, headers(gots), want)
			}
		}
	}
}

func TestReplayStopsOnCallbackError(t *testing.T) {
	w := open(t, vfs.NewStrictMem(), 1)
	defer mustClose(t, w)
	appendN(t, w, 1, 10)
	stop := errors.New("stop")
	calls := 0
	err := w.Replay(0, w.Tail(), func(Header, []byte) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 3 {
		t.Fatalf("replay returned %v after %d calls, want the callback's error after 3", err, calls)
	}
}

func TestReplaySeesUnsyncedAppends(t *testing.T) {
	w := open(t, vfs.NewStrictMem(), 1)
	defer mustClose(t, w)
	first, err := w.Append(1, 2, payloadFor(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	checkGot(t, replayAll(t, w, 0, 10), []Header{{Epoch: 1, Generation: 1, FirstPos: first, Count: 2}})
}

// A zombie of epoch 1 keeps appending after epoch 2 opened at the tail it
// saw; both epochs' records come back interleaved by position, the older
// epoch first on a tie.
func TestReplayInterleavedEpochs(t *testing.T) {
	fs := vfs.NewStrictMem()
	zombie := open(t, fs, 1, segmentSize(1<<10))
	var want []Header
	add := func(w *WAL, count uint32) {
		first := appendSynced(t, w, 1, count, payloadFor(w.Tail()+1, int(w.opts.Epoch)))
		want = append(want, Header{Epoch: w.opts.Epoch, Generation: 1, FirstPos: first, Count: count})
	}
	for range 4 {
		add(zombie, 1) // 1..4
	}
	next := open(t, fs, 2, segmentSize(1<<10)) // starts at 5
	for _, c := range []uint32{1, 2, 1, 3} {
		add(zombie, c) // 5, 6-7, 8, 9-11
		add(next, c)   // 5, 6-7, 8, 9-11
	}
	add(zombie, 2) // 12-13 from the zombie only
	mustClose(t, zombie)
	mustClose(t, next)

	w := open(t, fs, 3)
	defer mustClose(t, w)
	if w.Tail() != 13 {
		t.Fatalf("tail = %d, want 13", w.Tail())
	}
	// Expected order: ascending first position, epoch 1 before 2.
	order := func(a, b Header) int {
		if a.FirstPos != b.FirstPos {
			return cmpUint(a.FirstPos, b.FirstPos)
		}
		return cmpUint(a.Epoch, b.Epoch)
	}
	sortHeaders(want, order)
	checkGot(t, replayAll(t, w, 0, 13), want)

	// A range inside the overlap returns both epochs' records.
	gots := replayAll(t, w, 6, 8)
	if fmt.Sprint(headers(gots)) != fmt.Sprint([]Header{
		{1, 1, 6, 2, 0}, {2, 1, 6, 2, 0}, {1, 1, 8, 1, 0}, {2, 1, 8, 1, 0}}) {
		t.Fatalf("replay (6, 8] = %v", headers(gots))
	}
}

func sortHeaders(hs []Header, cmp func(a, b Header) int) {
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0 && cmp(hs[j-1], hs[j]) > 0; j-- {
			hs[j-1], hs[j] = hs[j], hs[j-1]
		}
	}
}

func TestReopenSameEpoch(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1)
	want := appendN(t, w, 1, 5)
	mustClose(t, w)
	w = open(t, fs, 1) // the same epoch continues in a new segment
	want = append(want, appendN(t, w, 1, 5)...)
	mustClose(t, w)
	if n := len(segmentFiles(t, fs)); n != 2 {
		t.Fatalf("%d segments, want 2: a reopen must start a new file", n)
	}
	w = open(t, fs, 2)
	defer mustClose(t, w)
	checkGot(t, replayAll(t, w, 0, w.Tail()), want)
}

// An epoch may not continue once another epoch wrote past its end: its
// positions could not stay dense.
func TestReopenSupersededEpoch(t *testing.T) {
	fs := vfs.NewStrictMem()
	zombie := open(t, fs, 1)
	appendN(t, zombie, 1, 2)
	w := open(t, fs, 2)
	appendN(t, w, 1, 1)
	mustClose(t, w)
	appendN(t, zombie, 1, 3) // past epoch 2's last record
	mustClose(t, zombie)
	if _, err := Open(testOptions(fs, 2)); err == nil || !strings.Contains(err.Error(), "open with a new epoch") {
		t.Fatalf("reopening a superseded epoch: err = %v", err)
	}
	w = open(t, fs, 3)
	mustClose(t, w)
}

func TestRemoveThrough(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1, segmentSize(1<<10))
	hs := appendN(t, w, 1, 40)
	segs := segmentFiles(t, fs)
	if len(segs) < 4 {
		t.Fatalf("only %d segments", len(segs))
	}
	cursor := hs[20].lastPos()
	if err := w.RemoveThrough(cursor); err != nil {
		t.Fatal(err)
	}
	left := segmentFiles(t, fs)
	if len(left) >= len(segs) || left[len(left)-1] != segs[len(segs)-1] {
		t.Fatalf("segments %v after RemoveThrough(%d), before %v", left, cursor, segs)
	}
	// Every record above the cursor is still there, and every segment
	// left but the active one holds a record above it.
	var above []Header
	for _, h := range hs {
		if h.lastPos() > cursor {
			above = append(above, h)
		}
	}
	gots := replayAll(t, w, cursor, w.Tail())
	if fmt.Sprint(headers(gots)) != fmt.Sprint(above) {
		t.Fatalf("after remove, replay (%d, tail] = %v, want %v", cursor, headers(gots), above)
	}
	for _, s := range w.segments {
		if s != w.active && s.last <= cursor {
			t.Fatalf("segment %s (last %d) survived RemoveThrough(%d)", s.name, s.last, cursor)
		}
	}
	// Removing everything keeps the active segment.
	if err := w.RemoveThrough(w.Tail()); err != nil {
		t.Fatal(err)
	}
	if left := segmentFiles(t, fs); len(left) != 1 || left[0] != w.active.name {
		t.Fatalf("segments %v, want only the active %s", left, w.active.name)
	}
	tail := w.Tail()
	mustClose(t, w)

	// Reopen with new epochs and remove everything while the new active
	// segment is empty: the segment holding the tail must survive, or the
	// next epoch would restart positions at 1.
	for epoch := uint64(2); epoch <= 4; epoch++ {
		w = open(t, fs, epoch)
		if w.Tail() != tail {
			t.Fatalf("epoch %d: tail %d, want %d", epoch, w.Tail(), tail)
		}
		if err := w.RemoveThrough(tail); err != nil {
			t.Fatal(err)
		}
		mustClose(t, w)
	}
	w = open(t, fs, 5)
	defer mustClose(t, w)
	if first := appendSynced(t, w, 1, 1, []byte("x")); first != tail+1 {
		t.Fatalf("first position after removals = %d, want %d", first, tail+1)
	}
}

func TestCompression(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	text := textPayload(rng, 4000)
	random := make([]byte, 4000)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	for _, c := range []Compression{None, S2, Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			fs := vfs.NewStrictMem()
			w := open(t, fs, 1, compression(c))
			inputs := [][]byte{text, random, {}, []byte("a"), text[:100]}
			for i, p := range inputs {
				appendSynced(t, w, uint64(i), 1, p)
			}
			mustClose(t, w)

			codecs := storedCodecs(t, fs, segPath(1, 1))
			wantText := c
			if codecs[0] != wantText {
				t.Errorf("compressible payload stored with %v, want %v", codecs[0], wantText)
			}
			if codecs[1] != None {
				t.Errorf("incompressible payload stored with %v, want raw", codecs[1])
			}
			if codecs[2] != None {
				t.Errorf("empty payload stored with %v, want raw", codecs[2])
			}

			w = open(t, fs, 2) // reading needs no compression option
			defer mustClose(t, w)
			gots := replayAll(t, w, 0, w.Tail())
			for i, g := range gots {
				if !bytes.Equal(g.payload, inputs[i]) {
					t.Fatalf("record %d: payload differs after round trip", i)
				}
			}
		})
	}
}

// storedCodecs returns the codec of each record in a segment file.
func storedCodecs(t testing.TB, fs vfs.FS, path string) []Compression {
	t.Helper()
	data := readFile(t, fs, path)
	var codecs []Compression
	_, err := scanSegment(bytes.NewReader(data), int64(len(data)), path, 1, func(h recordHeader, _ int64) error {
		codecs = append(codecs, h.codec)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return codecs
}

// Many goroutines append and sync concurrently, across segment rolls;
// every position acknowledged comes back after a reopen, with its payload.
func TestConcurrentAppendAndSync(t *testing.T) {
	const writers, perWriter = 24, 60
	for _, c := range []Compression{None, S2} {
		t.Run(c.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "wal")
			inDir := func(o *Options) { o.Dir = dir }
			w := open(t, vfs.Default, 1, segmentSize(16<<10), inDir, compression(c))
			base := w.Tail()
			var mu sync.Mutex
			acked := map[uint64]uint32{}
			var wg sync.WaitGroup
			for g := range writers {
				wg.Go(func() {
					for i := range perWriter {
						count := uint32(1 + (g+i)%4)
						// The payload names the writer and step;
						// the test finds it by position later.
						p := fmt.Appendf(nil, "writer %d step %d %s", g, i, strings.Repeat("r", i))
						first, err := w.Append(uint64(g), count, p)
						if err == nil {
							err = w.SyncTo(first + uint64(count) - 1)
						}
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						acked[first] = count
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			mustClose(t, w)

			w = open(t, vfs.Default, 2, inDir)
			defer mustClose(t, w)
			seen := 0
			err := w.Replay(base, w.Tail(), func(h Header, p []byte) error {
				if h.Epoch != 1 {
					return nil
				}
				count, ok := acked[h.FirstPos]
				if !ok || count != h.Count {
					return fmt.Errorf("record %+v was never acknowledged", h)
				}
				want := fmt.Sprintf("writer %d step ", h.Generation)
				if !strings.HasPrefix(string(p), want) {
					return fmt.Errorf("record %+v has payload %q", h, p)
				}
				seen++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if seen != writers*perWriter || len(acked) != writers*perWriter {
				t.Fatalf("replayed %d records, acknowledged %d, want %d", seen, len(acked), writers*perWriter)
			}
		})
	}
}

func TestClosedWAL(t *testing.T) {
	w := open(t, vfs.NewStrictMem(), 1)
	appendN(t, w, 1, 3)
	mustClose(t, w)
	if _, err := w.Append(1, 1, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("append after close: %v", err)
	}
	if err := w.SyncTo(1); !errors.Is(err, ErrClosed) {
		t.Errorf("sync after close: %v", err)
	}
	if err := w.Replay(0, 10, func(Header, []byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("replay after close: %v", err)
	}
	if err := w.RemoveThrough(10); !errors.Is(err, ErrClosed) {
		t.Errorf("remove after close: %v", err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second close: %v", err)
	}
}

func TestCloseSyncsPendingAppends(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1)
	for i := range 10 {
		if _, err := w.Append(1, 1, payloadFor(uint64(i+1), 1)); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, w)
	w = open(t, fs.CrashClone(), 2)
	defer mustClose(t, w)
	if w.Tail() != 10 {
		t.Fatalf("after close and crash, tail = %d, want 10", w.Tail())
	}
}

func TestAppendRejects(t *testing.T) {
	w := open(t, vfs.NewStrictMem(), 1)
	defer mustClose(t, w)
	if _, err := w.Append(1, 0, nil); err == nil {
		t.Error("append of count 0 succeeded")
	}
	if _, err := w.Append(1, 1, make([]byte, MaxPayloadSize+1)); err == nil {
		t.Error("append of an oversized payload succeeded")
	}
	if w.Tail() != 0 {
		t.Errorf("rejected appends moved the tail to %d", w.Tail())
	}
}

func TestOpenRejects(t *testing.T) {
	cases := []struct {
		name  string
		setup func(fs vfs.FS)
		opts  func(*Options)
		want  string
	}{
		{"zero epoch", nil, func(o *Options) { o.Epoch = 0 }, "epoch must be > 0"},
		{"no dir", nil, func(o *Options) { o.Dir = "" }, "no directory"},
		{"bad compression", nil, func(o *Options) { o.Compression = 9 }, "unknown compression"},
		{"negative segment size", nil, segmentSize(-1), "segment size"},
		{"stray file", func(fs vfs.FS) {
			writeFile(t, fs, filepath.Join(testDir, "notes.txt"), nil)
		}, nil, `unexpected file "notes.txt"`},
		{"short name", func(fs vfs.FS) {
			writeFile(t, fs, filepath.Join(testDir, "1-1.wal"), nil)
		}, nil, `unexpected file "1-1.wal"`},
		{"newer epoch", func(fs vfs.FS) {
			writeFile(t, fs, segPath(9, 1), nil)
		}, nil, "newer epoch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewStrictMem()
			if tc.setup != nil {
				tc.setup(fs)
			}
			opts := testOptions(fs, 2)
			if tc.opts != nil {
				tc.opts(&opts)
			}
			_, err := Open(opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	fs := vfs.NewStrictMem()
	writeFile(t, fs, segPath(9, 1), nil)
	if _, err := Open(testOptions(fs, 2)); !errors.Is(err, ErrNewerEpoch) {
		t.Fatalf("newer epoch: %v does not match ErrNewerEpoch", err)
	}
}

func TestOpenCreatesDurableDirectory(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1)
	mustClose(t, w)
	crashed := fs.CrashClone()
	if _, err := crashed.Stat(segPath(1, 1)); err != nil {
		t.Fatalf("the first segment did not survive a crash: %v\n%s", err, crashed)
	}
}

func TestSegmentNames(t *testing.T) {
	for _, c := range []struct{ epoch, index uint64 }{{1, 1}, {42, 7}, {1<<64 - 1, maxSegmentIndex}} {
		name := segmentName(c.epoch, c.index)
		e, i, ok := parseSegmentName(name)
		if !ok || e != c.epoch || i != c.index {
			t.Errorf("parse(%q) = %d, %d, %v", name, e, i, ok)
		}
	}
	if got := segmentName(3, 12); got != "00000000000000000003-000012.wal" {
		t.Errorf("segmentName(3, 12) = %q", got)
	}
	for _, bad := range []string{
		"", "x.wal", "00000000000000000003-000012.log", "0000000000000000003-0000012.wal",
		"00000000000000000003_000012.wal", "0000000000000000000+-000012.wal", "00000000000000000000-000012.wal",
		"00000000000000000003-000000.wal", "99999999999999999999-000001.wal", "00000000000000000003-00001a.wal",
	} {
		if _, _, ok := parseSegmentName(bad); ok {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}

func TestParseCompression(t *testing.T) {
	for s, want := range map[string]Compression{"": None, "none": None, "s2": S2, "zstd": Zstd} {
		if c, err := ParseCompression(s); err != nil || c != want {
			t.Errorf("ParseCompression(%q) = %v, %v", s, c, err)
		}
	}
	if _, err := ParseCompression("lz4"); err == nil {
		t.Error("lz4 accepted")
	}
	var c Compression
	if err := c.UnmarshalText([]byte("zstd")); err != nil || c != Zstd {
		t.Errorf("UnmarshalText: %v, %v", c, err)
	}
	if b, err := S2.MarshalText(); err != nil || string(b) != "s2" {
		t.Errorf("MarshalText: %q, %v", b, err)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1, func(o *Options) { o.Registerer = reg })
	appendN(t, w, 1, 5)
	mustClose(t, w)
	// A second WAL on the same registry shares the metrics.
	w = open(t, fs, 2, func(o *Options) { o.Registerer = reg })
	appendN(t, w, 1, 5)
	mustClose(t, w)

	got := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		m := f.GetMetric()[0]
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			got[f.GetName()] = m.GetCounter().GetValue()
		case dto.MetricType_HISTOGRAM:
			got[f.GetName()] = float64(m.GetHistogram().GetSampleCount())
		}
	}
	if len(got) != 8 {
		t.Errorf("gathered %v, want 8 metrics", got)
	}
	// Nothing was removed, so nothing was kept or recycled (see
	// TestRecycledSegmentReplaysOnlyNewRecords for counts that move).
	if got["writer_wal_spares_total"] != 0 || got["writer_wal_segments_recycled_total"] != 0 {
		t.Errorf("spares and recycled segments counted without a RemoveThrough: %v", got)
	}
	if n := got["writer_wal_records_total"]; n != 10 {
		t.Errorf("writer_wal_records_total = %v, want 10", n)
	}
	if n := got["writer_wal_syncs_total"]; n < 2 || got["writer_wal_fsync_duration_seconds"] != n {
		t.Errorf("writer_wal_syncs_total = %v, fsync histogram count %v", n, got["writer_wal_fsync_duration_seconds"])
	}
	if n := got["writer_wal_written_bytes_total"]; n < 10*headerSize {
		t.Errorf("writer_wal_written_bytes_total = %v", n)
	}
}

// A record larger than the unwritten-bytes bound is admitted once the
// buffer drains, and appenders behind it are not stuck.
func TestRecordLargerThanBuffer(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1)
	big := bytes.Repeat([]byte("0123456789abcdef"), (maxUnwritten+1<<20)/16)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			p := big
			if i > 0 {
				p = payloadFor(uint64(i), 1)
			}
			first, err := w.Append(1, 1, p)
			if err == nil {
				err = w.SyncTo(first)
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mustClose(t, w)
	w = open(t, fs, 2)
	defer mustClose(t, w)
	gots := replayAll(t, w, 0, w.Tail())
	found := false
	for _, g := range gots {
		found = found || bytes.Equal(g.payload, big)
	}
	if len(gots) != 4 || !found {
		t.Fatalf("replayed %d records (big one found: %v), want 4", len(gots), found)
	}
}

// TestAppendPrepared: a payload compressed by Prepare (outside any lock)
// and appended later reads back like one given to Append, in the order of
// AppendPrepared calls, not of Prepare calls; a record prepared by another
// WAL is refused.
func TestAppendPrepared(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1, compression(S2))
	a, b := textPayload(rng, 3000), textPayload(rng, 2000)
	pa, err := w.Prepare(a)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := w.Prepare(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendPrepared(1, 1, pb); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendPrepared(1, 2, pa); err != nil {
		t.Fatal(err)
	}
	pa.Release()
	pb.Release()
	other := open(t, vfs.NewStrictMem(), 1)
	defer mustClose(t, other)
	po, err := other.Prepare(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendPrepared(1, 1, po); err == nil || !strings.Contains(err.Error(), "another WAL") {
		t.Fatalf("a record prepared by another WAL: %v", err)
	}
	if _, err := w.Prepare(make([]byte, MaxPayloadSize+1)); err == nil {
		t.Fatal("Prepare accepted an oversize payload")
	}
	if err := w.SyncTo(w.Tail()); err != nil {
		t.Fatal(err)
	}
	mustClose(t, w)
	if c := storedCodecs(t, fs, segPath(1, 1)); c[0] != S2 || c[1] != S2 {
		t.Fatalf("stored codecs %v, want s2 for both", c)
	}
	w = open(t, fs, 2)
	defer mustClose(t, w)
	gots := replayAll(t, w, 0, w.Tail())
	if len(gots) != 2 || !bytes.Equal(gots[0].payload, b) || !bytes.Equal(gots[1].payload, a) || gots[1].FirstPos != 2 {
		t.Fatalf("read back %d records in the wrong order or with other bytes", len(gots))
	}
}
