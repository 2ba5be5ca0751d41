package peers

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	aparquet "github.com/apache/arrow-go/v18/parquet"
	acompress "github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/klauspost/compress/s2"
	"github.com/parquet-go/parquet-go"
	pqcompress "github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/format"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/internal/rolloutgen"
	"github.com/rollwal/rollwal/schema"
)

const flushRows = 100_000

// BenchmarkFlush writes one generation of 100k rollout rows per op with
// generation.Write (snappy, its defaults: 256 KiB pages, 128k-row groups,
// an id bloom filter, fsync, rename, directory sync), and in the same op,
// off the clock and alternating who goes first, the same rows with:
//
//	parquet-go         a bare GenericWriter[struct] with the same layout,
//	                   page size, row group size, bloom filter and the same
//	                   Snappy encoder (s2.EncodeSnappy)
//	parquet-go-snappy  the same with parquet-go's own Snappy codec
//	                   (s2.EncodeSnappyBetter)
//	arrow              arrow-go pqarrow FileWriter.Write of one prebuilt
//	                   record, dictionary off, the same page and row group
//	                   sizes, an id bloom filter (1% FPP), delta-encoded
//	                   _seq/_epoch, with the same Snappy encoder registered
//	arrow-snappy       the same with arrow-go's own Snappy codec
//
// Each peer creates, writes, fsyncs and closes its file. A GC runs off
// the clock before every subject, so that none pays for another's garbage
// (arrow's especially); it also empties sync.Pools, so B/op counts the
// buffers a flush allocates from cold pools. x-<peer> is
// rollwal's rows/s over the peer's (targets: ≥ 0.9 parquet-go, ≥ 1.4
// arrow). The in-memory input of each subject (rollwal's columnar batch,
// the peer's structs, arrow's record) is built once, off the clock.
func BenchmarkFlush(b *testing.B) {
	fd := newFlushData(b)
	dir := b.TempDir()
	ctx := context.Background()
	peers := []struct {
		name  string
		write func(path string) (int64, error)
		time  time.Duration
		size  int64
	}{
		{name: "parquet-go", write: func(p string) (int64, error) { return writeParquetGo(p, fastSnappy{}, fd.rows) }},
		{name: "parquet-go-snappy", write: func(p string) (int64, error) { return writeParquetGo(p, &parquet.Snappy, fd.rows) }},
		{name: "arrow", write: func(p string) (int64, error) { return writeArrow(p, fd, true) }},
		{name: "arrow-snappy", write: func(p string) (int64, error) { return writeArrow(p, fd, false) }},
	}
	b.Run("codec=snappy/rows=100k", func(b *testing.B) {
		for i := range peers {
			peers[i].time = 0
		}
		runPeers := func() {
			b.StopTimer()
			defer b.StartTimer()
			for i := range peers {
				path := filepath.Join(dir, peers[i].name+".parquet")
				runtime.GC() // every subject starts from a collected heap
				start := time.Now()
				size, err := peers[i].write(path)
				if err != nil {
					b.Fatalf("%s: %v", peers[i].name, err)
				}
				peers[i].time += time.Since(start)
				peers[i].size = size
				checkRows(b, path, peers[i].name)
				checkNulls(b, path, peers[i].name)
				if err := os.Remove(path); err != nil {
					b.Fatal(err)
				}
			}
		}
		var size int64
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if i%2 == 1 {
				runPeers()
			}
			b.StopTimer()
			runtime.GC()
			b.StartTimer()
			f, err := generation.Write(ctx, generation.Options{}, dir, fd.s,
				generation.Meta{Table: "bench", Shard: "0", Generation: uint64(i + 1), Epoch: 1}, fd.data)
			if err != nil {
				b.Fatal(err)
			}
			if i%2 == 0 {
				runPeers()
			}
			b.StopTimer()
			if f.Meta.Rows != flushRows {
				b.Fatalf("generation holds %d rows, want %d", f.Meta.Rows, flushRows)
			}
			if i == 0 {
				checkLayout(b, f.Path)
				checkNulls(b, f.Path, "rollwal")
			}
			checkRows(b, f.Path, "rollwal")
			size = f.Size
			if err := os.Remove(f.Path); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.StopTimer()
		rows := float64(flushRows) * float64(b.N)
		secs := b.Elapsed().Seconds()
		b.ReportMetric(rows/secs, "rows/s")
		b.ReportMetric(float64(fd.logical)*float64(b.N)/secs/1e6, "MB/s")
		b.ReportMetric(float64(size)/flushRows, "B/row")
		for _, p := range peers {
			b.ReportMetric(p.time.Seconds()/secs, "x-"+p.name)
		}
		b.ReportMetric(rows/peers[0].time.Seconds(), "parquet-go-rows/s")
		b.ReportMetric(rows/peers[2].time.Seconds(), "arrow-rows/s")
		b.ReportMetric(float64(peers[0].size)/flushRows, "parquet-go-B/row")
		b.ReportMetric(float64(peers[2].size)/flushRows, "arrow-B/row")
	})
}

// flushData is one seeded set of 100k rollout rows in each subject's input
// form.
type flushData struct {
	s       *schema.Schema
	data    generation.Data
	rows    []peerRow
	arrow   arrow.RecordBatch
	logical int64 // bytes of column values, the MB/s base
}

// layoutRow is the rollout row as a Go struct, tagged so that parquet-go
// derives exactly the schema generation.Write produces (checkLayout checks
// it).
type layoutRow struct {
	ID         string   `parquet:"id"`
	Prompt     string   `parquet:"prompt"`
	Completion string   `parquet:"completion"`
	Reward     *float64 `parquet:"reward,optional"`
	Metadata   *string  `parquet:"metadata,optional,json"`
	Seq        uint64   `parquet:"_seq,delta"`
	Epoch      uint64   `parquet:"_epoch,delta"`
}

// peerRow is what the bare parquet-go peer writes: layoutRow but for the
// metadata column's logical type. parquet-go v0.32.0 writes a *string
// tagged "json" as null (every value lost), so the peer declares it a
// plain string: the same BYTE_ARRAY column, the same bytes, only the JSON
// annotation missing (checkLayout checks the rest).
type peerRow struct {
	ID         string   `parquet:"id"`
	Prompt     string   `parquet:"prompt"`
	Completion string   `parquet:"completion"`
	Reward     *float64 `parquet:"reward,optional"`
	Metadata   *string  `parquet:"metadata,optional"`
	Seq        uint64   `parquet:"_seq,delta"`
	Epoch      uint64   `parquet:"_epoch,delta"`
}

func newFlushData(b *testing.B) *flushData {
	s := schema.Rollout()
	batch, err := s.Build(rolloutgen.New(1, "bench").Rows(flushRows))
	if err != nil {
		b.Fatal(err)
	}
	fd := &flushData{s: s, rows: make([]peerRow, flushRows),
		data: generation.Data{Rows: batch, Seq: make([]uint64, flushRows), Epoch: make([]uint64, flushRows)}}
	prompt, completion, reward, meta := batch.Cols[0], batch.Cols[1], batch.Cols[2], batch.Cols[3]
	mem := memory.NewGoAllocator()
	rb := array.NewRecordBuilder(mem, arrowSchema)
	defer rb.Release()
	for i := range flushRows {
		fd.data.Seq[i], fd.data.Epoch[i] = uint64(i+1), 1
		p := &fd.rows[i]
		*p = peerRow{ID: batch.IDs[i], Prompt: prompt.Str[i], Completion: completion.Str[i], Seq: uint64(i + 1), Epoch: 1}
		fd.logical += int64(len(p.ID) + len(p.Prompt) + len(p.Completion) + 16)
		rb.Field(0).(*array.StringBuilder).Append(p.ID)
		rb.Field(1).(*array.StringBuilder).Append(p.Prompt)
		rb.Field(2).(*array.StringBuilder).Append(p.Completion)
		if reward.IsNull(i) {
			rb.Field(3).AppendNull()
		} else {
			p.Reward = &reward.F64[i]
			fd.logical += 8
			rb.Field(3).(*array.Float64Builder).Append(reward.F64[i])
		}
		if meta.IsNull(i) {
			rb.Field(4).AppendNull()
		} else {
			p.Metadata = &meta.Str[i]
			fd.logical += int64(len(meta.Str[i]))
			rb.Field(4).(*array.StringBuilder).Append(meta.Str[i])
		}
		rb.Field(5).(*array.Uint64Builder).Append(p.Seq)
		rb.Field(6).(*array.Uint64Builder).Append(p.Epoch)
	}
	fd.arrow = rb.NewRecordBatch()
	return fd
}

// checkLayout checks that layoutRow is the schema generation.Write wrote
// to path, and that peerRow has the same columns (path, physical type,
// optionality, encoding) as layoutRow.
func checkLayout(b *testing.B, path string) {
	pf := openParquet(b, path)
	want := parquet.SchemaOf(layoutRow{})
	if !parquet.EqualNodes(want, pf.Schema()) {
		b.Fatalf("layoutRow's schema differs from Write's:\n%v\n%v", want, pf.Schema())
	}
	peer := parquet.SchemaOf(peerRow{})
	if len(peer.Columns()) != len(want.Columns()) {
		b.Fatalf("the peer has %d columns, Write %d", len(peer.Columns()), len(want.Columns()))
	}
	for _, col := range want.Columns() {
		w, _ := want.Lookup(col...)
		p, ok := peer.Lookup(col...)
		if !ok || p.ColumnIndex != w.ColumnIndex || p.Node.Type().Kind() != w.Node.Type().Kind() ||
			p.Node.Optional() != w.Node.Optional() || p.Node.Encoding() != w.Node.Encoding() {
			b.Fatalf("the peer's column %v differs from Write's", col)
		}
	}
}

// checkNulls checks that the file at path has no null in its metadata
// column: every subject wrote the values.
func checkNulls(b *testing.B, path, who string) {
	pf := openParquet(b, path)
	for _, rg := range pf.Metadata().RowGroups {
		for _, cc := range rg.Columns {
			if cc.MetaData.Statistics.NullCount != 0 {
				b.Fatalf("%s wrote %d nulls in %v", who, cc.MetaData.Statistics.NullCount, cc.MetaData.PathInSchema)
			}
		}
	}
}

// checkRows checks that the Parquet file at path holds flushRows rows.
func checkRows(b *testing.B, path, who string) {
	if n := openParquet(b, path).NumRows(); n != flushRows {
		b.Fatalf("%s wrote %d rows, want %d", who, n, flushRows)
	}
}

func openParquet(b *testing.B, path string) *parquet.File {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		b.Fatalf("%s: %v", path, err)
	}
	return pf
}

// writeParquetGo writes rows with a bare parquet-go GenericWriter
// configured as generation.Write configures its writer, and fsyncs.
func writeParquetGo(path string, codec pqcompress.Codec, rows []peerRow) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := parquet.NewGenericWriter[peerRow](f,
		parquet.Compression(codec),
		parquet.PageBufferSize(generation.DefaultPageBufferSize),
		parquet.MaxRowsPerRowGroup(generation.DefaultRowGroupRows),
		parquet.BloomFilters(parquet.SplitBlockFilter(10, "id")))
	if _, err := w.Write(rows); err != nil {
		return 0, err
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return syncClose(f)
}

func syncClose(f *os.File) (int64, error) {
	if err := f.Sync(); err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), f.Close()
}

// fastSnappy is the Snappy codec generation.Write uses, for parquet-go:
// standard Snappy blocks from s2's fast encoder.
type fastSnappy struct{}

func (fastSnappy) String() string                            { return "SNAPPY" }
func (fastSnappy) CompressionCodec() format.CompressionCodec { return format.Snappy }
func (fastSnappy) Encode(dst, src []byte) ([]byte, error) {
	return s2.EncodeSnappy(dst[:cap(dst)], src), nil
}
func (fastSnappy) Decode(dst, src []byte) ([]byte, error) { return s2.Decode(dst[:cap(dst)], src) }

// arrowFastSnappy is the same encoder for arrow-go's codec registry.
type arrowFastSnappy struct{}

func (arrowFastSnappy) Encode(dst, src []byte) []byte { return s2.EncodeSnappy(dst[:cap(dst)], src) }
func (c arrowFastSnappy) EncodeLevel(dst, src []byte, _ int) []byte {
	return c.Encode(dst, src)
}
func (arrowFastSnappy) CompressBound(n int64) int64 { return int64(s2.MaxEncodedLen(int(n))) }
func (arrowFastSnappy) Decode(dst, src []byte) []byte {
	out, err := s2.Decode(dst[:cap(dst)], src)
	if err != nil {
		panic(err)
	}
	return out
}

var arrowSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "prompt", Type: arrow.BinaryTypes.String},
	{Name: "completion", Type: arrow.BinaryTypes.String},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "metadata", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "_seq", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "_epoch", Type: arrow.PrimitiveTypes.Uint64},
}, nil)

// writeArrow writes the prebuilt record with arrow-go pqarrow and fsyncs.
// With fast, the Snappy codec is arrowFastSnappy for the duration of the
// write (arrow's codec registry is global; the benchmark is
// single-threaded).
func writeArrow(path string, fd *flushData, fast bool) (int64, error) {
	if fast {
		orig, err := acompress.GetCodec(acompress.Codecs.Snappy)
		if err != nil {
			return 0, err
		}
		acompress.RegisterCodec(acompress.Codecs.Snappy, arrowFastSnappy{})
		defer acompress.RegisterCodec(acompress.Codecs.Snappy, orig)
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	props := aparquet.NewWriterProperties(
		aparquet.WithCompression(acompress.Codecs.Snappy),
		aparquet.WithDictionaryDefault(false),
		aparquet.WithDataPageSize(generation.DefaultPageBufferSize),
		aparquet.WithMaxRowGroupLength(generation.DefaultRowGroupRows),
		aparquet.WithEncodingFor("_seq", aparquet.Encodings.DeltaBinaryPacked),
		aparquet.WithEncodingFor("_epoch", aparquet.Encodings.DeltaBinaryPacked),
		aparquet.WithBloomFilterEnabledFor("id", true),
		aparquet.WithBloomFilterFPPFor("id", 0.01),
		aparquet.WithBloomFilterNDVFor("id", flushRows),
	)
	// Hide Close: pqarrow closes a sink that has one, and the file is
	// still to be synced.
	w, err := pqarrow.NewFileWriter(arrowSchema, struct{ io.Writer }{f}, props, pqarrow.DefaultWriterProps())
	if err != nil {
		return 0, err
	}
	if err := w.Write(fd.arrow); err != nil {
		return 0, err
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return syncClose(f)
}
