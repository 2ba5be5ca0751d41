package generation

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

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
	if parts := min(runtime.GOMAXPROCS(0), len(src)/snappyPartBytes); parts >= 2 {
		return encodeSnappyParts(dst, src, parts), nil
	}
	return encodeSnappyWhole(dst, src), nil
}

// encodeSnappyWhole compresses src as one Snappy block on the calling
// goroutine, into dst's space when it fits.
func encodeSnappyWhole(dst, src []byte) []byte {
	return s2.EncodeSnappy(dst[:cap(dst)], src)
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

// A page compressed on several cores. A Snappy block is its uncompressed
// length followed by literals and back-references, each reference
// relative to where it is decoded, so blocks compressed apart, their
// elements laid end to end under the whole page's length, are one block
// that decodes to the page's bytes laid end to end: the reference encoder
// itself joins 64 KiB fragments so. A flush is bound by the page
// compression of its largest column (the completion text, three quarters
// of a rollout row), which one goroutine writes; compressing each of its
// pages in parts lets the other core share it.

// snappyPartBytes is the least a part of a page holds: parts cost a
// hand-off each and lose the matches that cross them (on two cores a
// default 256 KiB page is two parts: 0.6% more bytes in peers.Flush). A
// variable for tests; snappyParts counts the pages compressed in parts.
var (
	snappyPartBytes = 64 << 10
	snappyParts     atomic.Int64
)

var snappyBufs = sync.Pool{New: func() any { return new([]byte) }}

// encodeSnappyParts compresses src as one Snappy block into dst, in
// parts parts compressed concurrently.
func encodeSnappyParts(dst, src []byte, parts int) []byte {
	snappyParts.Add(1)
	blocks := make([]*[]byte, parts)
	step := (len(src) + parts - 1) / parts
	var wg sync.WaitGroup
	for i := range parts {
		part := src[min(i*step, len(src)):min((i+1)*step, len(src))]
		b := snappyBufs.Get().(*[]byte)
		blocks[i] = b
		encode := func() { *b = s2.EncodeSnappy((*b)[:cap(*b)], part) }
		if i == parts-1 {
			encode() // the last on this goroutine
		} else {
			wg.Go(encode)
		}
	}
	wg.Wait()
	dst = binary.AppendUvarint(dst[:0], uint64(len(src)))
	for _, b := range blocks {
		_, n := binary.Uvarint(*b)
		dst = append(dst, (*b)[n:]...)
		snappyBufs.Put(b)
	}
	return dst
}
