// Package layout says where rollwal keeps things: every path under a data
// directory and every key in an object store. The engine, the merge
// (publish, catalog), the CLI's inspect and wal tools ask it instead of
// spelling paths, so they cannot disagree about where a file is, and a
// change to the layout is one diff here (and in testdata/tree.golden).
//
// The layout is wire format: existing data directories and buckets must
// keep working, so a name here changes only with a migration.
//
// # The data directory
//
// One data directory (engine.Options.DataDir, publish.Options.DataDir, the
// writer's --data-dir) holds every table a process serves:
//
//	<data>/
//	  LOCK                          one process per directory (internal/dirlock)   LockFile
//	  etcd/                         the embedded etcd's own files                  EtcdDir
//	  etcd.endpoint                 a running serve's embedded etcd, for the
//	                                commands that read beside it                   EtcdEndpointFile
//	  <table>/                                                                     TableDir
//	    shards/
//	      <shard>/                                                                 ShardDir
//	        wal/                    WAL segments <epoch>-<index>.wal, spares       WALDir
//	                                <epoch>-<index>.spare (drained segments kept
//	                                to be written over, wal.Options.Spares)
//	        gen/                    generations g<gen>-e<epoch>-<attempt>.parquet  GenDir
//	        producers/              producer states p<gen>-e<epoch>-<ns>.json      ProducersDir
//	    base/                       the base Iceberg table                         BaseDir
//	      data/                                                                    BaseDataDir
//	        <shard>/                base data files g…-e…-<attempt>-c<crc>.parquet BaseShardDataDir
//	      metadata/                 Iceberg metadata, manifest lists, manifests    MetadataDir
//	      _manifest/                readers' manifests <version %020d>.json        ReaderManifestDir
//
// A base is addressed by its own root (BaseDir, made absolute by publish):
// the functions below it take that root, not the data directory, because
// the same base may live in an object store instead (below).
//
// # The object store
//
// The key space mirrors <data>/<table>/: an object's key is the path its
// directory has under the data directory, with slashes, then its name —
// the local file's own name where there is one (generations, producer
// states), so a file and its object have the same relative path. The
// store's URL (s3://bucket/prefix, file:///dir) is not part of the key;
// the store adds it. LOCK, etcd/ and etcd.endpoint belong to one machine
// and are never objects.
//
//	<table>/
//	  shards/<shard>/
//	    wal/<epoch>-<first>-<last>.wal     with wal: {backend: object}  WALPrefix
//	    gen/<generation file>              with storage:                GenerationPrefix, GenerationKey
//	    producers/<producer-state file>    with storage:                ProducersPrefix, ProducerKey
//	  base/                                with publish.Options.Store   BaseRoot, BasePrefix, BaseKey
//	    data/<shard>/<base file>                                        BaseKey(table, BaseFileRel(shard, file))
//	    metadata/<…>                       catalog.Options.Store        BaseKey(table, MetadataRel+file)
//	    _manifest/<version %020d>.json                                  ReaderManifestPrefix, ReaderManifestKey
//
// With a store the base is there only: nothing of it is written under the
// data directory.
//
// # Relative names that are recorded
//
// Two relative paths are written into metadata and read back by later
// builds, so they are layout too: the base's file paths
// ("data/<shard>/<file>", BaseFileRel) in base/state and the readers'
// manifests, relative to the base's root; and the producer-state file
// ("producers/<file>", ProducerStateRel) in the shard manifest, relative
// to the shard's directory. Both use slashes on every OS.
//
// # What is not here
//
// The names of the files inside these directories belong to their formats
// and stay with them: generation names (generation.Name, BaseName), WAL
// segment and object names (package wal), readers' manifest names
// (publish.ReaderManifestName), producer-state names (engine), Iceberg
// metadata names (catalog, iceberg-go) and each writer's temporary names.
// The etcd key space is shardmeta.Keys (docs/format/etcd.md).
//
// # Valid names
//
// The functions build strings and validate nothing. They are safe — every
// result stays under its root, with no ".." element, no empty element and
// no leading slash — for the names rollwal accepts: table and shard names
// as shardmeta validates them (1 to 128 bytes of [A-Za-z0-9._-], neither
// "." nor ".."), and file names that are one such element, as the formats
// above make them. Callers validate first (shardmeta.Keys.Validate,
// shardmeta.ValidateShard); layout_test checks the property for them.
// A table is never named after one of the data directory's own entries
// (OwnEntry: LOCK, etcd, etcd.endpoint and its temporary name, without
// case): its directory would be that entry. shardmeta refuses them.
//
// Local paths use package path/filepath (the OS's separator); object keys
// and the recorded relative names use package path (always "/").
package layout
