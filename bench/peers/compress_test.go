package peers

import (
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/rollwal/rollwal/wal"
)

// BenchmarkWALCompression measures the WAL codec on the commit path: 16
// writers, each appending encoded 64-row rollout batches (the record the
// engine appends for one AppendBatch, about 70 KiB) and waiting for
// durability, with Options.Compression none, s2 and zstd, in that order
// in the same run. b.N counts records; rows/s counts rows and MB/s the
// uncompressed payload.
//
//	codec=X/rollwal  x-uncompressed: rows/s over none's (s2 target ≥ 0.9)
//	                 x-smaller: none's bytes on disk per row over X's
//	                 (s2 target ≥ 1.6)
//	                 x-encode-1core: MB/s over the encode-only row's, i.e.
//	                 how many cores' worth of encoding the WAL sustained
//	codec=X/encode   the codec alone on the same payloads, one goroutine,
//	                 configured as the WAL configures it: the CPU ceiling
func BenchmarkWALCompression(b *testing.B) {
	dir := benchDir(b)
	var none rate
	for _, comp := range []wal.Compression{wal.None, wal.S2, wal.Zstd} {
		b.Run("codec="+comp.String(), func(b *testing.B) {
			var encode float64
			if comp != wal.None {
				b.Run("encode", func(b *testing.B) { encode = runEncode(b, comp) })
			}
			b.Run("rollwal", func(b *testing.B) {
				r := runRollwalGroup(b, dir, 16, batchPayloads, rowsPerBatch, comp)
				if comp == wal.None {
					none = r
					return
				}
				ratio(b, "x-uncompressed", r.rows, none.rows)
				ratio(b, "x-smaller", none.diskPerRow, r.diskPerRow)
				ratio(b, "x-encode-1core", r.mb, encode)
			})
		})
	}
}

// runEncode compresses b.N batch payloads with the codec as rollwal's WAL
// configures it, in one goroutine, and returns MB/s of input.
func runEncode(b *testing.B, comp wal.Compression) float64 {
	var enc *zstd.Encoder
	if comp == wal.Zstd {
		var err error
		enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false),
			zstd.WithZeroFrames(true), zstd.WithLowerEncoderMem(true))
		if err != nil {
			b.Fatal(err)
		}
		defer enc.Close()
	}
	dst := make([]byte, s2.MaxEncodedLen(1<<20))
	var in, out int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		p := batchPayloads[i%len(batchPayloads)]
		var c []byte
		if enc != nil {
			c = enc.EncodeAll(p, dst[:0])
		} else {
			c = s2.Encode(dst, p)
		}
		in, out = in+int64(len(p)), out+int64(len(c))
	}
	b.StopTimer()
	reportCores(b, cpu0)
	if out == 0 || out >= in {
		b.Fatalf("encoded %d bytes into %d", in, out)
	}
	r := reportRate(b, int64(b.N)*rowsPerBatch, in)
	b.ReportMetric(float64(in)/float64(out), "comp-ratio")
	return r.mb
}
