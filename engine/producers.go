package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// producerState is every producer session's mark: its next expected
// sequence and when it last appended.
type producerState map[string]memtable.ProducerMark

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (s *Shard) shardDir() string {
	return layout.ShardDir(s.opts.DataDir, s.opts.Table, s.name)
}

func (s *Shard) producersDir() string {
	return layout.ProducersDir(s.opts.DataDir, s.opts.Table, s.name)
}

// checkSequence decides a producer's batch of count rows at p.Seq against
// its live mark: dup reports a batch wholly below the next expected
// sequence (acknowledged before). Callers hold mu.
func (s *Shard) checkSequence(p Producer, count int) (dup bool, err error) {
	mark, known := s.producers[p.ID]
	switch {
	case known && p.Seq+uint64(count) <= mark.Next:
		return true, nil
	case known && p.Seq == mark.Next:
		return false, nil
	case !known && p.Seq == 0:
		return false, s.makeRoomForProducer()
	}
	return false, &SequenceError{Shard: s.name, Producer: p.ID, Seq: p.Seq, Count: count, Expected: mark.Next, Unknown: !known}
}

// makeRoomForProducer lets a new producer in unless the shard already
// tracks MaxProducers that are not idle past their expiry. Callers hold mu.
func (s *Shard) makeRoomForProducer() error {
	if len(s.producers) < s.opts.MaxProducers {
		return nil
	}
	s.expireLive()
	if len(s.producers) < s.opts.MaxProducers {
		return nil
	}
	return fmt.Errorf("%w: shard %s tracks %d producer sessions, the limit (idle ones expire after %v)",
		ErrTooManyProducers, s.name, len(s.producers), s.opts.ProducerExpiry)
}

// expireLive forgets producers idle past their expiry. Callers hold mu.
func (s *Shard) expireLive() {
	cutoff := s.expiryCutoff()
	maps.DeleteFunc(s.producers, func(_ string, m memtable.ProducerMark) bool { return m.SeenMillis < cutoff })
}

func (s *Shard) expiryCutoff() int64 { return s.opts.Now().Add(-s.opts.ProducerExpiry).UnixMilli() }

// noteProducer moves a producer's live mark past a record of it and notes
// the mark in the active memtable. Callers hold mu.
func (s *Shard) noteProducer(m RecordMeta) {
	if m.Producer.ID == "" {
		return
	}
	cur := s.producers[m.Producer.ID]
	mark := memtable.ProducerMark{Next: max(cur.Next, m.Producer.Seq+m.Count), SeenMillis: max(cur.SeenMillis, m.Millis)}
	s.producers[m.Producer.ID] = mark
	s.set.NoteProducer(m.Producer.ID, mark)
}

// ProducerNextSeq returns the next sequence the shard expects from a
// producer session, and whether it knows the producer at all (a producer
// it does not know starts at 0).
func (s *Shard) ProducerNextSeq(id string) (next uint64, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.producers[id]
	return m.Next, ok
}

// nextProducerState is the committed state plus generation m's marks, less
// the producers idle past their expiry; changed is false when it equals
// the committed state.
func (s *Shard) nextProducerState(m *memtable.Memtable) (st producerState, changed bool) {
	st = maps.Clone(s.committedProducers)
	if st == nil {
		st = producerState{}
	}
	for id, mark := range m.Producers() {
		cur := st[id]
		st[id] = memtable.ProducerMark{Next: max(cur.Next, mark.Next), SeenMillis: max(cur.SeenMillis, mark.SeenMillis)}
	}
	cutoff := s.expiryCutoff()
	maps.DeleteFunc(st, func(_ string, m memtable.ProducerMark) bool { return m.SeenMillis < cutoff })
	return st, !maps.Equal(st, s.committedProducers)
}

// producerFile is the on-disk form of a producerState (JSON, ids sorted).
type producerFile struct {
	Version   int             `json:"version"`
	Producers []producerEntry `json:"producers"`
}

type producerEntry struct {
	ID         string `json:"id"`
	NextSeq    uint64 `json:"next_seq"`
	SeenMillis int64  `json:"seen_unix_ms"`
}

const producerFileVersion = 1

func encodeProducerState(st producerState) []byte {
	f := producerFile{Version: producerFileVersion, Producers: make([]producerEntry, 0, len(st))}
	for _, id := range slices.Sorted(maps.Keys(st)) {
		f.Producers = append(f.Producers, producerEntry{ID: id, NextSeq: st[id].Next, SeenMillis: st[id].SeenMillis})
	}
	data, _ := json.Marshal(f) // plain types: cannot fail
	return data
}

func decodeProducerState(data []byte) (producerState, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f producerFile
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	if f.Version != producerFileVersion {
		return nil, fmt.Errorf("version %d, want %d", f.Version, producerFileVersion)
	}
	st := make(producerState, len(f.Producers))
	for _, e := range f.Producers {
		if err := ValidateProducerID(e.ID); err != nil {
			return nil, err
		}
		if _, dup := st[e.ID]; dup {
			return nil, fmt.Errorf("producer %q listed twice", e.ID)
		}
		st[e.ID] = memtable.ProducerMark{Next: e.NextSeq, SeenMillis: e.SeenMillis}
	}
	return st, nil
}

// writeProducerState writes st durably under a name unique to this attempt
// (temp file, fsync, rename, directory fsync) and returns its reference for
// the manifest.
func (s *Shard) writeProducerState(ctx context.Context, gen uint64, st producerState) (*shardmeta.ProducerStateRef, error) {
	dir := s.producersDir()
	if err := vfs.MkdirAllDurable(s.opts.FS, dir, 0o755); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("p%020d-e%020d-%d.json", gen, s.claim.Epoch, time.Now().UnixNano())
	data := encodeProducerState(st)
	if err := writeDurable(s.opts.FS, filepath.Join(dir, name), data); err != nil {
		return nil, fmt.Errorf("write producer state: %w", err)
	}
	if s.opts.Store != nil {
		// Where a successor on another machine finds it, as the
		// generations; the name is unique per attempt.
		key := s.producerObjectKey(name)
		if err := s.opts.Store.Create(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
			return nil, fmt.Errorf("upload producer state %s: %w", key, err)
		}
	}
	return &shardmeta.ProducerStateRef{File: layout.ProducerStateRel(name), Size: int64(len(data)),
		CRC32C: crc32.Checksum(data, castagnoli), Producers: len(st)}, nil
}

func writeDurable(fsys vfs.FS, path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return err
	}
	return vfs.SyncDir(fsys, filepath.Dir(path))
}

// loadProducerState reads the producer-state file the manifest names; a
// file that is missing, of another size or checksum, or undecodable fails
// the open: without it, retries of acknowledged batches would be stored
// again.
func (s *Shard) loadProducerState(ctx context.Context, ref *shardmeta.ProducerStateRef) (producerState, error) {
	if ref == nil {
		return producerState{}, nil
	}
	path := filepath.Join(s.shardDir(), filepath.FromSlash(ref.File))
	data, err := vfs.ReadFile(s.opts.FS, path)
	if errors.Is(err, fs.ErrNotExist) && s.opts.Store != nil {
		// Written on another machine: the store has it.
		path = s.opts.Store.String() + "/" + s.producerObjectKey(filepath.Base(ref.File))
		data, err = s.readProducerObject(ctx, filepath.Base(ref.File))
	}
	if err != nil {
		return nil, fmt.Errorf("engine: shard %s: producer state %s: %w", s.name, path, err)
	}
	if sum := crc32.Checksum(data, castagnoli); int64(len(data)) != ref.Size || sum != ref.CRC32C {
		return nil, fmt.Errorf("engine: shard %s: producer state %s: %d bytes with CRC-32C %#x, the manifest names %d bytes with %#x: damaged or replaced",
			s.name, path, len(data), sum, ref.Size, ref.CRC32C)
	}
	st, err := decodeProducerState(data)
	if err != nil {
		return nil, fmt.Errorf("engine: shard %s: producer state %s: %w", s.name, path, err)
	}
	return st, nil
}

// removeStaleProducerFiles deletes the producer-state files the committed
// manifest does not name: older states and failed attempts.
func (s *Shard) removeStaleProducerFiles() {
	dir := s.producersDir()
	names, err := s.opts.FS.List(dir)
	if err != nil {
		return // no directory yet
	}
	keep := ""
	if ref := s.manifest.ProducerState; ref != nil {
		keep = filepath.Base(ref.File)
	}
	for _, n := range names {
		if n != keep {
			if err := s.opts.FS.Remove(filepath.Join(dir, n)); err != nil {
				s.log.Warn("remove old producer state", "file", n, "err", err)
			}
		}
	}
}

// producerObjectKey is the store's name of producer-state file name.
func (s *Shard) producerObjectKey(name string) string {
	return layout.ProducerKey(s.opts.Table, s.name, name)
}

func (s *Shard) readProducerObject(ctx context.Context, name string) ([]byte, error) {
	obj, err := s.opts.Store.Open(ctx, s.producerObjectKey(name))
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	// A state holds at most MaxProducers entries of a bounded id each.
	if limit := int64(s.opts.MaxProducers)*(MaxProducerIDBytes*6+128) + 1024; obj.Size() > limit {
		return nil, fmt.Errorf("%d bytes, above any producer state", obj.Size())
	}
	data := make([]byte, obj.Size())
	if _, err := obj.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return data, nil
}

// deleteProducerObject deletes the store's copy of producer state name;
// a failure leaves it to the next open's sweep.
func (s *Shard) deleteProducerObject(name string) {
	if s.opts.Store == nil {
		return
	}
	if err := s.opts.Store.Delete(context.Background(), s.producerObjectKey(name)); err != nil {
		s.log.Warn("delete old producer state object", "object", s.producerObjectKey(name), "err", err)
	}
}

// removeStaleProducerObjects deletes the store's producer states the
// committed manifest does not name: older states, failed attempts, a
// fenced writer's. Only the owner runs it, after its claim.
func (s *Shard) removeStaleProducerObjects(ctx context.Context) {
	if s.opts.Store == nil {
		return
	}
	infos, err := s.opts.Store.List(ctx, layout.ProducersPrefix(s.opts.Table, s.name))
	if err != nil {
		s.log.Warn("list producer state objects", "err", err)
		return
	}
	keep := ""
	if ref := s.manifest.ProducerState; ref != nil {
		keep = s.producerObjectKey(filepath.Base(ref.File))
	}
	for _, in := range infos {
		if in.Name != keep {
			if err := s.opts.Store.Delete(ctx, in.Name); err != nil {
				s.log.Warn("delete old producer state object", "object", in.Name, "err", err)
			}
		}
	}
}

// stageProducerState writes the producer state that committing m makes,
// when it differs from the committed one, and names it in next; the state
// is adopted once next commits. The caller holds flushMu.
func (s *Shard) stageProducerState(ctx context.Context, m *memtable.Memtable, next *shardmeta.Manifest) error {
	st, changed := s.nextProducerState(m)
	if !changed {
		return nil
	}
	ref, err := s.writeProducerState(ctx, m.Generation(), st)
	if err != nil {
		return err
	}
	next.ProducerState, s.stagedProducers = ref, st
	return nil
}
