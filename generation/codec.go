package generation

import (
	"fmt"

	"github.com/klauspost/compress/s2"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
)

// Codec names accepted by Options.Codec.
const (
	CodecSnappy = "snappy" // default: Snappy blocks from s2's fast encoder
	CodecZstd   = "zstd"   // zstd at its fastest level
	CodecNone   = "none"   // uncompressed
)

// fastSnappy is a Parquet SNAPPY codec whose encoder is s2.EncodeSnappy.
//
// parquet-go's own Snappy codec encodes with s2.EncodeSnappyBetter, which
// spends about half again the CPU for a 10–15% smaller page on rollout
// payloads. Flushes are CPU-bound on compression, so rollwal trades those
// bytes for throughput. The output is a plain Snappy block that every Parquet
// reader decodes (pyarrow and DuckDB are checked by TestPyarrowReadsGeneration).
type fastSnappy struct{}

func (fastSnappy) String() string { return "SNAPPY" }

func (fastSnappy) CompressionCodec() format.CompressionCodec { return format.Snappy }

func (fastSnappy) Encode(dst, src []byte) ([]byte, error) {
	return s2.EncodeSnappy(dst[:cap(dst)], src), nil
}

func (fastSnappy) Decode(dst, src []byte) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return dst[:0], err
	}
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	return s2.Decode(dst[:n], src)
}

var (
	fastSnappyCodec compress.Codec = fastSnappy{}
	zstdCodec       compress.Codec = &zstd.Codec{Level: zstd.SpeedFastest, Concurrency: 1}
)

// codecFor maps an Options.Codec name to its codec.
func codecFor(name string) (compress.Codec, error) {
	switch name {
	case "", CodecSnappy:
		return fastSnappyCodec, nil
	case CodecZstd:
		return zstdCodec, nil
	case CodecNone:
		return &parquet.Uncompressed, nil
	}
	return nil, fmt.Errorf("generation: unknown codec %q (want %q, %q or %q)", name, CodecSnappy, CodecZstd, CodecNone)
}
