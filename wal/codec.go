package wal

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// codec compresses payloads for Append and decompresses them for Replay.
// Encoders and decoders are long-lived: building a zstd coder costs far
// more than a small record. Both are safe for concurrent use, so appenders
// compress in their own goroutines, off the fsync path.
type codec struct {
	kind Compression
	zenc *zstd.Encoder // non-nil only when kind == Zstd

	zdecOnce sync.Once
	zdec     *zstd.Decoder
	zdecErr  error

	scratch sync.Pool // *[]byte compression output buffers
}

func newCodec(kind Compression) (*codec, error) {
	c := &codec{kind: kind}
	if kind != Zstd {
		return c, nil
	}
	// EncodeAll with concurrency n keeps n block encoders; a few suffice
	// and keep memory bounded. The record CRC already covers the payload,
	// so the frame checksum would be redundant.
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(min(runtime.GOMAXPROCS(0), 4)),
		zstd.WithEncoderCRC(false),
		zstd.WithZeroFrames(true),
		zstd.WithLowerEncoderMem(true))
	if err != nil {
		return nil, fmt.Errorf("wal: zstd encoder: %w", err)
	}
	c.zenc = enc
	return c, nil
}

// compress returns the bytes to store for payload and their codec. The
// result is payload itself when compression is off or does not shrink it;
// otherwise it lives in *buf (from getBuf), which the caller returns with
// putBuf once it has copied the bytes.
func (c *codec) compress(payload []byte, buf *[]byte) ([]byte, Compression) {
	if c.kind == None || len(payload) == 0 {
		return payload, None
	}
	var out []byte
	switch c.kind {
	case S2:
		out = s2.Encode((*buf)[:cap(*buf)], payload)
	case Zstd:
		out = c.zenc.EncodeAll(payload, (*buf)[:0])
	}
	*buf = out[:0]
	if len(out) >= len(payload) {
		return payload, None
	}
	return out, c.kind
}

func (c *codec) getBuf() *[]byte {
	if b, ok := c.scratch.Get().(*[]byte); ok {
		return b
	}
	return new([]byte)
}

func (c *codec) putBuf(b *[]byte) { c.scratch.Put(b) }

// decompress returns the payload of a record of header h whose stored
// bytes are stored, using dst's storage when large enough. The decoded
// length must equal h.rawLength, which validate bounded.
func (c *codec) decompress(h recordHeader, stored, dst []byte) ([]byte, error) {
	switch h.codec {
	case None:
		return stored, nil
	case S2:
		return decodeS2(h, stored, dst)
	case Zstd:
		return c.decodeZstd(h, stored, dst)
	}
	return nil, fmt.Errorf("%w: unknown codec %d", errInvalid, h.codec)
}

func decodeS2(h recordHeader, stored, dst []byte) ([]byte, error) {
	n, err := s2.DecodedLen(stored)
	if err != nil {
		return nil, fmt.Errorf("%w: s2: %w", errInvalid, err)
	}
	if n != int(h.rawLength) {
		return nil, fmt.Errorf("%w: s2 decoded length %d, header says %d", errInvalid, n, h.rawLength)
	}
	out, err := s2.Decode(grow(dst, n), stored)
	if err != nil {
		return nil, fmt.Errorf("%w: s2: %w", errInvalid, err)
	}
	return out, nil
}

func (c *codec) decodeZstd(h recordHeader, stored, dst []byte) ([]byte, error) {
	dec, err := c.decoder()
	if err != nil {
		return nil, err
	}
	// The capacity limit stops a hostile frame from decoding past what
	// the header promised.
	n := int(h.rawLength)
	out, err := dec.DecodeAll(stored, grow(dst, n)[:0:n])
	if err != nil {
		return nil, fmt.Errorf("%w: zstd: %w", errInvalid, err)
	}
	if len(out) != n {
		return nil, fmt.Errorf("%w: zstd decoded length %d, header says %d", errInvalid, len(out), n)
	}
	return out, nil
}

// decoder builds the zstd decoder on first use: a WAL that never meets a
// zstd record never pays for it.
func (c *codec) decoder() (*zstd.Decoder, error) {
	c.zdecOnce.Do(func() {
		c.zdec, c.zdecErr = zstd.NewReader(nil,
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(MaxPayloadSize),
			zstd.WithDecodeAllCapLimit(true))
		if c.zdecErr != nil {
			c.zdecErr = fmt.Errorf("wal: zstd decoder: %w", c.zdecErr)
		}
	})
	return c.zdec, c.zdecErr
}

// close releases the coders. The codec must not be used afterwards.
func (c *codec) close() {
	if c.zenc != nil {
		c.zenc.Close()
	}
	c.zdecOnce.Do(func() {}) // a later decoder() must not build one
	if c.zdec != nil {
		c.zdec.Close()
	}
}

// grow returns b resized to n bytes, reallocating only when too small.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
