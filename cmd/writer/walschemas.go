package main

// The schema versions `writer wal verify|dump|repair` decode records with.
// A record names its version (kinds 0 and 1: version 1, kind 2: the
// version it carries). With an etcd at hand (a running serve's embedded
// one, or --etcd-endpoints; the wal commands never start the embedded
// etcd) every record is decoded with exactly its version, read once per
// version. Without one, only version 1 can be guessed (the configured
// columns, else the rollout schema); a record of a later version was
// checked by its frame and CRC during the scan and is counted as not
// decoded, not as damage.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

// errNotDecoded marks a record whose schema version an offline command
// cannot know: not damage.
var errNotDecoded = errors.New("wal: schema version unknown offline")

// walSchemas looks a record's schema version up, and keeps what it could
// not decode.
type walSchemas struct {
	meta       *metadata // nil: offline
	keys       shardmeta.Keys
	current    int            // the table's current version (online)
	configured *schema.Schema // the configured columns; nil when none
	cache      map[int]*schema.Schema
	offline    string // why no etcd is used; "" online
	// failed is an etcd request that failed mid-scan: not the record's
	// fault, so the scan stops with it rather than report damage.
	failed error
	// skipped counts the records not decoded, by schema version.
	skipped map[int]int
}

// openWALSchemas uses the etcd of a serve running on the data dir, or the
// configured cluster, and never starts the embedded one (its lock would
// keep a serve from starting); with neither it goes offline, saying why.
func (o *walOptions) openWALSchemas(ctx context.Context, command string, log *slog.Logger) (*walSchemas, error) {
	s := &walSchemas{keys: shardmeta.Keys{Prefix: metaPrefix, Table: o.table}, configured: o.schema,
		cache: map[int]*schema.Schema{}, skipped: map[int]int{}}
	meta, err := openMetadata(ctx, o.dataDir, o.etcd, dirUse{command: command, follow: true}, log)
	if err != nil {
		s.offline = err.Error()
		log.Debug("wal: no etcd reachable; records of schema version 2 and later are checked by CRC only", "reason", err)
		return s, nil
	}
	rctx, cancel := context.WithTimeout(ctx, meta.requestTimeout)
	cur, err := shardmeta.LoadSchema(rctx, meta.client, s.keys)
	cancel()
	switch {
	case err != nil:
		return nil, errors.Join(fmt.Errorf("table %s: read its schema record: %w", o.table, err), meta.Close())
	case cur == nil:
		s.offline = fmt.Sprintf("the etcd at hand has no schema record of table %s", o.table)
		return s, meta.Close()
	}
	s.meta, s.current = meta, cur.Version
	s.cache[cur.Version] = cur.Schema()
	return s, nil
}

// Close closes the etcd client, if any.
func (s *walSchemas) Close() error {
	if s.meta == nil {
		return nil
	}
	return s.meta.Close()
}

// lookup is the engine.SchemaLookup of the scan.
func (s *walSchemas) lookup(ctx context.Context) func(v int) (*schema.Schema, error) {
	return func(v int) (*schema.Schema, error) {
		if sch, ok := s.cache[v]; ok {
			return sch, nil
		}
		sch, err := s.load(ctx, v)
		if err == nil {
			s.cache[v] = sch
		}
		return sch, err
	}
}

func (s *walSchemas) load(ctx context.Context, v int) (*schema.Schema, error) {
	switch {
	case s.meta == nil && v > 1:
		return nil, errNotDecoded
	case s.meta == nil && s.configured != nil:
		return s.configured, nil
	case s.meta == nil:
		return schema.Rollout(), nil
	case v > s.current:
		return nil, fmt.Errorf("a record of schema version %d, and table %s is at version %d", v, s.keys.Table, s.current)
	}
	rctx, cancel := context.WithTimeout(ctx, s.meta.requestTimeout)
	defer cancel()
	rec, err := shardmeta.LoadSchemaVersion(rctx, s.meta.client, s.keys, v)
	if err == nil && rec == nil {
		err = fmt.Errorf("table %s has no schema version %d", s.keys.Table, v)
	}
	if err != nil {
		s.failed = fmt.Errorf("table %s: read schema version %d: %w", s.keys.Table, v, err)
		return nil, s.failed
	}
	return rec.Schema(), nil
}

// hint is what a decode failure of a record of version v adds offline:
// the columns it was decoded with may not be the table's version 1.
func (s *walSchemas) hint(v int) string {
	switch {
	case s.meta != nil || v > 1:
		return ""
	case s.configured != nil:
		return fmt.Sprintf(" (decoded offline with the configured columns: the configuration may declare a later schema version than the record's %d; run with --etcd-endpoints or while serve runs to decode it with its own)", max(v, 1))
	}
	return " (decoded offline with the rollout schema, as no columns are configured: the table's version 1 may have other columns; run with --etcd-endpoints or while serve runs to decode it with its own)"
}

// undecodedReport is, in `wal verify -o json`, the records of one schema
// version that were not decoded.
type undecodedReport struct {
	SchemaVersion int    `json:"schema_version"`
	Records       int    `json:"records"`
	Reason        string `json:"reason"`
}

func (s *walSchemas) undecoded() []undecodedReport {
	var out []undecodedReport
	for _, v := range slices.Sorted(maps.Keys(s.skipped)) {
		out = append(out, undecodedReport{v, s.skipped[v], "no etcd reachable: " + s.offline})
	}
	return out
}

// note says, once at the end, which records were checked by CRC only;
// "" when every record was decoded.
func (s *walSchemas) note() string {
	if len(s.skipped) == 0 {
		return ""
	}
	var parts []string
	for i, u := range s.undecoded() {
		what := "records of schema version"
		if i > 0 {
			what = "of version"
		}
		parts = append(parts, fmt.Sprintf("%d %s %d", u.Records, what, u.SchemaVersion))
	}
	return fmt.Sprintf("no etcd reachable (%s): %s were checked by CRC only, not decoded; run with --etcd-endpoints or while serve runs to decode them",
		s.offline, strings.Join(parts, ", "))
}
