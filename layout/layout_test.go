package layout_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/shardmeta"
)

var update = flag.Bool("update", false, "rewrite testdata/tree.golden")

// Sample names, shaped as the formats make them.
const (
	sampleData     = "/data"
	sampleTable    = "rollouts"
	sampleShard    = "s0"
	sampleGen      = "g00000000000000000042-e00000000000000000007-9f3ac01b.parquet"
	sampleBaseFile = "g00000000000000000042-e00000000000000000007-9f3ac01b-c0badf00d.parquet"
	sampleProducer = "p00000000000000000042-e00000000000000000007-1764547200000000000.json"
	sampleReaders  = "00000000000000000003.json"
	sampleMetadata = "00003-1b4e28ba-2fa1-11d2-883f-0016d3cca427.metadata.json"
)

// entry is one path or key the layout makes, by the call that makes it.
type entry struct{ call, got string }

// tree is every path and key for the sample table and shard, in the
// order of the package doc.
func tree(data, table, shard, gen, baseFile, producer, readers, metadata string) []entry {
	base := layout.BaseDir(data, table)
	return []entry{
		{"LockFile(data)", layout.LockFile(data)},
		{"EtcdDir(data)", layout.EtcdDir(data)},
		{"EtcdEndpointFile(data)", layout.EtcdEndpointFile(data)},
		{"TableDir(data, table)", layout.TableDir(data, table)},
		{"ShardDir(data, table, shard)", layout.ShardDir(data, table, shard)},
		{"WALDir(data, table, shard)", layout.WALDir(data, table, shard)},
		{"GenDir(data, table, shard)", layout.GenDir(data, table, shard)},
		{"ProducersDir(data, table, shard)", layout.ProducersDir(data, table, shard)},
		{"BaseDir(data, table)", base},
		{"BaseDataDir(base)", layout.BaseDataDir(base)},
		{"BaseShardDataDir(base, shard)", layout.BaseShardDataDir(base, shard)},
		{"MetadataDir(base)", layout.MetadataDir(base)},
		{"ReaderManifestDir(base)", layout.ReaderManifestDir(base)},

		{"BaseFileRel(shard, file)", layout.BaseFileRel(shard, baseFile)},
		{"ProducerStateRel(file)", layout.ProducerStateRel(producer)},

		{"WALPrefix(table, shard)", layout.WALPrefix(table, shard)},
		{"GenerationPrefix(table, shard)", layout.GenerationPrefix(table, shard)},
		{"GenerationKey(table, shard, file)", layout.GenerationKey(table, shard, gen)},
		{"ProducersPrefix(table, shard)", layout.ProducersPrefix(table, shard)},
		{"ProducerKey(table, shard, file)", layout.ProducerKey(table, shard, producer)},
		{"BaseRoot(table)", layout.BaseRoot(table)},
		{"BasePrefix(table)", layout.BasePrefix(table)},
		{"BaseKey(table, BaseFileRel(shard, file))", layout.BaseKey(table, layout.BaseFileRel(shard, baseFile))},
		{"BaseKey(table, MetadataRel+file)", layout.BaseKey(table, layout.MetadataRel+metadata)},
		{"ReaderManifestPrefix(table)", layout.ReaderManifestPrefix(table)},
		{"ReaderManifestKey(table, file)", layout.ReaderManifestKey(table, readers)},
	}
}

// TestTreeGolden pins every path and key: a change to the layout is a diff
// of testdata/tree.golden, which existing data directories and buckets
// would not survive without a migration. go test ./layout -update
// rewrites it.
func TestTreeGolden(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "# data=%s table=%s shard=%s; paths with slashes on every OS\n", sampleData, sampleTable, sampleShard)
	for _, e := range tree(sampleData, sampleTable, sampleShard, sampleGen, sampleBaseFile, sampleProducer, sampleReaders, sampleMetadata) {
		fmt.Fprintf(&b, "%-42s %s\n", e.call, filepath.ToSlash(e.got))
	}
	got := b.String()
	const golden = "testdata/tree.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the layout changed (existing data directories and buckets would break); got\n%s\nwant (%s)\n%s", got, golden, want)
	}
}

// TestKeysMirrorDataDir checks the rule the package doc states: an object
// key is the file's path under the data directory, with slashes.
func TestKeysMirrorDataDir(t *testing.T) {
	data := filepath.FromSlash("/data")
	rel := func(p string) string {
		r, err := filepath.Rel(data, p)
		if err != nil {
			t.Fatal(err)
		}
		return filepath.ToSlash(r)
	}
	base := layout.BaseDir(data, "t")
	for _, c := range []struct{ key, local string }{
		{layout.WALPrefix("t", "s"), rel(layout.WALDir(data, "t", "s")) + "/"},
		{layout.GenerationPrefix("t", "s"), rel(layout.GenDir(data, "t", "s")) + "/"},
		{layout.GenerationKey("t", "s", "f"), rel(filepath.Join(layout.GenDir(data, "t", "s"), "f"))},
		{layout.ProducersPrefix("t", "s"), rel(layout.ProducersDir(data, "t", "s")) + "/"},
		{layout.ProducerKey("t", "s", "f"), rel(filepath.Join(layout.ProducersDir(data, "t", "s"), "f"))},
		{layout.ProducerKey("t", "s", "f"), rel(filepath.Join(layout.ShardDir(data, "t", "s"), filepath.FromSlash(layout.ProducerStateRel("f"))))},
		{layout.BaseRoot("t"), rel(base)},
		{layout.BaseKey("t", layout.BaseFileRel("s", "f")), rel(filepath.Join(layout.BaseShardDataDir(base, "s"), "f"))},
		{layout.BaseKey("t", layout.BaseFileRel("s", "f")), rel(filepath.Join(base, filepath.FromSlash(layout.BaseFileRel("s", "f"))))},
		{layout.BaseKey("t", layout.MetadataRel+"f"), rel(filepath.Join(layout.MetadataDir(base), "f"))},
		{layout.ReaderManifestKey("t", "f"), rel(filepath.Join(layout.ReaderManifestDir(base), "f"))},
		{layout.BasePrefix("t") + layout.BaseDataRel, rel(layout.BaseDataDir(base)) + "/"},
	} {
		if c.key != c.local {
			t.Errorf("key %q, but the file is at %q under the data directory", c.key, c.local)
		}
	}
}

// TestEmptyFileIsTheDirectory pins what callers rely on: the shard keys
// are path.Join'ed, so an empty file name gives the directory's key, and
// the Prefix functions are that key and a slash.
func TestEmptyFileIsTheDirectory(t *testing.T) {
	if got, want := layout.GenerationKey("t", "s", "")+"/", layout.GenerationPrefix("t", "s"); got != want {
		t.Errorf("GenerationKey(t, s, \"\")+\"/\" = %q, GenerationPrefix %q", got, want)
	}
	if got, want := layout.ProducerKey("t", "s", "")+"/", layout.ProducersPrefix("t", "s"); got != want {
		t.Errorf("ProducerKey(t, s, \"\")+\"/\" = %q, ProducersPrefix %q", got, want)
	}
}

// Valid names, as the package doc states them: table and shard names as
// shardmeta validates them (1 to 128 bytes of [A-Za-z0-9._-], neither "."
// nor ".."), file names one such element. The edge cases are the ones a
// path function could mistake for something else.
const nameBytes = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

var edgeNames = []string{"a", "-", "_", "...", ".a", "a.", "..a", "a..", ".-", "._.", "LOCK", "base", "shards",
	"gen", "wal", "data", "metadata", "_manifest", "producers", "etcd", "etcd.endpoint", "Etcd", "lock", "etcd.endpoint.tmp", strings.Repeat(".", 128),
	strings.Repeat("z", shardmeta.MaxNameLen)}

// validNames returns the edge cases and n random names, each one that
// shardmeta accepts as a table and as a shard name.
func validNames(t *testing.T, n int) []string {
	r := rand.New(rand.NewPCG(17, 3))
	names := append([]string(nil), edgeNames...)
	for len(names) < len(edgeNames)+n {
		b := make([]byte, 1+r.IntN(shardmeta.MaxNameLen))
		for i := range b {
			// Mostly dots, so that "..", "..." and the like come up.
			if r.IntN(3) == 0 {
				b[i] = '.'
			} else {
				b[i] = nameBytes[r.IntN(len(nameBytes))]
			}
		}
		if name := string(b); name != "." && name != ".." {
			names = append(names, name)
		}
	}
	for _, name := range names {
		err := (shardmeta.Keys{Prefix: "rollwal", Table: name}).Validate()
		switch {
		case layout.OwnEntry(name) && err == nil:
			t.Fatalf("shardmeta takes table %q, whose directory would be one of the data directory's own entries", name)
		case !layout.OwnEntry(name) && err != nil:
			t.Fatalf("shardmeta refuses table %q: %v", name, err)
		}
		if err := shardmeta.ValidateShard(name); err != nil {
			t.Fatalf("shardmeta refuses shard %q: %v", name, err)
		}
	}
	return names
}

// checkKey fails unless key is a relative slash path of non-empty elements
// other than "." and "..", with a trailing slash only when prefix is set.
func checkKey(t *testing.T, call, key string, prefix bool) {
	t.Helper()
	body, trailing := strings.CutSuffix(key, "/")
	switch {
	case key == "" || strings.HasPrefix(key, "/"):
		t.Errorf("%s = %q: empty or absolute", call, key)
	case trailing != prefix:
		t.Errorf("%s = %q: trailing slash %v, want %v", call, key, trailing, prefix)
	case path.Clean(body) != body:
		t.Errorf("%s = %q: not clean", call, key)
	case strings.Contains(key, `\`):
		t.Errorf("%s = %q: has a backslash", call, key)
	}
	for _, seg := range strings.Split(body, "/") {
		if seg == "" || seg == "." || seg == ".." {
			t.Errorf("%s = %q: has element %q", call, key, seg)
		}
	}
}

// checkUnder fails unless p is strictly inside root.
func checkUnder(t *testing.T, call, p, root string) {
	t.Helper()
	r, err := filepath.Rel(root, p)
	if err != nil || r == "." || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) || filepath.IsAbs(r) {
		t.Errorf("%s = %q: not inside %q", call, p, root)
	}
}

// TestValidNamesStayInside checks, for every valid table, shard and file
// name, that keys are relative, clean, free of "..", and begin with the
// table, and that local paths stay inside the data directory (or the base).
func TestValidNamesStayInside(t *testing.T) {
	data := filepath.FromSlash("/srv/data")
	names := validNames(t, 2000)
	for i, table := range names {
		shard, file := names[(i*7+1)%len(names)], names[(i*13+2)%len(names)]
		call := func(f string) string { return fmt.Sprintf("%s(table %q, shard %q, file %q)", f, table, shard, file) }
		keys := []struct {
			call   string
			key    string
			prefix bool
		}{
			{call("WALPrefix"), layout.WALPrefix(table, shard), true},
			{call("GenerationPrefix"), layout.GenerationPrefix(table, shard), true},
			{call("GenerationKey"), layout.GenerationKey(table, shard, file), false},
			{call("ProducersPrefix"), layout.ProducersPrefix(table, shard), true},
			{call("ProducerKey"), layout.ProducerKey(table, shard, file), false},
			{call("BaseRoot"), layout.BaseRoot(table), false},
			{call("BasePrefix"), layout.BasePrefix(table), true},
			{call("BaseKey/BaseFileRel"), layout.BaseKey(table, layout.BaseFileRel(shard, file)), false},
			{call("BaseKey/MetadataRel"), layout.BaseKey(table, layout.MetadataRel+file), false},
			{call("ReaderManifestPrefix"), layout.ReaderManifestPrefix(table), true},
			{call("ReaderManifestKey"), layout.ReaderManifestKey(table, file), false},
		}
		for _, k := range keys {
			checkKey(t, k.call, k.key, k.prefix)
			if !strings.HasPrefix(k.key, table+"/") {
				t.Errorf("%s = %q: not under the table's %q", k.call, k.key, table+"/")
			}
		}
		checkKey(t, call("BaseFileRel"), layout.BaseFileRel(shard, file), false)
		checkKey(t, call("ProducerStateRel"), layout.ProducerStateRel(file), false)

		base := layout.BaseDir(data, table)
		for _, p := range []struct{ call, path, root string }{
			{call("LockFile"), layout.LockFile(data), data},
			{call("EtcdDir"), layout.EtcdDir(data), data},
			{call("EtcdEndpointFile"), layout.EtcdEndpointFile(data), data},
			{call("TableDir"), layout.TableDir(data, table), data},
			{call("ShardDir"), layout.ShardDir(data, table, shard), layout.TableDir(data, table)},
			{call("WALDir"), layout.WALDir(data, table, shard), layout.ShardDir(data, table, shard)},
			{call("GenDir"), layout.GenDir(data, table, shard), layout.ShardDir(data, table, shard)},
			{call("ProducersDir"), layout.ProducersDir(data, table, shard), layout.ShardDir(data, table, shard)},
			{call("BaseDir"), base, layout.TableDir(data, table)},
			{call("BaseDataDir"), layout.BaseDataDir(base), base},
			{call("BaseShardDataDir"), layout.BaseShardDataDir(base, shard), layout.BaseDataDir(base)},
			{call("MetadataDir"), layout.MetadataDir(base), base},
			{call("ReaderManifestDir"), layout.ReaderManifestDir(base), base},
		} {
			checkUnder(t, p.call, p.path, p.root)
		}
		if t.Failed() {
			return
		}
	}
}

// TestDocNamesEveryPath keeps the package doc's tree whole: each function
// of the tree appears in doc.go.
func TestDocNamesEveryPath(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tree("d", "t", "s", "f", "f", "f", "f", "f") {
		name, _, _ := strings.Cut(e.call, "(")
		if !strings.Contains(string(doc), name) {
			t.Errorf("doc.go does not name %s", name)
		}
	}
}

// TestTablesMissTheDataDirsOwnEntries: no table shardmeta takes has its
// directory where the lock file, the embedded etcd or its endpoint file
// (or that file's temporary name) is, also without case.
func TestTablesMissTheDataDirsOwnEntries(t *testing.T) {
	const data = "/data"
	own := []string{layout.LockFile(data), layout.EtcdDir(data), layout.EtcdEndpointFile(data), layout.EndpointTemp(layout.EtcdEndpointFile(data))}
	for _, name := range validNames(t, 2000) {
		if (shardmeta.Keys{Prefix: "rollwal", Table: name}).Validate() != nil {
			continue
		}
		for _, o := range own {
			if strings.EqualFold(layout.TableDir(data, name), o) {
				t.Errorf("table %q: its directory %s is the data directory's %s", name, layout.TableDir(data, name), o)
			}
		}
	}
}
