package generation

import (
	"context"
	"encoding/json"
	"fmt"
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

// rlBenchRows is the rows of one RL generation in the benchmark: about
// 24 KB each (3,300 tokens, their log-probabilities, 8 messages), so 5,000
// make a generation of about 120 MB of values.
const rlBenchRows = 5_000

type rlBench struct {
	s, js   *schema.Schema // the RL schema, and the same with the lists as JSON text
	d, jd   Data
	peer    []rolloutgen.RLPeerRow
	logical int64 // bytes of values (4 per token and log-probability)
}

func newRLBench(b *testing.B) *rlBench {
	rows := rolloutgen.New(1, "rl").RLRows(rlBenchRows)
	rb := &rlBench{s: rolloutgen.RLSchema()}
	batch, err := rb.s.Build(rows)
	if err != nil {
		b.Fatal(err)
	}
	rb.d = seqData(batch)
	rb.js, rb.jd = asJSONText(b, rb.s, rows)
	rb.peer = make([]rolloutgen.RLPeerRow, len(rows))
	for i, r := range rows {
		rb.peer[i] = rolloutgen.RLPeer(r, uint64(i+1))
		rb.logical += rolloutgen.RLValueBytes(r)
	}
	lay, err := newLayout(rb.s)
	if err != nil {
		b.Fatal(err)
	}
	if !parquet.EqualNodes(parquet.SchemaOf(rolloutgen.RLPeerRow{}), lay.schema) {
		b.Fatalf("the peer's schema differs from Write's:\n%v\n%v", parquet.SchemaOf(rolloutgen.RLPeerRow{}), lay.schema)
	}
	return rb
}

func seqData(batch *schema.Batch) Data {
	n := batch.Len()
	d := Data{Rows: batch, Seq: make([]uint64, n), Epoch: make([]uint64, n)}
	for i := range n {
		d.Seq[i], d.Epoch[i] = uint64(i+1), 1
	}
	return d
}

// asJSONText is the schema and rows with every list column as JSON text:
// what a table without list types stores for the same rollouts.
func asJSONText(b *testing.B, s *schema.Schema, rows []schema.Row) (*schema.Schema, Data) {
	cols := make([]schema.Column, len(s.Columns))
	for i, c := range s.Columns {
		cols[i] = c
		if c.Type == schema.List {
			cols[i] = schema.Column{Name: c.Name, Type: schema.JSON}
		}
	}
	js, err := schema.New(cols)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]schema.Row, len(rows))
	for i, r := range rows {
		out[i] = schema.Row{}
		for k, v := range r {
			if c := js.Index(k); c >= 0 && js.Columns[c].Type == schema.JSON {
				text, err := json.Marshal(v)
				if err != nil {
					b.Fatal(err)
				}
				v = string(text)
			}
			out[i][k] = v
		}
	}
	batch, err := js.Build(out)
	if err != nil {
		b.Fatal(err)
	}
	return js, seqData(batch)
}

// BenchmarkFlushRL writes one generation of realistic RL rows per op
// (rolloutgen.RLRows: token ids as list<int32>, log-probabilities as
// list<float32>, chat messages as list<struct>) with Write, and in the
// same op, off the clock, the same rows with a bare parquet-go
// GenericWriter[struct] of the same types and codec (peerCodec);
// alternate ops go first, as in BenchmarkFlush.
//
//	rows/s, MB/s             Write's throughput (MB of values, 4 bytes a token)
//	x-parquet-go             Write's rows/s over the bare writer's (target ≥ 0.9)
//	disk-B/row               file bytes per row
//	json-text-disk-B/row     file bytes per row with the lists stored as JSON text
func BenchmarkFlushRL(b *testing.B) {
	rb := newRLBench(b)
	for _, codec := range []string{CodecSnappy, CodecZstd} {
		b.Run(fmt.Sprintf("codec=%s/rows=%d", codec, rlBenchRows), func(b *testing.B) {
			cc, err := peerCodec(codec)
			if err != nil {
				b.Fatal(err)
			}
			opts := Options{FS: vfs.Default, Codec: codec}
			dir := b.TempDir()
			ctx := context.Background()
			jf, err := Write(ctx, opts, dir, rb.js, Meta{Table: "bench", Shard: "j", Generation: 1, Epoch: 1}, rb.jd)
			if err != nil {
				b.Fatal(err)
			}
			peerPath := filepath.Join(dir, "peer.parquet")
			var peerTime time.Duration
			runPeer := func() {
				b.StopTimer()
				defer b.StartTimer()
				start := time.Now()
				if err := writeRLPeer(peerPath, opts, cc, rb.peer); err != nil {
					b.Fatal(err)
				}
				peerTime += time.Since(start)
			}
			var size int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%2 == 1 {
					runPeer()
				}
				f, err := Write(ctx, opts, dir, rb.s, Meta{Table: "bench", Shard: "0", Generation: uint64(i + 2), Epoch: 1}, rb.d)
				if err != nil {
					b.Fatal(err)
				}
				if i%2 == 0 {
					runPeer()
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
			rows := float64(rlBenchRows) * float64(b.N)
			b.ReportMetric(rows/secs, "rows/s")
			b.ReportMetric(float64(rb.logical)*float64(b.N)/secs/1e6, "MB/s")
			b.ReportMetric(rows/peerTime.Seconds(), "peer-rows/s")
			b.ReportMetric(peerTime.Seconds()/secs, "x-parquet-go")
			b.ReportMetric(float64(size)/rlBenchRows, "disk-B/row")
			b.ReportMetric(float64(jf.Size)/rlBenchRows, "json-text-disk-B/row")
		})
	}
}

func writeRLPeer(path string, opts Options, cc compress.Codec, rows []rolloutgen.RLPeerRow) error {
	opts.EnsureDefaults()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := parquet.NewGenericWriter[rolloutgen.RLPeerRow](f,
		parquet.Compression(cc),
		parquet.PageBufferSize(opts.PageBufferSize),
		parquet.MaxRowsPerRowGroup(int64(opts.RowGroupRows)),
		parquet.BloomFilters(parquet.SplitBlockFilter(bloomBitsPerValue, schema.IDColumn)))
	if _, err := w.Write(rows); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
