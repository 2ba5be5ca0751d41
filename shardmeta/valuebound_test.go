package shardmeta_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/shardmeta"
)

// The size bounds docs/format/etcd.md states, in encoded bytes. Every
// number of a value is taken at its most digits (uint64 20, int64 19,
// uint32 10), so the bounds hold for any counter a shard can reach. The
// manifest's per-entry sizes are shardmeta's constants (bound.go); the
// totals below are what the document's tables say, checked against
// shardmeta.ManifestBound and the real encoding.
const (
	// etcdMaxRequestBytes is etcd's default --max-request-bytes (embed.DefaultMaxRequestBytes).
	etcdMaxRequestBytes = 1.5 * 1024 * 1024

	// The manifest's worst case at the engine's default limits (1000
	// generations, 1024 sources), and the largest limit of each with the
	// other at its default that engine.Options.Validate accepts.
	docManifestDefault     = 955_816
	docMostGenerations     = 1229
	docMostSources         = 1197
	docManifestGensCap     = 1_048_561
	docManifestSourcesCap  = 1_048_371
	docManifestWriterLimit = 4_219_336 // 5000 generations, 4096 sources: refused
	writerMaxSources       = 4096      // cmd/writer/limits.go (package main, so stated here)
	writerMaxGenerations   = 5000

	// Owner value: writer id and address at their limits, of characters JSON
	// escapes in six bytes; and as the writer CLI writes it (host name ≤ 64
	// bytes, pid ≤ 7 digits, the ingest listener's address).
	docOwner    = 3127
	docOwnerCLI = 203

	// Base state: with one shard's merge state; per further shard of a
	// 128-byte name; the shard count that stays below the request limit.
	docBaseFixed         = 156
	docBaseShardLong     = 234
	docBaseShardsToLimit = 6000
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

// escapedName is a distinct name of engine.MaxSourceBytes bytes that JSON
// encodes in two bytes each (\" and \\): i in base 2 over `"\`.
func escapedName(i int) string {
	b := []byte(strings.Repeat(`"`, engine.MaxSourceBytes))
	for j := 0; i > 0; j, i = j+1, i/2 {
		if i%2 == 1 {
			b[j] = '\\'
		}
	}
	return string(b)
}

// separatorName is a distinct name of U+2028 and U+2029 (three bytes each,
// which JSON always encodes in six) padded with quotes to
// engine.MaxSourceBytes bytes.
func separatorName(i int) string {
	var b strings.Builder
	for j := 0; j < engine.MaxSourceBytes/3; j, i = j+1, i/2 {
		b.WriteRune(rune(0x2028 + i%2))
	}
	return b.String() + strings.Repeat(`"`, engine.MaxSourceBytes-b.Len())
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
// the document says, or than the constants engine.Options.Validate computes
// its bound from. Where the document says a value is not bounded, it checks
// the count at which the value passes etcd's request limit.
func TestEtcdValueBounds(t *testing.T) {
	t.Run("limits", testEngineLimits)
	t.Run("manifest-entries", testManifestEntries)
	t.Run("manifest", testManifestBounds)
	t.Run("owner", testOwnerBound)
	t.Run("base-state", testBaseStateBounded)
}

// testEngineLimits checks that the limits the bounds rest on are the
// engine's, and that the source names the bounds assume are the only ones
// it takes.
func testEngineLimits(t *testing.T) {
	if engine.DefaultMaxUnmergedGenerations != 1000 || engine.DefaultMaxSources != 1024 ||
		engine.MaxSourceBytes != 256 || engine.MaxSourceOffset != 1<<62-1 || engine.MaxManifestBytes != 1<<20 ||
		shardmeta.RecentEpochs != 16 || engine.MaxWriterIDBytes != 256 || engine.MaxAddressBytes != 256 {
		t.Fatalf("engine limits changed (generations %d, sources %d, name %d bytes, offset %d, manifest %d bytes, recent epochs %d, writer id %d, address %d): update docs/format/etcd.md and this test",
			engine.DefaultMaxUnmergedGenerations, engine.DefaultMaxSources, engine.MaxSourceBytes, int64(engine.MaxSourceOffset),
			engine.MaxManifestBytes, shardmeta.RecentEpochs, engine.MaxWriterIDBytes, engine.MaxAddressBytes)
	}
	for _, name := range []string{escapedName(1), separatorName(1), "<a&b>"} {
		if err := engine.ValidateSource(engine.Source{Name: name, Offset: engine.MaxSourceOffset}); err != nil {
			t.Errorf("engine refuses source %q (%v): docs/format/etcd.md says it takes names JSON escapes in two bytes a byte", name, err)
		}
	}
	for _, name := range []string{"a\xff", "a\x01", "a\x7f", "a\u0085"} {
		if engine.ValidateSource(engine.Source{Name: name}) == nil {
			t.Errorf("engine takes source %q: docs/format/etcd.md says it refuses invalid UTF-8 and control characters, which JSON encodes in six bytes", name)
		}
	}
	validate := func(gens, sources int) error {
		o := engine.Options{Etcd: new(clientv3.Client), MaxUnmergedGenerations: gens, MaxSources: sources}
		o.EnsureDefaults()
		return o.Validate()
	}
	for _, c := range []struct {
		gens, sources int
		ok            bool
	}{
		{engine.DefaultMaxUnmergedGenerations, engine.DefaultMaxSources, true},
		{docMostGenerations, engine.DefaultMaxSources, true},
		{docMostGenerations + 1, engine.DefaultMaxSources, false},
		{engine.DefaultMaxUnmergedGenerations, docMostSources, true},
		{engine.DefaultMaxUnmergedGenerations, docMostSources + 1, false},
		{writerMaxGenerations, writerMaxSources, false},
	} {
		err := validate(c.gens, c.sources)
		refused := err != nil && strings.Contains(err.Error(), "allow a shard manifest of")
		if refused == c.ok {
			t.Errorf("engine.Options.Validate with %d generations and %d sources: %v; docs/format/etcd.md says it %s them",
				c.gens, c.sources, err, map[bool]string{true: "accepts", false: "refuses"}[c.ok])
		}
	}
}

// testManifestEntries measures each part of the manifest's encoding and
// checks it against shardmeta's constants: never above (the bound would
// not hold) and not below (the constant and the doc would drift).
func testManifestEntries(t *testing.T) {
	fixed := encodedLen(t, manifestAt(t, 0, 0, 1, asciiName))
	gen := encodedLen(t, manifestAt(t, 2, 0, 1, asciiName)) - encodedLen(t, manifestAt(t, 1, 0, 1, asciiName))
	epoch := encodedLen(t, manifestAt(t, 0, 0, 3, asciiName)) - encodedLen(t, manifestAt(t, 0, 0, 2, asciiName))
	src := func(name func(int) string) int {
		return encodedLen(t, manifestAt(t, 0, 3, 1, name)) - encodedLen(t, manifestAt(t, 0, 2, 1, name))
	}
	ascii, esc, sep := src(asciiName), src(escapedName), src(separatorName)
	t.Logf("manifest: fixed %d, generation %d, epoch record %d, source %d (ASCII name), %d (quotes and backslashes), %d (U+2028/9)",
		fixed, gen, epoch, ascii, esc, sep)
	worst := shardmeta.SourceEntryBytes + 2*engine.MaxSourceBytes
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"fixed part", fixed, shardmeta.ManifestFixedBytes},
		{"flushed generation entry", gen, shardmeta.GenerationEntryBytes},
		{"epoch record", epoch, shardmeta.EpochRecordBytes},
		{"source entry (ASCII name)", ascii, shardmeta.SourceEntryBytes + engine.MaxSourceBytes},
		{"source entry (name of quotes and backslashes)", esc, worst},
		{"source entry (name of line and paragraph separators)", sep, worst},
	} {
		if c.got != c.want {
			t.Errorf("%s encodes to %d bytes; shardmeta's constants and docs/format/etcd.md say %d", c.what, c.got, c.want)
		}
	}
}

// testManifestBounds builds manifests at the limits, with the most epoch
// records a claim keeps and the costliest source names, and checks their
// encoding against shardmeta.ManifestBound, the document's totals and the
// ceiling.
func testManifestBounds(t *testing.T) {
	at := func(gens, sources int) (encoded int, bound int64) {
		m := manifestAt(t, gens, sources, shardmeta.MaxEpochRecords(gens), escapedName)
		return encodedLen(t, m), shardmeta.ManifestBound(gens, sources, engine.MaxSourceBytes)
	}
	for _, c := range []struct {
		what          string
		gens, sources int
		doc           int
	}{
		{"default limits", engine.DefaultMaxUnmergedGenerations, engine.DefaultMaxSources, docManifestDefault},
		{"most generations", docMostGenerations, engine.DefaultMaxSources, docManifestGensCap},
		{"most sources", engine.DefaultMaxUnmergedGenerations, docMostSources, docManifestSourcesCap},
		{"writer configuration's caps", writerMaxGenerations, writerMaxSources, docManifestWriterLimit},
	} {
		got, bound := at(c.gens, c.sources)
		t.Logf("%s (%d generations, %d sources): %d bytes (%.2f MiB), bound %d", c.what, c.gens, c.sources, got, mib(got), bound)
		if int64(got) > bound {
			t.Errorf("%s: the manifest encodes to %d bytes, above shardmeta.ManifestBound %d", c.what, got, bound)
		}
		if bound != int64(c.doc) {
			t.Errorf("%s: shardmeta.ManifestBound is %d, docs/format/etcd.md says %d", c.what, bound, c.doc)
		}
	}
	// The doc's formula: 2,976 + 405 × generations + 535 × sources.
	for _, c := range [][2]int{{0, 0}, {1, 1}, {1000, 1024}, {37, 5}} {
		if got, want := shardmeta.ManifestBound(c[0], c[1], engine.MaxSourceBytes), int64(2976+405*c[0]+535*c[1]); got != want {
			t.Errorf("ManifestBound(%d generations, %d sources) = %d; docs/format/etcd.md's formula gives %d", c[0], c[1], got, want)
		}
	}
	if docManifestDefault > engine.MaxManifestBytes || docManifestGensCap > engine.MaxManifestBytes ||
		docManifestSourcesCap > engine.MaxManifestBytes || docManifestWriterLimit <= engine.MaxManifestBytes {
		t.Errorf("the doc's totals are on the wrong side of engine.MaxManifestBytes %d", engine.MaxManifestBytes)
	}
	if headroom := etcdMaxRequestBytes - engine.MaxManifestBytes; headroom < 256<<10 {
		t.Errorf("only %d bytes between the manifest ceiling and etcd's request limit", int(headroom))
	}
}

func testOwnerBound(t *testing.T) {
	size := func(o shardmeta.Owner) int {
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return len(data)
	}
	worst := shardmeta.Owner{ // '<' encodes in six bytes, the most of any printable byte
		Writer: strings.Repeat("<", engine.MaxWriterIDBytes), Epoch: math.MaxUint64, Address: strings.Repeat("<", engine.MaxAddressBytes),
	}
	o := engine.Options{Etcd: new(clientv3.Client), WriterID: worst.Writer, Address: worst.Address}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Errorf("engine refuses the worst-case owner fields: %v", err)
	}
	o.WriterID += "<"
	if o.Validate() == nil {
		t.Errorf("engine takes a writer id of %d bytes: docs/format/etcd.md says at most %d", len(o.WriterID), engine.MaxWriterIDBytes)
	}
	cli := shardmeta.Owner{
		Writer:  strings.Repeat("h", 64) + "-4194304", // HOST_NAME_MAX 64, pid_max 2^22
		Epoch:   math.MaxUint64,
		Address: "http://[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255%" + strings.Repeat("i", 15) + "]:65535",
	}
	t.Logf("owner: %d bytes at the engine's limits, %d as the writer CLI writes it", size(worst), size(cli))
	if got := size(worst); got != docOwner {
		t.Errorf("owner value at the limits encodes to %d bytes; docs/format/etcd.md states %d", got, docOwner)
	}
	if got := size(cli); got > docOwnerCLI {
		t.Errorf("owner value of the writer CLI encodes to %d bytes, above the %d docs/format/etcd.md states", got, docOwnerCLI)
	}
}

// baseState encodes the base state of shards (every counter at its
// widest): the state holds no files since the base is an Iceberg table.
func baseState(t testing.TB, shards []string) int {
	t.Helper()
	b := shardmeta.NewBaseState()
	b.Version = math.MaxUint64
	for _, shard := range shards {
		epoch, cutoff := uint64(math.MaxUint64), uint64(math.MaxUint64)
		b.Shards[shard] = shardmeta.ShardMergeState{Watermark: math.MaxUint64, ObservedEpoch: &epoch, Cutoff: &cutoff}
	}
	data, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return len(data)
}

// testBaseStateBounded checks the base state's size: fixed with one shard,
// then per further shard (128-byte names), and the shard count that fits.
func testBaseStateBounded(t *testing.T) {
	long := func(i int) string { return fmt.Sprintf("%0*d", shardmeta.MaxNameLen, i) }
	fixed := baseState(t, []string{"default"})
	perShard := baseState(t, []string{long(0), long(1)}) - baseState(t, []string{long(0)})
	t.Logf("base state: %d bytes with one shard, %d per further 128-byte shard", fixed, perShard)
	if fixed > docBaseFixed || perShard > docBaseShardLong {
		t.Errorf("base state: %d bytes fixed, %d per shard; docs/format/etcd.md states %d and %d", fixed, perShard, docBaseFixed, docBaseShardLong)
	}
	shards := make([]string, docBaseShardsToLimit)
	for i := range shards {
		shards[i] = long(i)
	}
	if got := baseState(t, shards); got >= etcdMaxRequestBytes {
		t.Errorf("base state of %d shards of 128 bytes is %d bytes, past %d", len(shards), got, int(etcdMaxRequestBytes))
	}
}

func mib(n int) float64 { return float64(n) / (1 << 20) }
