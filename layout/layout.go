package layout

import (
	"path"
	"path/filepath"
	"strings"
)

// The entries of the tree. Unexported: callers ask for a path, never
// assemble one, so a name lives in one place.
const (
	etcdName         = "etcd"
	etcdEndpointName = "etcd.endpoint"
	shardsName       = "shards"
	walName          = "wal"
	genName          = "gen"
	producersName    = "producers"
	baseName         = "base"
	dataName         = "data"
	metadataName     = "metadata"
	readersName      = "_manifest"
)

// LockName is the lock file's name in the data directory, for messages
// that name it without a directory.
const LockName = "LOCK"

// Relative names under a base's root, with slashes: recorded paths begin
// with them (base/state and the readers' manifests name files by
// BaseDataRel+…), and a listing of a base in the store is sorted into data,
// metadata and readers' manifests by them.
const (
	// BaseDataRel is "data/", the base's data files.
	BaseDataRel = dataName + "/"
	// MetadataRel is "metadata/", the base's Iceberg metadata.
	MetadataRel = metadataName + "/"
	// ReaderManifestRel is "_manifest/", the base's readers' manifests.
	ReaderManifestRel = readersName + "/"
)

// OwnEntry reports whether name is one of the data directory's own
// entries (the lock file, the embedded etcd's directory, its endpoint file
// and that file's temporary name), which a table's directory beside them
// must not be: compared without case, as a case-insensitive filesystem
// would.
func OwnEntry(name string) bool {
	for _, e := range []string{LockName, etcdName, etcdEndpointName, EndpointTemp(etcdEndpointName)} {
		if strings.EqualFold(name, e) {
			return true
		}
	}
	return false
}

// EndpointTemp is the name the endpoint file is written under before it is
// renamed into place.
func EndpointTemp(name string) string { return name + ".tmp" }

// Data directory paths.

// LockFile is the data directory's lock file: one process per directory.
func LockFile(dataDir string) string { return filepath.Join(dataDir, LockName) }

// EtcdDir is where the embedded etcd keeps its files.
func EtcdDir(dataDir string) string { return filepath.Join(dataDir, etcdName) }

// EtcdEndpointFile is where a serve running the embedded etcd records it
// for the commands that run beside it.
func EtcdEndpointFile(dataDir string) string { return filepath.Join(dataDir, etcdEndpointName) }

// TableDir holds everything of table in the data directory.
func TableDir(dataDir, table string) string { return filepath.Join(dataDir, table) }

// ShardDir is a shard's directory; ProducerStateRel names are relative to it.
func ShardDir(dataDir, table, shard string) string {
	return filepath.Join(dataDir, table, shardsName, shard)
}

// WALDir holds a shard's local WAL segments.
func WALDir(dataDir, table, shard string) string {
	return filepath.Join(dataDir, table, shardsName, shard, walName)
}

// GenDir holds a shard's generation files.
func GenDir(dataDir, table, shard string) string {
	return filepath.Join(dataDir, table, shardsName, shard, genName)
}

// ProducersDir holds a shard's producer-state files.
func ProducersDir(dataDir, table, shard string) string {
	return filepath.Join(dataDir, table, shardsName, shard, producersName)
}

// BaseDir is the root of table's base when the base is local.
func BaseDir(dataDir, table string) string { return filepath.Join(dataDir, table, baseName) }

// Paths under a local base's root (BaseDir).

// BaseDataDir holds the base's data files, a directory per shard.
func BaseDataDir(baseDir string) string { return filepath.Join(baseDir, dataName) }

// BaseShardDataDir holds the base data files merged from shard.
func BaseShardDataDir(baseDir, shard string) string {
	return filepath.Join(baseDir, dataName, shard)
}

// MetadataDir holds the base's Iceberg metadata files, manifest lists and
// manifests (the Iceberg convention <location>/metadata/).
func MetadataDir(baseDir string) string { return filepath.Join(baseDir, metadataName) }

// ReaderManifestDir holds the base's readers' manifests.
func ReaderManifestDir(baseDir string) string { return filepath.Join(baseDir, readersName) }

// Recorded relative names (slashes on every OS).

// BaseFileRel is base file name of shard relative to the base's root, as
// base/state and the readers' manifests record it.
func BaseFileRel(shard, name string) string { return BaseDataRel + shard + "/" + name }

// ProducerStateRel is producer-state file name relative to the shard's
// directory, as the shard manifest records it.
func ProducerStateRel(name string) string { return producersName + "/" + name }

// Object keys. The shard keys are path.Join'ed, as they always were: an
// empty file name yields the directory's key without a trailing slash;
// the Prefix functions end in "/", ready for objstore.Store.List.

// shardKey is the key of elem under a shard.
func shardKey(table, shard string, elem ...string) string {
	return path.Join(append([]string{table, shardsName, shard}, elem...)...)
}

// WALPrefix begins the name of every WAL object of a shard
// (wal.ObjectOptions.Prefix).
func WALPrefix(table, shard string) string { return shardKey(table, shard, walName) + "/" }

// GenerationPrefix begins the key of every generation object of a shard.
func GenerationPrefix(table, shard string) string { return shardKey(table, shard, genName) + "/" }

// GenerationKey is the key of a shard's generation file: a merge on
// another machine finds a generation by it.
func GenerationKey(table, shard, file string) string { return shardKey(table, shard, genName, file) }

// ProducersPrefix begins the key of every producer-state object of a shard.
func ProducersPrefix(table, shard string) string {
	return shardKey(table, shard, producersName) + "/"
}

// ProducerKey is the key of a shard's producer-state file: a successor on
// another machine reads the state by it.
func ProducerKey(table, shard, name string) string {
	return shardKey(table, shard, producersName, name)
}

// BaseRoot is the key of table's base in the store, without a trailing
// slash: its Iceberg table's location is the store's location of it.
func BaseRoot(table string) string { return table + "/" + baseName }

// BasePrefix begins the key of every object of table's base.
func BasePrefix(table string) string { return BaseRoot(table) + "/" }

// BaseKey is the key of the base file at rel, a path relative to the
// base's root (BaseFileRel, or under MetadataRel or ReaderManifestRel).
func BaseKey(table, rel string) string { return BasePrefix(table) + rel }

// ReaderManifestPrefix begins the key of every readers' manifest of
// table's base.
func ReaderManifestPrefix(table string) string { return BasePrefix(table) + ReaderManifestRel }

// ReaderManifestKey is the key of readers' manifest name of table's base.
func ReaderManifestKey(table, name string) string { return ReaderManifestPrefix(table) + name }
