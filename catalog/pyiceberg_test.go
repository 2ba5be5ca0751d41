package catalog

import (
	"bytes"
	"encoding/json"
	"github.com/rollwal/rollwal/internal/pyenv"
	"os/exec"
	"slices"
	"testing"
)

// rollwalPython returns the interpreter that has pyiceberg (scripts/pyenv).
func rollwalPython(t *testing.T) string { return pyenv.Python(t, "pyiceberg interoperability") }

// pyRead reads the table at a metadata file with pyiceberg, offline, the
// current snapshot and the first one (time travel).
const pyRead = `
import json, sys
from pyiceberg.table import StaticTable
t = StaticTable.from_metadata(sys.argv[1])
snaps = t.metadata.snapshots
cur = t.scan().to_arrow()
old = t.scan(snapshot_id=snaps[0].snapshot_id).to_arrow()
json.dump({
    "ids": sorted(cur.column("id").to_pylist()),
    "seq_type": str(cur.schema.field("_seq").type),
    "seq_sum": sum(cur.column("_seq").to_pylist()),
    "first_ids": sorted(old.column("id").to_pylist()),
    "summary": snaps[0].summary.additional_properties,
}, sys.stdout)
`

// TestPyicebergReadsTable: pyiceberg reads the table from its metadata
// file alone: the current snapshot holds exactly the appended rows, the
// first snapshot exactly the first append's, and the summary carries the
// provenance.
func TestPyicebergReadsTable(t *testing.T) {
	py := rollwalPython(t)
	e := newEnv(t)
	tbl, first := e.twoSnapshots()

	cmd := exec.CommandContext(e.ctx, py, "-c", pyRead, tbl.MetadataLocation())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyiceberg: %v\n%s", err, stderr.String())
	}
	var got struct {
		IDs      []string          `json:"ids"`
		SeqType  string            `json:"seq_type"`
		SeqSum   uint64            `json:"seq_sum"`
		FirstIDs []string          `json:"first_ids"`
		Summary  map[string]string `json:"summary"`
	}
	fatalIf(t, json.Unmarshal(out, &got), "pyiceberg output %s", out)
	var ids []string
	var seqSum uint64
	for id, r := range e.rows {
		ids, seqSum = append(ids, id), seqSum+r.seq
	}
	slices.Sort(ids)
	slices.Sort(first)
	// _seq is long in Iceberg; pyiceberg 0.12 hands on the files' physical
	// uint64 instead of casting (iceberg-go casts to int64).
	if !slices.Equal(got.IDs, ids) || got.SeqSum != seqSum || (got.SeqType != "int64" && got.SeqType != "uint64") {
		t.Fatalf("pyiceberg read ids %v (_seq %s, sum %d); want %v (sum %d)", got.IDs, got.SeqType, got.SeqSum, ids, seqSum)
	}
	if !slices.Equal(got.FirstIDs, first) {
		t.Fatalf("pyiceberg read the first snapshot as %v, want %v", got.FirstIDs, first)
	}
	if got.Summary["rollwal.shard.s0.generations"] != "1-1" || got.Summary["rollwal.shard.s0.epochs"] != "2" {
		t.Fatalf("pyiceberg summary %v", got.Summary)
	}
}
