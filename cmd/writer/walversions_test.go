package main

// The wal commands on a table whose schema changed: a real WAL of shard s0
// holds records of schema version 1 (kind 1) and of version 2 (kind 2).
// With the data dir's etcd reachable every record is decoded with its own
// version; offline, records of version 2 are checked by CRC only, said
// once at the end, and repair still works.

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

const versionsTable = "judged"

// versionsColumns are the table's columns in version 1 (the rollout
// schema, which a wal command without columns: decodes with) and in
// version 2 (a nullable judge added).
func versionsColumns(v int) []schema.Column {
	cols := slices.Clone(schema.Rollout().Columns)
	if v == 2 {
		cols = append(cols, schema.Column{Name: "judge", Type: schema.Float64, Nullable: true})
	}
	return cols
}

// The ids appended before and after the change, one record each.
var (
	versionOneIDs = []string{"a", "bb", "ccc"}
	versionTwoIDs = []string{"dddd", "eeeee"}
)

// writeVersionsWAL writes the WAL of shard s0 through an engine.Host on
// the data dir's embedded etcd: records of version 1, the change, records
// of version 2, each writer closed without a flush so that the WAL keeps
// them all. The etcd is left running, its endpoint recorded as a serve
// records it; the caller closes it.
func writeVersionsWAL(t *testing.T) (string, *metadata) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	m := startEmbeddedForTest(t, dir)
	life := func(v int, ids []string) {
		t.Helper()
		h, err := engine.NewHost(engine.Options{DataDir: dir, Table: versionsTable, Etcd: m.client, RequestTimeout: 5 * time.Second,
			FlushAge: -1, NoFlushOnClose: true, Schema: mustSchema(versionsColumns(v))})
		if err != nil {
			t.Fatal(err)
		}
		s, err := h.Open(ctx, "s0")
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			row := schema.Row{"id": id, "prompt": "prompt of " + id, "completion": "completion of " + id, "reward": 0.5}
			if v == 2 {
				row["judge"] = float64(len(id))
			}
			if _, err := s.Append(ctx, []schema.Row{row}, engine.Source{}); err != nil {
				t.Fatalf("append %s: %v", id, err)
			}
		}
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	life(1, versionOneIDs)
	rec, _, err := shardmeta.ApplySchema(ctx, m.client, shardmeta.Keys{Prefix: metaPrefix, Table: versionsTable},
		versionsColumns(2), false, 5*time.Second)
	if err != nil || rec.Version != 2 {
		m.Close()
		t.Fatalf("apply: %+v, %v", rec, err)
	}
	life(2, versionTwoIDs)
	return dir, m
}

// versionsConfig writes a configuration declaring the columns of version
// 2, as one does once the change is applied.
func versionsConfig(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "v2.yaml")
	writeTestFile(t, path, "data_dir: "+dir+"\ntable: "+versionsTable+"\ncolumns:\n"+
		"  - {name: prompt, type: string}\n  - {name: completion, type: string}\n"+
		"  - {name: reward, type: float64, nullable: true}\n  - {name: metadata, type: json, nullable: true}\n"+
		"  - {name: judge, type: float64, nullable: true}\n")
	return path
}

func walArgs(dir string, args ...string) []string {
	return append(append([]string{"wal"}, args...), "--data-dir", dir, "--table", versionsTable, "--shard", "s0", "--log-level", "error")
}

// dumpJSON parses `wal dump -o json` (skipping the note lines).
func dumpJSON(t *testing.T, out string) []dumpRecord {
	t.Helper()
	var recs []dumpRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "{") {
			continue
		}
		var d dumpRecord
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("dump line %q: %v", sc.Text(), err)
		}
		recs = append(recs, d)
	}
	return recs
}

// TestWALDecodesEachSchemaVersion: with the data dir's etcd reachable (a
// serve's, found through its endpoint record, or --etcd-endpoints), verify
// passes and dump --rows decodes every row with its record's version,
// whether the configuration declares no columns (version 1's) or version
// 2's: rows of version 2 have judge, rows of version 1 do not.
func TestWALDecodesEachSchemaVersion(t *testing.T) {
	dir, m := writeVersionsWAL(t)
	defer m.Close()
	cases := [][]string{nil, {"--config", versionsConfig(t, dir)}, {"--etcd-endpoints", strings.Join(m.embedded.Endpoints(), ",")}}
	for i, cfg := range cases {
		if i == len(cases)-1 { // no endpoint record: only the flag finds the etcd
			if err := os.Remove(endpointFile(dir)); err != nil {
				t.Fatal(err)
			}
		}
		out, err := run(t, append(walArgs(dir, "verify"), cfg...)...)
		if err != nil || !strings.Contains(out, "5 records") || !strings.HasSuffix(out, ": ok\n") {
			t.Fatalf("verify %v: %v\n%s", cfg, err, out)
		}
		out, err = run(t, append(walArgs(dir, "dump", "--rows", "-o", "json"), cfg...)...)
		if err != nil || strings.Contains(out, "note:") {
			t.Fatalf("dump %v: %v\n%s", cfg, err, out)
		}
		versions := map[int]int{}
		rows := map[string]map[string]any{}
		for _, d := range dumpJSON(t, out) {
			versions[d.SchemaVersion]++
			if d.NotDecoded || len(d.Data) != int(d.Rows) {
				t.Errorf("dump %v: record at %s:%d not decoded: %+v", cfg, d.Segment, d.Offset, d)
			}
			for _, row := range d.Data {
				rows[row["id"].(string)] = row
			}
		}
		if versions[1] != len(versionOneIDs) || versions[2] != len(versionTwoIDs) {
			t.Fatalf("dump %v: records by schema version %v; want %d of 1 and %d of 2\n%s", cfg, versions, len(versionOneIDs), len(versionTwoIDs), out)
		}
		for _, id := range versionOneIDs {
			if row := rows[id]; row == nil || row["prompt"] != "prompt of "+id || row["judge"] != nil {
				t.Errorf("dump %v: version 1 row %s: %v", cfg, id, row)
			}
			if _, has := rows[id]["judge"]; has {
				t.Errorf("dump %v: version 1 row %s has judge: %v", cfg, id, rows[id])
			}
		}
		for _, id := range versionTwoIDs {
			if row := rows[id]; row == nil || row["prompt"] != "prompt of "+id || row["judge"] != float64(len(id)) {
				t.Errorf("dump %v: version 2 row %s: %v; want judge %d", cfg, id, row, len(id))
			}
		}
	}
}

// TestWALOfflineChecksLaterVersionsByCRC: with no etcd reachable, verify
// and dump pass; records of version 2 are not decoded but counted, and a
// note at the end says so once; dump prints their header lines without
// rows. With a configuration of version 2's columns, the version 1 records
// do not decode: damage, with the hint that the configuration may be of a
// later version than the records.
func TestWALOfflineChecksLaterVersionsByCRC(t *testing.T) {
	dir, m := writeVersionsWAL(t)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	const note = "note: no etcd reachable"
	const counted = "2 records of schema version 2 were checked by CRC only"
	out, err := run(t, walArgs(dir, "verify")...)
	if err != nil || !strings.Contains(out, "5 records") || !strings.Contains(out, ": ok\n") ||
		strings.Count(out, note) != 1 || !strings.Contains(out, counted) || !strings.Contains(out, "--etcd-endpoints") {
		t.Fatalf("verify offline: %v\n%s", err, out)
	}
	out, err = run(t, walArgs(dir, "verify", "-o", "json")...)
	var vr verifyReport
	if err != nil || json.Unmarshal([]byte(out), &vr) != nil || !vr.OK || vr.Corruption != nil ||
		len(vr.Undecoded) != 1 || vr.Undecoded[0].SchemaVersion != 2 || vr.Undecoded[0].Records != 2 {
		t.Fatalf("verify -o json offline: %v %+v\n%s", err, vr, out)
	}

	out, err = run(t, walArgs(dir, "dump", "--rows")...)
	if err != nil || strings.Count(out, note) != 1 || !strings.Contains(out, counted) ||
		strings.Count("\n"+out, "\n# ") != 5 || strings.Count(out, "(not decoded") != 2 || strings.Count(out, `"prompt":`) != len(versionOneIDs) {
		t.Fatalf("dump --rows offline: %v\n%s", err, out)
	}
	out, err = run(t, walArgs(dir, "dump", "--rows", "-o", "json")...)
	if err != nil || strings.Count(out, note) != 1 {
		t.Fatalf("dump --rows -o json offline: %v\n%s", err, out)
	}
	for _, d := range dumpJSON(t, out) {
		switch {
		case d.SchemaVersion == 2 && (!d.NotDecoded || d.Data != nil || d.Rows != 1):
			t.Errorf("a version 2 record offline: %+v; want it not decoded, no data, the header's 1 row", d)
		case d.SchemaVersion == 1 && (d.NotDecoded || len(d.Data) != 1):
			t.Errorf("a version 1 record offline: %+v; want its row decoded", d)
		}
	}

	out, err = run(t, append(walArgs(dir, "verify"), "--config", versionsConfig(t, dir))...)
	if err == nil || !strings.Contains(err.Error(), "schema version 1") ||
		!strings.Contains(err.Error(), "the configuration may declare a later schema version than the record's 1") {
		t.Fatalf("verify offline with version 2's columns configured: %v; want damage with the hint\n%s", err, out)
	}
}

// TestWALRepairOfflineWithLaterVersions: repair cuts a torn tail of a WAL
// holding records of version 2 with no etcd reachable (its decision is
// about the tail, not the versions); verify passes afterwards.
func TestWALRepairOfflineWithLaterVersions(t *testing.T) {
	dir, m := writeVersionsWAL(t)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, walArgs(dir, "repair")...); err != nil || !strings.Contains(out, "nothing to repair") {
		t.Fatalf("repair of a whole WAL offline: %v\n%s", err, out)
	}
	walDir := filepath.Join(dir, versionsTable, "shards", "s0", "wal")
	names, err := filepath.Glob(filepath.Join(walDir, "*.wal"))
	if err != nil || len(names) == 0 {
		t.Fatalf("segments: %v %v", names, err)
	}
	slices.Sort(names)
	seg := names[len(names)-1] // the last epoch's: records of version 2
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0xff
	writeTestFile(t, seg, string(data))

	out, err := run(t, walArgs(dir, "repair", "--yes")...)
	if err != nil || !strings.Contains(out, "truncated") || !strings.Contains(out, "note: no etcd reachable") {
		t.Fatalf("repair --yes offline: %v\n%s", err, out)
	}
	if out, err := run(t, walArgs(dir, "verify")...); err != nil || !strings.Contains(out, ": ok\n") {
		t.Fatalf("verify after repair: %v\n%s", err, out)
	}
}
