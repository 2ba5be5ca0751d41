package shardmeta_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/shardmeta"
)

// The size bounds docs/format/etcd.md states, in encoded bytes. Every
// number of a value is taken at its most digits (uint64 20, int64 19,
// uint32 10), so the bounds hold for any counter a shard can reach. An
// entry's bound includes the comma that separates it from the next.
const (
	// etcdMaxRequestBytes is etcd's default --max-request-bytes (embed.DefaultMaxRequestBytes).
	etcdMaxRequestBytes = 1.5 * 1024 * 1024

	// Manifest: fixed part (with producer_state and one epoch record),
	// per flushed generation, per source (a 256-byte printable ASCII name;
	// a name of bytes JSON escapes as \u00XX costs six times as much), per
	// further epoch record.
	docManifestFixed      = 512
	docGenerationEntry    = 251
	docSourceEntryASCII   = 279
	docSourceEntryEscaped = 1559
	docEpochRecord        = 154
	// At the engine's default limits (1000 generations, 1024 sources with
	// ASCII names) and at its cap of 5000 generations with 1024 sources.
	docManifestDefault = 537_208
	docManifestCap     = 1_541_208
	// At 1000 generations and the writer configuration's cap of 4096
	// sources (cmd/writer/limits.go; package main, so stated here).
	writerMaxSources         = 4096
	docManifestWriterSources = 1_394_296
	// The most epoch records a default-limit manifest holds below
	// etcdMaxRequestBytes (the doc: it passes at one more). Claims are not
	// bounded.
	docEpochsToLimit = 6726

	// Owner value of the writer CLI: host name ≤ 64 bytes, pid ≤ 7 digits,
	// the ingest listener's address.
	docOwner = 203

	// Base state: fixed part with one shard's merge state, per file
	// (shard "default" and a 128-byte shard name), and the most files it
	// holds below etcdMaxRequestBytes (the doc: it passes at one more).
	// Files are not bounded.
	docBaseFixed              = 167
	docBaseFileDefault        = 246
	docBaseFileLongShard      = 488
	docBaseFilesToLimit       = 6393
	docBaseFilesToLimitLong   = 3222
	maxUnmergedGenerationsCap = 5000 // engine/session.go maxUnmergedGenerationsCap; checked below
)

// big is a 20-digit number: every uint64 counter at its widest.
const big = uint64(1e19)

// manifestAt builds a valid manifest with gens flushed generations, sources
// sources named by name, epochs epoch records and a producer-state
// reference, every number at its most digits.
func manifestAt(t testing.TB, gens, sources, epochs int, name func(int) string) *shardmeta.Manifest {
	t.Helper()
	m := shardmeta.NewManifest()
	m.WriterEpoch = big + uint64(epochs)
	m.CurrentGeneration = big + uint64(max(gens, epochs)) + 1
	for i := range gens {
		g := big + uint64(i)
		m.Flushed = append(m.Flushed, shardmeta.Generation{
			Number: g, File: generation.Name(g, m.WriterEpoch, "9f3ac01b"),
			Rows: math.MaxInt64, Bytes: math.MaxInt64,
			SeqFirst: big + 2*uint64(i), SeqLast: big + 2*uint64(i) + 1, Epoch: m.WriterEpoch,
		})
	}
	if gens > 0 {
		m.ReplayCursor = m.Flushed[gens-1].SeqLast
	} else {
		m.ReplayCursor = big
	}
	for i := range epochs {
		start := big + uint64(i)
		m.Epochs = append(m.Epochs, shardmeta.EpochRecord{Epoch: big + uint64(i) + 1,
			StartGeneration: start, StartPosition: big + uint64(i), ReplayEndGeneration: start})
	}
	for i := range sources {
		m.SourceOffsets[name(i)] = engine.MaxSourceOffset
	}
	// The engine's name: producers/p<gen %020d>-e<epoch %020d>-<unix ns>.json.
	m.ProducerState = &shardmeta.ProducerStateRef{
		File: fmt.Sprintf("producers/p%020d-e%020d-%d.json", m.CurrentGeneration, m.WriterEpoch, int64(math.MaxInt64)),
		Size: math.MaxInt64, CRC32C: math.MaxUint32, Producers: math.MaxInt64,
	}
	return m
}

// asciiName is a distinct printable name of engine.MaxSourceBytes bytes.
func asciiName(i int) string {
	p := fmt.Sprintf("kafka/rollouts/%06d/", i)
	return p + strings.Repeat("x", engine.MaxSourceBytes-len(p))
}

// escapedSymbols are bytes JSON encodes as \u00XX: six bytes each.
var escapedSymbols = []byte("\x00\x01\x02\x03\x04\x05\x06\x07\x0b\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f<>&")

// escapedName is a distinct name of engine.MaxSourceBytes bytes that JSON
// escapes byte by byte: i in base 30 over escapedSymbols[1:], padded with
// escapedSymbols[0].
func escapedName(i int) string {
	digits := escapedSymbols[1:]
	b := make([]byte, engine.MaxSourceBytes)
	for j := range b {
		b[j] = escapedSymbols[0]
	}
	for j := 0; i > 0 || j == 0; j, i = j+1, i/len(digits) {
		b[j] = digits[i%len(digits)]
	}
	return string(b)
}

func encodedLen(t testing.TB, m *shardmeta.Manifest) int {
	t.Helper()
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return len(data)
}

// TestEtcdValueBounds proves the bounds docs/format/etcd.md states for the
// etcd values rollwal writes: it builds each value at the limits the engine
// enforces, encodes it as the store does and fails when it is larger than
// the document says. Where the document says a value is not bounded, it
// checks the count at which the value passes etcd's request limit.
func TestEtcdValueBounds(t *testing.T) {
	t.Run("limits", testEngineLimits)
	t.Run("manifest", testManifestBounds)
	t.Run("manifest-unbounded", testManifestUnbounded)
	t.Run("owner", testOwnerBound)
	t.Run("base-state-unbounded", testBaseStateUnbounded)
}

// testEngineLimits checks that the limits the bounds rest on are the
// engine's.
func testEngineLimits(t *testing.T) {
	if engine.DefaultMaxUnmergedGenerations != 1000 || engine.DefaultMaxSources != 1024 ||
		engine.MaxSourceBytes != 256 || engine.MaxSourceOffset != 1<<62-1 {
		t.Fatalf("engine limits changed (generations %d, sources %d, name %d bytes, offset %d): update docs/format/etcd.md and this test",
			engine.DefaultMaxUnmergedGenerations, engine.DefaultMaxSources, engine.MaxSourceBytes, int64(engine.MaxSourceOffset))
	}
	for n, ok := range map[int]bool{maxUnmergedGenerationsCap: true, maxUnmergedGenerationsCap + 1: false} {
		o := engine.Options{MaxUnmergedGenerations: n}
		o.EnsureDefaults()
		err := o.Validate()
		if refused := err != nil && strings.Contains(err.Error(), "max unmerged generations"); refused == ok {
			t.Errorf("engine.Options.Validate with MaxUnmergedGenerations %d: %v; the cap is no longer %d: update docs/format/etcd.md",
				n, err, maxUnmergedGenerationsCap)
		}
	}
	if err := engine.ValidateSource(engine.Source{Name: escapedName(0), Offset: engine.MaxSourceOffset}); err != nil {
		t.Errorf("engine now refuses source names JSON escapes (%v): docs/format/etcd.md says it accepts them; update it", err)
	}
}

func testManifestBounds(t *testing.T) {
	fixed := encodedLen(t, manifestAt(t, 0, 0, 1, asciiName))
	gen := encodedLen(t, manifestAt(t, 2, 0, 1, asciiName)) - encodedLen(t, manifestAt(t, 1, 0, 1, asciiName))
	src := encodedLen(t, manifestAt(t, 0, 2, 1, asciiName)) - encodedLen(t, manifestAt(t, 0, 1, 1, asciiName))
	esc := encodedLen(t, manifestAt(t, 0, 2, 1, escapedName)) - encodedLen(t, manifestAt(t, 0, 1, 1, escapedName))
	epoch := encodedLen(t, manifestAt(t, 0, 0, 3, asciiName)) - encodedLen(t, manifestAt(t, 0, 0, 2, asciiName))
	def := encodedLen(t, manifestAt(t, engine.DefaultMaxUnmergedGenerations, engine.DefaultMaxSources, 1, asciiName))
	capped := encodedLen(t, manifestAt(t, maxUnmergedGenerationsCap, engine.DefaultMaxSources, 1, asciiName))
	wide := encodedLen(t, manifestAt(t, engine.DefaultMaxUnmergedGenerations, writerMaxSources, 1, asciiName))
	t.Logf("manifest: fixed %d, generation %d, source %d (escaped %d), epoch record %d; default limits %d (%.2f MiB), generation cap %d (%.2f MiB), 4096 sources %d (%.2f MiB)",
		fixed, gen, src, esc, epoch, def, mib(def), capped, mib(capped), wide, mib(wide))
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"fixed part", fixed, docManifestFixed},
		{"flushed generation entry", gen, docGenerationEntry},
		{"source entry (ASCII name)", src, docSourceEntryASCII},
		{"source entry (escaped name)", esc, docSourceEntryEscaped},
		{"epoch record", epoch, docEpochRecord},
		{"manifest at the default limits", def, docManifestDefault},
		{"manifest at the generation cap", capped, docManifestCap},
		{"manifest with 4096 sources", wide, docManifestWriterSources},
	} {
		if c.got > c.want {
			t.Errorf("%s encodes to %d bytes, above the %d docs/format/etcd.md states", c.what, c.got, c.want)
		}
	}
	if def >= etcdMaxRequestBytes || capped >= etcdMaxRequestBytes || wide >= etcdMaxRequestBytes {
		t.Errorf("manifest at the limits is %d / %d / %d bytes, not below etcd's request limit %d", def, capped, wide, int(etcdMaxRequestBytes))
	}
	if f := docManifestFixed + engine.DefaultMaxUnmergedGenerations*docGenerationEntry + engine.DefaultMaxSources*docSourceEntryASCII; f > docManifestDefault {
		t.Errorf("the doc's default-limit bound %d is below its own formula %d", docManifestDefault, f)
	}
}

// testManifestUnbounded checks where the manifest passes the request limit:
// epoch records (one per claim, never removed) and escaped source names.
func testManifestUnbounded(t *testing.T) {
	at := func(epochs int) int {
		return encodedLen(t, manifestAt(t, engine.DefaultMaxUnmergedGenerations, engine.DefaultMaxSources, epochs, asciiName))
	}
	if n := at(docEpochsToLimit); n >= etcdMaxRequestBytes {
		t.Errorf("with %d epoch records the default-limit manifest is %d bytes, already past %d", docEpochsToLimit, n, int(etcdMaxRequestBytes))
	}
	if n := at(docEpochsToLimit + 1); n < etcdMaxRequestBytes {
		t.Errorf("with %d epoch records the default-limit manifest is %d bytes, still below %d: update docEpochsToLimit", docEpochsToLimit+1, n, int(etcdMaxRequestBytes))
	}
	both := encodedLen(t, manifestAt(t, maxUnmergedGenerationsCap, writerMaxSources, 1, asciiName))
	t.Logf("5000 generations and 4096 sources: %d bytes (%.2f MiB)", both, mib(both))
	if both < etcdMaxRequestBytes {
		t.Errorf("5000 generations and 4096 sources encode to %d bytes, below the request limit: docs/format/etcd.md says they pass it", both)
	}
	esc := encodedLen(t, manifestAt(t, 0, engine.DefaultMaxSources, 1, escapedName))
	t.Logf("1024 escaped source names alone: %d bytes (%.2f MiB)", esc, mib(esc))
	if esc < etcdMaxRequestBytes {
		t.Errorf("1024 escaped source names encode to %d bytes, below the request limit: docs/format/etcd.md says they pass it", esc)
	}
}

func testOwnerBound(t *testing.T) {
	o := shardmeta.Owner{
		Writer:  strings.Repeat("h", 64) + "-4194304", // HOST_NAME_MAX 64, pid_max 2^22
		Epoch:   math.MaxUint64,
		Address: "http://[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255%" + strings.Repeat("i", 15) + "]:65535",
	}
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("owner: %d bytes", len(data))
	if len(data) > docOwner {
		t.Errorf("owner value encodes to %d bytes, above the %d docs/format/etcd.md states", len(data), docOwner)
	}
}

func baseState(t testing.TB, shard string, files int) int {
	t.Helper()
	b := shardmeta.NewBaseState()
	b.Version = math.MaxUint64
	crc := uint32(math.MaxUint32)
	for i := range files {
		g := big + uint64(i)
		b.Files = append(b.Files, shardmeta.BaseFile{
			Path: "data/" + shard + "/" + generation.Name(g, big, "9f3ac01b"), Rows: math.MaxInt64, Bytes: math.MaxInt64,
			Shard: shard, SeqFirst: big + 2*uint64(i), SeqLast: big + 2*uint64(i) + 1, IndexCRC: &crc,
		})
	}
	epoch, cutoff := uint64(math.MaxUint64), uint64(math.MaxUint64)
	b.Shards[shard] = shardmeta.ShardMergeState{Watermark: math.MaxUint64, ObservedEpoch: &epoch, Cutoff: &cutoff}
	data, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return len(data)
}

// testBaseStateUnbounded checks the file counts at which base/state, one
// file entry per merged generation and never shrinking, passes the limit.
func testBaseStateUnbounded(t *testing.T) {
	long := strings.Repeat("s", shardmeta.MaxNameLen)
	fixed := baseState(t, "default", 0)
	perFile := baseState(t, "default", 2) - baseState(t, "default", 1)
	perLong := baseState(t, long, 2) - baseState(t, long, 1)
	t.Logf("base state: fixed %d, file %d (128-byte shard name: %d)", fixed, perFile, perLong)
	if fixed > docBaseFixed || perFile > docBaseFileDefault || perLong > docBaseFileLongShard {
		t.Errorf("base state: fixed %d, file %d, long-shard file %d bytes; docs/format/etcd.md states %d, %d, %d",
			fixed, perFile, perLong, docBaseFixed, docBaseFileDefault, docBaseFileLongShard)
	}
	for _, c := range []struct {
		shard string
		n     int
	}{{"default", docBaseFilesToLimit}, {long, docBaseFilesToLimitLong}} {
		if got := baseState(t, c.shard, c.n); got >= etcdMaxRequestBytes {
			t.Errorf("base state of %d files (shard of %d bytes) is %d bytes, already past %d", c.n, len(c.shard), got, int(etcdMaxRequestBytes))
		}
		if got := baseState(t, c.shard, c.n+1); got < etcdMaxRequestBytes {
			t.Errorf("base state of %d files (shard of %d bytes) is %d bytes, still below %d: update docs/format/etcd.md", c.n+1, len(c.shard), got, int(etcdMaxRequestBytes))
		}
	}
}

func mib(n int) float64 { return float64(n) / (1 << 20) }
