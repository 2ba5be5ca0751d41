package shardmeta

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/rollwal/rollwal/layout"
)

// ErrInvalidBaseState: a base-table state (the value of base/state) that is
// malformed or breaks an invariant. DecodeBaseState, Validate and Encode
// refuse it; a stored one fails LoadBaseState closed. It wraps
// ErrInvalidManifest, so callers that treat every bad metadata value alike
// need test only that.
var ErrInvalidBaseState = fmt.Errorf("%w: invalid base state", ErrInvalidManifest)

// ShardMergeState is one shard's merge state in the base table.
//
// Watermark is the highest generation of the shard merged into the base.
// ObservedEpoch is the writer epoch the merge coordinator last planned
// against, Cutoff the highest generation that may hold rows already in the
// base (those at or below it are ID-checked). A nil ObservedEpoch with a
// Cutoff is legacy state (one conservative transition); an ObservedEpoch
// without a Cutoff is invalid ("writer epoch has no replay boundary").
type ShardMergeState struct {
	Watermark     uint64  `json:"watermark"`
	ObservedEpoch *uint64 `json:"observed_epoch,omitempty"`
	Cutoff        *uint64 `json:"cutoff,omitempty"`
}

// BaseFile is one committed data file of the base table.
type BaseFile struct {
	// Path is relative to <data>/<table>/base: clean, slash-separated,
	// without "..", not absolute, under "data/" (layout.BaseFileRel).
	Path  string `json:"path"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
	// Shard and SeqFirst..SeqLast (the WAL positions of its rows) let the
	// ID check open only the files that can hold a replayed row: a replay
	// keeps a row's position, so its earlier copy is in a file of the same
	// shard whose range covers that position. Files committed before these
	// fields existed have no Shard and are always checked.
	Shard    string `json:"shard,omitempty"`
	SeqFirst uint64 `json:"seq_first,omitempty"`
	SeqLast  uint64 `json:"seq_last,omitempty"`
	// IndexCRC is the file's index checksum (generation.IndexCRC: every
	// byte outside its column chunks). The ID check trusts the file's bloom
	// filters and statistics only after it matches; nil for files committed
	// before it existed.
	IndexCRC *uint32 `json:"index_crc,omitempty"`
}

// HasSeqRange reports whether f records its shard and position range.
func (f BaseFile) HasSeqRange() bool { return f.Shard != "" }

func (f BaseFile) validate() error {
	if f.Rows < 1 {
		return fmt.Errorf("rows %d < 1", f.Rows)
	}
	if f.Bytes < 0 {
		return fmt.Errorf("bytes %d < 0", f.Bytes)
	}
	if !f.HasSeqRange() {
		if f.SeqFirst != 0 || f.SeqLast != 0 {
			return errors.New("seq_first/seq_last without a shard")
		}
		return nil
	}
	if err := ValidateShard(f.Shard); err != nil {
		return err
	}
	if under := layout.BaseFileRel(f.Shard, ""); !strings.HasPrefix(f.Path, under) {
		return fmt.Errorf("is not under %s", under)
	}
	if f.SeqFirst > f.SeqLast {
		return fmt.Errorf("seq range [%d, %d] is empty", f.SeqFirst, f.SeqLast)
	}
	return nil
}

// BaseState is the value of base/state: the base table's version and the
// per-shard merge state. Version counts data commits; writes that only move
// a shard's observed epoch or cutoff keep it.
//
// The committed files are the current snapshot of the base's Iceberg table
// (package catalog), whose record changes in the same transactions as this
// state. Files is the list kept here before that (format 1): only a state
// written by an earlier version has it, and the merge moves it into the
// Iceberg table once (publish's migration). A state is encoded without it
// when it is empty.
type BaseState struct {
	Version uint64                     `json:"version"`
	Files   []BaseFile                 `json:"files,omitempty"`
	Shards  map[string]ShardMergeState `json:"shards"`
}

// BaseState returns the base table's state key.
func (k Keys) BaseState() string { return k.Root() + "base/state" }

// BaseLock returns the merge coordinator's lock key.
func (k Keys) BaseLock() string { return k.Root() + "base/lock" }

func baseInvalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidBaseState, fmt.Sprintf(format, args...))
}

// NewBaseState is the state of a table never merged into: version 0, no
// files, no shards.
func NewBaseState() *BaseState {
	return &BaseState{Files: []BaseFile{}, Shards: map[string]ShardMergeState{}}
}

// Clone returns a deep copy; nil collections become empty ones.
func (b *BaseState) Clone() *BaseState {
	c := &BaseState{Version: b.Version, Files: append([]BaseFile{}, b.Files...),
		Shards: make(map[string]ShardMergeState, len(b.Shards))}
	for i, f := range c.Files {
		if f.IndexCRC != nil {
			v := *f.IndexCRC
			c.Files[i].IndexCRC = &v
		}
	}
	for name, s := range b.Shards {
		if s.ObservedEpoch != nil {
			v := *s.ObservedEpoch
			s.ObservedEpoch = &v
		}
		if s.Cutoff != nil {
			v := *s.Cutoff
			s.Cutoff = &v
		}
		c.Shards[name] = s
	}
	return c
}

// Validate checks the state's invariants and fails closed with an
// ErrInvalidBaseState error naming the field (and the shard):
//
//   - files: paths clean, relative, slash-separated, under "data/", without
//     ".." and distinct; rows ≥ 1 (an empty file is never committed);
//     bytes ≥ 0; a file with a shard lies under data/<shard>/ and has a
//     non-empty seq range, one without has no seq range;
//   - shards: valid shard names; an observed_epoch only with a cutoff and
//     ≥ 1.
//
// A cutoff without an observed epoch is legacy state and valid.
func (b *BaseState) Validate() error {
	if b == nil {
		return baseInvalidf("state is nil")
	}
	seen := make(map[string]int, len(b.Files))
	for i, f := range b.Files {
		if err := checkBasePath(f.Path); err != nil {
			return baseInvalidf("files[%d].path %q %v", i, f.Path, err)
		}
		if err := f.validate(); err != nil {
			return baseInvalidf("files[%d] (%s): %v", i, f.Path, err)
		}
		if j, dup := seen[f.Path]; dup {
			return baseInvalidf("files[%d].path %q is also files[%d].path", i, f.Path, j)
		}
		seen[f.Path] = i
	}
	for _, name := range slices.Sorted(maps.Keys(b.Shards)) {
		if err := ValidateShard(name); err != nil {
			return baseInvalidf("shards: %v", err)
		}
		s := b.Shards[name]
		if s.ObservedEpoch != nil && s.Cutoff == nil {
			return baseInvalidf("shard %q: observed_epoch %d has no cutoff (writer epoch has no replay boundary)", name, *s.ObservedEpoch)
		}
		if s.ObservedEpoch != nil && *s.ObservedEpoch == 0 {
			return baseInvalidf("shard %q: observed_epoch is 0, want ≥ 1", name)
		}
	}
	return nil
}

func checkBasePath(p string) error {
	switch {
	case p == "":
		return errors.New("is empty")
	case !utf8.ValidString(p):
		return errors.New("is not valid UTF-8")
	case strings.HasPrefix(p, "/"):
		return errors.New("is absolute")
	case strings.Contains(p, "\\"):
		return errors.New("has a backslash")
	case path.Clean(p) != p:
		return errors.New("is not clean")
	case !strings.HasPrefix(p, layout.BaseDataRel):
		return errors.New("is not under " + layout.BaseDataRel)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." || seg == "." {
			return errors.New("has a . or .. segment")
		}
	}
	return nil
}

// baseStateShape: every field required except the two optional pointers.
var baseFileFields = map[string]bool{"path": true, "rows": true, "bytes": true,
	"shard": false, "seq_first": false, "seq_last": false, "index_crc": false}
var shardStateFields = map[string]bool{"watermark": true, "observed_epoch": false, "cutoff": false}

// DecodeBaseState parses a stored base state strictly and validates it.
// It refuses, with ErrInvalidBaseState: invalid UTF-8, data after the
// object, unknown, missing, null or duplicate fields (observed_epoch and
// cutoff may be absent, never null), wrong types, negative numbers, and
// anything Validate refuses.
func DecodeBaseState(data []byte) (*BaseState, error) {
	if !utf8.Valid(data) {
		return nil, baseInvalidf("not valid UTF-8")
	}
	if err := checkBaseStructure(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var b BaseState
	if err := dec.Decode(&b); err != nil {
		return nil, baseInvalidf("%v", err)
	}
	if b.Files == nil {
		b.Files = []BaseFile{}
	}
	if b.Shards == nil {
		b.Shards = map[string]ShardMergeState{}
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &b, nil
}

// Encode validates b and returns its canonical encoding (compact JSON, map
// keys sorted, no files field when there are none, empty shards as {}).
func (b *BaseState) Encode() ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	data, err := json.Marshal(b.Clone())
	if err != nil {
		return nil, fmt.Errorf("shardmeta: encode base state: %w", err)
	}
	return data, nil
}

// checkBaseStructure walks the JSON tokens: the exact field sets, no nulls,
// no duplicates, and for every number a non-negative integer.
func checkBaseStructure(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	err := walkBaseObject(dec, "state", func(key, p string) error {
		switch key {
		case "version":
			return walkBaseScalar(dec, p, true)
		case "files":
			return walkBaseArray(dec, p, func(q string) error {
				return walkBaseFields(dec, q, baseFileFields, func(k, r string) error {
					return walkBaseScalar(dec, r, k != "path" && k != "shard")
				})
			})
		case "shards":
			return walkBaseObject(dec, p, func(shard, q string) error {
				return walkBaseFields(dec, q, shardStateFields, func(_, r string) error {
					return walkBaseScalar(dec, r, true)
				})
			}, nil)
		}
		return baseInvalidf("%s: unknown field %q", p, key)
	}, map[string]bool{"version": true, "files": false, "shards": true})
	if err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return baseInvalidf("data after the state object")
	}
	return nil
}

func walkBaseFields(dec *json.Decoder, p string, fields map[string]bool, each func(key, path string) error) error {
	return walkBaseObject(dec, p, func(key, q string) error {
		if _, ok := fields[key]; !ok {
			return baseInvalidf("%s: unknown field %q", p, key)
		}
		return each(key, q)
	}, fields)
}

// walkBaseObject reads an object; required (when not nil) lists its fields,
// true for the required ones.
func walkBaseObject(dec *json.Decoder, p string, each func(key, path string) error, required map[string]bool) error {
	tok, err := dec.Token()
	if err != nil {
		return baseSyntax(p, err)
	}
	if tok != json.Delim('{') {
		return baseInvalidf("%s: want an object, got %v", p, tok)
	}
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return baseSyntax(p, err)
		}
		key := kt.(string)
		if seen[key] {
			return baseInvalidf("%s: duplicate field %q", p, key)
		}
		seen[key] = true
		if err := each(key, p+"."+key); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return baseSyntax(p, err)
	}
	for _, name := range slices.Sorted(maps.Keys(required)) {
		if required[name] && !seen[name] {
			return baseInvalidf("%s: missing field %q", p, name)
		}
	}
	return nil
}

func walkBaseArray(dec *json.Decoder, p string, each func(path string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return baseSyntax(p, err)
	}
	if tok != json.Delim('[') {
		return baseInvalidf("%s: want an array, got %v", p, tok)
	}
	for i := 0; dec.More(); i++ {
		if err := each(fmt.Sprintf("%s[%d]", p, i)); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return baseSyntax(p, err)
}

func walkBaseScalar(dec *json.Decoder, p string, number bool) error {
	tok, err := dec.Token()
	if err != nil {
		return baseSyntax(p, err)
	}
	switch t := tok.(type) {
	case nil:
		return baseInvalidf("%s is null", p)
	case json.Number:
		if !number {
			return baseInvalidf("%s: want a string, got a number", p)
		}
		s := string(t)
		if strings.HasPrefix(s, "-") || strings.ContainsAny(s, ".eE") {
			return baseInvalidf("%s: %s is not a non-negative integer", p, s)
		}
	case string:
		if number {
			return baseInvalidf("%s: want a number, got a string", p)
		}
	default:
		return baseInvalidf("%s: want a scalar, got %v", p, tok)
	}
	return nil
}

func baseSyntax(p string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return baseInvalidf("%s: malformed JSON: %v", p, err)
}

// LoadBaseState returns the table's base state and the ModRevision of
// base/state: NewBaseState() and 0 when the key is absent. A stored state
// that DecodeBaseState refuses fails closed with ErrInvalidBaseState.
func (s *Store) LoadBaseState(ctx context.Context) (*BaseState, int64, error) {
	if err := s.keys.Validate(); err != nil {
		return nil, 0, err
	}
	rctx, cancel := s.rpc(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.keys.BaseState())
	if err != nil {
		return nil, 0, fmt.Errorf("shardmeta: load base state: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return NewBaseState(), 0, nil
	}
	kv := resp.Kvs[0]
	b, err := DecodeBaseState(kv.Value)
	if err != nil {
		return nil, 0, fmt.Errorf("shardmeta: stored base state (revision %d) refused: %w", kv.ModRevision, err)
	}
	return b, kv.ModRevision, nil
}
