package catalog

import (
	"bytes"
	"encoding/json"
	"github.com/rollwal/rollwal/internal/pyenv"
	"os/exec"
	"slices"
	"strconv"
	"testing"
)

// duckLoad is the Python prologue that opens DuckDB with the iceberg
// extension, offline: `INSTALL iceberg` downloads, so scripts/pyenv pins
// duckdb-ext-iceberg and duckdb-ext-avro (iceberg loads avro), which ship
// the extension files for duckdb 1.4.4 under site-packages
// duckdb_ext/extensions; DuckDB finds them once that is its
// extension_directory.
const duckLoad = `
import importlib.metadata, json, sys
import duckdb
ext = importlib.metadata.distribution("duckdb-ext-iceberg").locate_file("duckdb_ext/extensions")
con = duckdb.connect()
con.execute("SET extension_directory = ?", [str(ext)])
con.execute("SET autoinstall_known_extensions = false")
con.execute("SET enable_progress_bar = false")  # it prints to stdout on slow queries
con.execute("LOAD iceberg")
`

// duckRead reads the table at a metadata file (argv[1]): every row of the
// current snapshot, its count, the snapshots DuckDB sees, and the ids of
// one snapshot by id (argv[2], time travel).
const duckRead = duckLoad + `
meta, first = sys.argv[1], int(sys.argv[2])
rows = con.execute("SELECT id, prompt, _seq, _epoch FROM iceberg_scan(?) ORDER BY id", [meta]).fetchall()
(count,) = con.execute("SELECT count(*) FROM iceberg_scan(?)", [meta]).fetchone()
snaps = [s for (s,) in con.execute("SELECT snapshot_id FROM iceberg_snapshots(?) ORDER BY sequence_number", [meta]).fetchall()]
old = [i for (i,) in con.execute("SELECT id FROM iceberg_scan(?, snapshot_from_id = ?) ORDER BY id", [meta, first]).fetchall()]
types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM iceberg_scan(?))", [meta]).fetchall())
json.dump({"rows": [[i, p, str(s), str(e)] for i, p, s, e in rows], "count": count,
           "snapshots": [str(s) for s in snaps], "first_ids": old, "types": types}, sys.stdout)
`

// duckdbPython returns the interpreter that has DuckDB with the iceberg
// extension (scripts/pyenv). In CI a missing one fails the test; elsewhere
// the test skips, loudly.
func duckdbPython(t *testing.T) string {
	t.Helper()
	py := pyenv.Python(t, "DuckDB iceberg_scan interoperability")
	cmd := exec.Command(py, "-c", duckLoad)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s cannot LOAD DuckDB's iceberg extension offline (%v): run bash scripts/pyenv\n%s", py, err, out)
	}
	return py
}

// TestDuckDBReadsTable: DuckDB's iceberg_scan reads the table from its
// metadata file alone, offline: the current snapshot holds exactly the
// appended rows, the first snapshot exactly the first append's ids.
func TestDuckDBReadsTable(t *testing.T) {
	py := duckdbPython(t)
	e := newEnv(t)
	tbl, first := e.twoSnapshots()
	snaps := tbl.Metadata().Snapshots()
	if len(snaps) != 2 {
		t.Fatalf("%d snapshots after two appends", len(snaps))
	}
	var wantSnaps []string
	for _, s := range snaps {
		wantSnaps = append(wantSnaps, strconv.FormatInt(s.SnapshotID, 10))
	}

	cmd := exec.CommandContext(e.ctx, py, "-c", duckRead, tbl.MetadataLocation(), wantSnaps[0])
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("duckdb: %v\n%s", err, stderr.String())
	}
	var got struct {
		Rows      [][4]string       `json:"rows"`
		Count     int               `json:"count"`
		Snapshots []string          `json:"snapshots"`
		FirstIDs  []string          `json:"first_ids"`
		Types     map[string]string `json:"types"`
	}
	fatalIf(t, json.Unmarshal(out, &got), "duckdb output %s", out)

	var ids, gotIDs []string
	for id := range e.rows {
		ids = append(ids, id)
	}
	for _, r := range got.Rows {
		gotIDs = append(gotIDs, r[0])
	}
	slices.Sort(ids)
	slices.Sort(gotIDs)
	slices.Sort(first)
	slices.Sort(got.FirstIDs)
	if !slices.Equal(gotIDs, ids) || got.Count != len(ids) {
		t.Fatalf("duckdb read ids %v (count(*) %d); want %v (%d)", gotIDs, got.Count, ids, len(ids))
	}
	for _, r := range got.Rows {
		want := e.rows[r[0]]
		if r[1] != want.prompt || r[2] != strconv.FormatUint(want.seq, 10) || r[3] != strconv.FormatUint(want.epoch, 10) {
			t.Fatalf("duckdb read row %v, want %+v", r, want)
		}
	}
	// Iceberg's long, as the metadata says, not the files' uint64.
	if got.Types["_seq"] != "BIGINT" || got.Types["_epoch"] != "BIGINT" {
		t.Fatalf("duckdb types %v: _seq and _epoch are not BIGINT", got.Types)
	}
	if !slices.Equal(got.Snapshots, wantSnaps) {
		t.Fatalf("duckdb sees snapshots %v, want %v", got.Snapshots, wantSnaps)
	}
	if !slices.Equal(got.FirstIDs, first) {
		t.Fatalf("duckdb read the first snapshot (%s) as %v, want %v", wantSnaps[0], got.FirstIDs, first)
	}
}
