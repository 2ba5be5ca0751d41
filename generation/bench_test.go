package generation

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"

	"github.com/rollwal/rollwal/internal/rolloutgen"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

const benchRows = 100_000

// benchData is one seeded set of rollout rows, as Write takes them and as
// the bare peer takes them (sharing the strings).
type benchData struct {
	s       *schema.Schema
	d       Data
	peer    []peerRow
	peerW   []peerWriteRow // peer, as the peer writes it
	logical int64          // bytes of column values, the "MB/s" base
}

// peerRow is the same rollout row as a Go struct, tagged so that parquet-go
// derives exactly the layout Write produces (checked in newBenchData).
type peerRow struct {
	ID         string   `parquet:"id"`
	Prompt     string   `parquet:"prompt"`
	Completion string   `parquet:"completion"`
	Reward     *float64 `parquet:"reward,optional"`
	Metadata   *string  `parquet:"metadata,optional,json"`
	Seq        uint64   `parquet:"_seq,delta"`
	Epoch      uint64   `parquet:"_epoch,delta"`
}

// peerWriteRow is what the bare parquet-go peer writes: peerRow without
// the metadata column's JSON annotation. parquet-go v0.32.0 writes a
// *string tagged "json" as null (every value lost), which made the peer
// skip a column's bytes; as a plain string it writes the same BYTE_ARRAY
// values Write does.
type peerWriteRow struct {
	ID         string   `parquet:"id"`
	Prompt     string   `parquet:"prompt"`
	Completion string   `parquet:"completion"`
	Reward     *float64 `parquet:"reward,optional"`
	Metadata   *string  `parquet:"metadata,optional"`
	Seq        uint64   `parquet:"_seq,delta"`
	Epoch      uint64   `parquet:"_epoch,delta"`
}

var benchCache = map[int]*benchData{}

func newBenchData(b *testing.B, n int) *benchData {
	if bd := benchCache[n]; bd != nil {
		return bd
	}
	s := schema.Rollout()
	batch, err := s.Build(rolloutgen.New(1, "bench").Rows(n))
	if err != nil {
		b.Fatal(err)
	}
	bd := &benchData{s: s, d: Data{Rows: batch, Seq: make([]uint64, n), Epoch: make([]uint64, n)}, peer: make([]peerRow, n)}
	prompt, completion, reward, meta := batch.Cols[0], batch.Cols[1], batch.Cols[2], batch.Cols[3]
	for i := range n {
		bd.d.Seq[i], bd.d.Epoch[i] = uint64(i+1), 1
		p := &bd.peer[i]
		*p = peerRow{ID: batch.IDs[i], Prompt: prompt.Str[i], Completion: completion.Str[i], Seq: uint64(i + 1), Epoch: 1}
		bd.logical += int64(len(p.ID) + len(p.Prompt) + len(p.Completion) + 16)
		if !reward.IsNull(i) {
			p.Reward = &reward.F64[i]
			bd.logical += 8
		}
		if !meta.IsNull(i) {
			p.Metadata = &meta.Str[i]
			bd.logical += int64(len(meta.Str[i]))
		}
	}
	lay, err := newLayout(s)
	if err != nil {
		b.Fatal(err)
	}
	if !parquet.EqualNodes(parquet.SchemaOf(peerRow{}), lay.schema) {
		b.Fatalf("the peer's schema differs from Write's:\n%v\n%v", parquet.SchemaOf(peerRow{}), lay.schema)
	}
	bd.peerW = make([]peerWriteRow, n)
	for i, r := range bd.peer {
		bd.peerW[i] = peerWriteRow(r)
	}
	benchCache[n] = bd
	return bd
}

// writePeer writes the rows with a bare parquet-go GenericWriter,
// configured like Write (codec, page size, row groups, id bloom filter),
// and makes the file as durable as Write does (fsync, close).
func writePeer(path string, opts Options, codec compress.Codec, rows []peerWriteRow) (int64, error) {
	opts.EnsureDefaults()
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := parquet.NewGenericWriter[peerWriteRow](f,
		parquet.Compression(codec),
		parquet.PageBufferSize(opts.PageBufferSize),
		parquet.MaxRowsPerRowGroup(int64(opts.RowGroupRows)),
		parquet.BloomFilters(parquet.SplitBlockFilter(bloomBitsPerValue, schema.IDColumn)))
	if _, err := w.Write(rows); err != nil {
		return 0, err
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), f.Close()
}

// BenchmarkFlush writes one generation of 100k rollout rows per op with
// Write (vfs.Default, b.TempDir), and in the same op, off the clock, the
// same rows with a bare parquet-go GenericWriter[struct] on the same codec
// (for Snappy, each page compressed whole: see peerCodec). Interleaving
// the two keeps disk and CPU drift out of the ratio.
//
//	rows/s, MB/s        Write's throughput (MB of column values)
//	peer-rows/s         the bare writer's
//	x-parquet-go        Write's rows/s over the bare writer's (target ≥ 0.9)
//	disk-B/logical-B    file size over column bytes
//
// For Snappy the bare writer also runs with parquet-go's own Snappy codec
// (s2's "better" encoder): x-parquet-go-snappy is what rollwal's fast Snappy
// gains over the library default.
func BenchmarkFlush(b *testing.B) {
	bd := newBenchData(b, benchRows)
	for _, codec := range []string{CodecSnappy, CodecZstd, CodecNone} {
		b.Run(fmt.Sprintf("codec=%s/rows=%dk", codec, benchRows/1000), func(b *testing.B) {
			same, err := peerCodec(codec)
			if err != nil {
				b.Fatal(err)
			}
			peers := []flushPeer{{metric: "x-parquet-go", codec: same}}
			if codec == CodecSnappy {
				peers = append(peers, flushPeer{metric: "x-parquet-go-snappy", codec: &parquet.Snappy})
			}
			runFlush(b, bd, Options{FS: vfs.Default, Codec: codec}, peers)
		})
	}
}

// flushPeer is a bare parquet-go writer run next to Write.
type flushPeer struct {
	metric string // name of the ratio metric
	codec  compress.Codec
	time   time.Duration
}

// BenchmarkFlushShape measures the row-group and page sizes behind
// DefaultRowGroupRows and DefaultPageBufferSize (unpaired).
func BenchmarkFlushShape(b *testing.B) {
	bd := newBenchData(b, benchRows)
	for _, page := range []int{64 << 10, 256 << 10, 1 << 20} {
		for _, rg := range []int{16 << 10, 64 << 10, 128 << 10} {
			b.Run(fmt.Sprintf("page=%dK/rowgroup=%dk", page>>10, rg>>10), func(b *testing.B) {
				runFlush(b, bd, Options{FS: vfs.Default, PageBufferSize: page, RowGroupRows: rg}, nil)
			})
		}
	}
}

func runFlush(b *testing.B, bd *benchData, opts Options, peers []flushPeer) {
	dir := b.TempDir()
	ctx := context.Background()
	peerPath := filepath.Join(dir, "peer.parquet")
	var size int64
	runPeers := func() {
		b.StopTimer()
		defer b.StartTimer()
		for i := range peers {
			start := time.Now()
			if _, err := writePeer(peerPath, opts, peers[i].codec, bd.peerW); err != nil {
				b.Fatal(err)
			}
			peers[i].time += time.Since(start)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 1 {
			runPeers() // alternate who goes first: neither always meets the other's writeback
		}
		f, err := Write(ctx, opts, dir, bd.s, Meta{Table: "bench", Shard: "0", Generation: uint64(i), Epoch: 1}, bd.d)
		if err != nil {
			b.Fatal(err)
		}
		if i%2 == 0 {
			runPeers()
		}
		b.StopTimer()
		size = f.Size
		if err := os.Remove(f.Path); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	secs := b.Elapsed().Seconds()
	rows := float64(benchRows) * float64(b.N)
	b.ReportMetric(rows/secs, "rows/s")
	b.ReportMetric(float64(bd.logical)*float64(b.N)/secs/1e6, "MB/s")
	b.ReportMetric(float64(size)/float64(bd.logical), "disk-B/logical-B")
	for i, p := range peers {
		if i == 0 {
			b.ReportMetric(rows/p.time.Seconds(), "peer-rows/s")
		}
		b.ReportMetric(p.time.Seconds()/secs, p.metric)
	}
}

// BenchmarkRead reads one 100k-row generation per op with Read (columnar,
// into a Batch), paired with a bare parquet-go GenericReader[peerRow]
// reading the same file into structs. x-parquet-go is Read's rows/s over
// the bare reader's.
func BenchmarkRead(b *testing.B) {
	bd := newBenchData(b, benchRows)
	dir := b.TempDir()
	f, err := Write(context.Background(), Options{}, dir, bd.s, Meta{Table: "bench", Shard: "0", Generation: 1, Epoch: 1}, bd.d)
	if err != nil {
		b.Fatal(err)
	}
	var peerTime time.Duration
	peer := func() {
		b.StopTimer()
		defer b.StartTimer()
		start := time.Now()
		if err := readPeer(f.Path); err != nil {
			b.Fatal(err)
		}
		peerTime += time.Since(start)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 1 {
			peer()
		}
		if _, _, err := Read(vfs.Default, f.Path, bd.s); err != nil {
			b.Fatal(err)
		}
		if i%2 == 0 {
			peer()
		}
	}
	b.StopTimer()
	secs := b.Elapsed().Seconds()
	rows := float64(benchRows) * float64(b.N)
	b.ReportMetric(rows/secs, "rows/s")
	b.ReportMetric(float64(bd.logical)*float64(b.N)/secs/1e6, "MB/s")
	b.ReportMetric(rows/peerTime.Seconds(), "peer-rows/s")
	b.ReportMetric(peerTime.Seconds()/secs, "x-parquet-go")
}

func readPeer(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return err
	}
	r := parquet.NewGenericReader[peerRow](pf)
	defer r.Close()
	rows := make([]peerRow, pf.NumRows())
	n, err := r.Read(rows)
	if int64(n) == pf.NumRows() && err == io.EOF {
		err = nil
	}
	return err
}

// BenchmarkNested writes and reads rows of every nested shape (nestedTypes:
// every primitive, lists of each, structs, lists of structs).
func BenchmarkNested(b *testing.B) {
	s := nestedTypes(b)
	d := nestedRows(b, s, 20_000, 1, 0)
	dir := b.TempDir()
	opts := Options{FS: vfs.Default}
	var f File
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			var err error
			if f, err = Write(context.Background(), opts, dir, s, testMeta(), d); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := os.Remove(f.Path); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(d.Rows.Len())*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	f = mustWrite(b, opts, dir, s, testMeta(), d)
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := Read(vfs.Default, f.Path, s); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(d.Rows.Len())*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}

// peerCodec is the codec the bare parquet-go peers write with: rollwal's,
// except that a Snappy page is compressed whole by s2's fast encoder, as a
// parquet-go user registering that encoder would: compressing a page in
// parts on several cores is rollwal's own (codec.go), and is measured
// against it.
func peerCodec(name string) (compress.Codec, error) {
	if name == CodecSnappy {
		return wholePageSnappy{}, nil
	}
	return codecFor(name)
}

type wholePageSnappy struct{ fastSnappy }

func (wholePageSnappy) Encode(dst, src []byte) ([]byte, error) {
	return encodeSnappyWhole(dst, src), nil
}
