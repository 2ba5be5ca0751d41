package generation

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
)

// TestSnappyPartsAreOneBlock: a page compressed in parts is one Snappy
// block, decoded whole by the reference decoder (parquet-go's own Snappy
// codec decodes with it) and by s2, whatever the parts and the bytes.
func TestSnappyPartsAreOneBlock(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	text := make([]byte, 1<<20+3)
	for i := range text {
		text[i] = "rollout tokens "[rng.IntN(15)] // compressible
	}
	noise := make([]byte, len(text))
	for i := range noise {
		noise[i] = byte(rng.Uint32()) // not compressible: literals only
	}
	stale := bytes.Repeat([]byte{0xAB}, 4096) // a reused page buffer
	for _, src := range []struct {
		name string
		b    []byte
	}{{"text", text}, {"noise", noise}} {
		for _, size := range []int{2, 1000, 64 << 10, 128<<10 + 1, 256 << 10, len(text)} {
			for _, parts := range []int{2, 3, 4, 7} {
				t.Run(fmt.Sprintf("%s/%d/parts=%d", src.name, size, parts), func(t *testing.T) {
					page := src.b[:size]
					block := encodeSnappyParts(stale[:0:len(stale)], page, parts)
					if got, err := snappy.Decode(nil, block); err != nil || !bytes.Equal(got, page) {
						t.Fatalf("reference decoder: %d bytes, err %v; want the %d bytes compressed", len(got), err, size)
					}
					if got, err := s2.Decode(nil, block); err != nil || !bytes.Equal(got, page) {
						t.Fatalf("s2: %d bytes, err %v; want the %d bytes compressed", len(got), err, size)
					}
				})
			}
		}
	}
}

// TestSnappyCodecCompressesLargePagesInParts: the codec splits pages of
// at least two parts when there are cores for them, and the page reads
// back through the codec's own decoder.
func TestSnappyCodecCompressesLargePagesInParts(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	page := bytes.Repeat([]byte("a completion of a rollout, "), 2*snappyPartBytes/27+1)
	for _, tc := range []struct {
		name  string
		page  []byte
		split bool
	}{{"small", page[:snappyPartBytes], false}, {"large", page, true}} {
		before := snappyParts.Load()
		block, err := fastSnappyCodec.Encode(nil, tc.page)
		if err != nil {
			t.Fatal(err)
		}
		if split := snappyParts.Load() > before; split != tc.split {
			t.Errorf("%s page (%d bytes): compressed in parts %v, want %v", tc.name, len(tc.page), split, tc.split)
		}
		got, err := fastSnappyCodec.Decode(nil, block)
		if err != nil || !bytes.Equal(got, tc.page) {
			t.Fatalf("%s page: decoded %d bytes, err %v; want the %d compressed", tc.name, len(got), err, len(tc.page))
		}
	}
}
