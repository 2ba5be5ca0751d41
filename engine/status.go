package engine

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/wal"
)

// Status is a snapshot of a shard for operators.
type Status struct {
	Shard             string                 `json:"shard"`
	Epoch             uint64                 `json:"epoch"`
	Token             int64                  `json:"token"`
	CurrentGeneration uint64                 `json:"current_generation"`
	ReplayCursor      uint64                 `json:"replay_cursor"`
	WALTail           uint64                 `json:"wal_tail"`
	Flushed           []shardmeta.Generation `json:"flushed"`
	MemtableRows      int                    `json:"memtable_rows"`
	MemtableBytes     int64                  `json:"memtable_bytes"`
	SourceOffsets     map[string]int64       `json:"source_offsets,omitempty"`
	Stopped           string                 `json:"stopped,omitempty"`
	// Degraded says why a running shard refuses appends for now and
	// recovers by itself ("disk full: ..."); empty when it takes appends.
	// A shard with Stopped or Degraded set is not ready.
	Degraded string `json:"degraded,omitempty"`
}

// Status reports the shard's state.
func (s *Shard) Status() Status {
	m := s.committed.Load().Clone()
	st := Status{
		Shard: s.name, Epoch: s.claim.Epoch, Token: s.claim.Token,
		CurrentGeneration: m.CurrentGeneration, ReplayCursor: m.ReplayCursor,
		WALTail: s.w.Tail(), Flushed: m.Flushed, SourceOffsets: m.SourceOffsets,
		MemtableRows: s.set.Len(), MemtableBytes: s.set.Bytes(),
	}
	if err := s.err(); err != nil {
		st.Stopped = err.Error()
	} else if err := s.diskFull(); errors.Is(err, wal.ErrStoreDown) {
		st.Degraded = "object store down: " + err.Error()
	} else if err != nil {
		st.Degraded = "disk full: " + err.Error()
	}
	return st
}

// Manifest returns a copy of the last committed shard manifest. It does
// not wait for a flush in progress.
func (s *Shard) Manifest() *shardmeta.Manifest { return s.committed.Load().Clone() }

// setManifest records m as the last committed manifest. The caller holds
// flushMu (or is opening the shard).
func (s *Shard) setManifest(m *shardmeta.Manifest) {
	s.manifest = m
	s.committed.Store(m)
}

// GenerationDir is where the shard's generation files live.
func (s *Shard) GenerationDir() string { return s.genDir }

// LoadManifest reads a shard's committed manifest without claiming it
// (prefix "" means the default).
func LoadManifest(ctx context.Context, cli *clientv3.Client, prefix, table, shard string) (*shardmeta.Manifest, error) {
	if prefix == "" {
		prefix = "rollwal"
	}
	st := shardmeta.NewStore(cli, shardmeta.Keys{Prefix: prefix, Table: table}, shardmeta.StoreOptions{})
	m, _, err := st.Load(ctx, shard)
	return m, err
}
