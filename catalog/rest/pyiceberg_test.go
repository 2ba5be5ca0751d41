package rest

import (
	"bytes"
	"encoding/json"
	"github.com/rollwal/rollwal/internal/pyenv"
	"os/exec"
	"slices"
	"testing"
)

// rollwalPython returns the interpreter that has pyiceberg (scripts/pyenv).
func rollwalPython(t *testing.T) string { return pyenv.Python(t, "pyiceberg's REST client") }

// pyREST loads the table through pyiceberg's REST catalog, with the bearer
// token, scans it, and tries a write (refused by the client itself: the
// server does not advertise it).
const pyREST = `
import json, sys
from pyiceberg.catalog import load_catalog
uri, name, token = sys.argv[1:4]
cat = load_catalog("x", **{"type": "rest", "uri": uri, "token": token})
t = cat.load_table("rollwal." + name)
a = t.scan().to_arrow()
try:
    cat.create_namespace("other")
    refused = ""
except Exception as e:
    refused = type(e).__name__
json.dump({
    "namespaces": [list(n) for n in cat.list_namespaces()],
    "tables": [list(i) for i in cat.list_tables("rollwal")],
    "exists": cat.table_exists("rollwal." + name),
    "missing_exists": cat.table_exists("rollwal.nope"),
    "location": t.metadata_location,
    "ids": sorted(a.column("id").to_pylist()),
    "seq_sum": sum(a.column("_seq").to_pylist()),
    "refused": refused,
}, sys.stdout)
`

// TestRESTLoadsTableWithPyiceberg: pyiceberg's REST client, with the
// token, lists rollwal and its table, loads rollwal.t at the record's
// metadata location and scans exactly the ids appended.
func TestRESTLoadsTableWithPyiceberg(t *testing.T) {
	py := rollwalPython(t)
	const tok = "admin-token-0123456789"
	e := newEnv(t, Options{Tokens: []string{tok}})
	e.fill()

	cmd := exec.CommandContext(e.ctx, py, "-c", pyREST, e.srv.URL, e.ident[1], tok)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyiceberg: %v\n%s", err, stderr.String())
	}
	var got struct {
		Namespaces    [][]string `json:"namespaces"`
		Tables        [][]string `json:"tables"`
		Exists        bool       `json:"exists"`
		MissingExists bool       `json:"missing_exists"`
		Location      string     `json:"location"`
		IDs           []string   `json:"ids"`
		SeqSum        uint64     `json:"seq_sum"`
		Refused       string     `json:"refused"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("pyiceberg output %s: %v", out, err)
	}
	var ids []string
	var seqSum uint64
	for id, r := range e.rows {
		ids, seqSum = append(ids, id), seqSum+r.seq
	}
	slices.Sort(ids)
	if !slices.Equal(got.IDs, ids) || got.SeqSum != seqSum {
		t.Fatalf("pyiceberg scanned ids %v (_seq sum %d); want %v (sum %d)", got.IDs, got.SeqSum, ids, seqSum)
	}
	if len(got.Namespaces) != 1 || !slices.Equal(got.Namespaces[0], []string{"rollwal"}) ||
		len(got.Tables) != 1 || !slices.Equal(got.Tables[0], []string(e.ident)) || !got.Exists || got.MissingExists {
		t.Fatalf("pyiceberg listed %v / %v, exists %v, missing exists %v", got.Namespaces, got.Tables, got.Exists, got.MissingExists)
	}
	if want := e.location(); got.Location != want {
		t.Fatalf("pyiceberg loaded %s, want the record's %s", got.Location, want)
	}
	if got.Refused != "NotImplementedError" {
		t.Fatalf("pyiceberg create_namespace: %q, want NotImplementedError (the endpoint is not advertised)", got.Refused)
	}
}
