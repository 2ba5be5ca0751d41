package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollwal/rollwal/internal/pyenv"
)

// TestTwoTablesOneServe: one serve hosts two tables of different columns
// (tables:), each fed through its own route (and the first through the
// shorthand route too); one merge publishes both; each base holds exactly
// its own rows, with its own columns.
func TestTwoTablesOneServe(t *testing.T) {
	py := pyenv.Python(t, "what the two tables' bases hold")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "writer.yaml")
	cfg := fmt.Sprintf(`data_dir: %s
listen: 127.0.0.1:0
tables:
  - name: rollouts
  - name: tokens
    shards: [t0, t1]
    columns:
      - {name: tokens, type: "list<int32>"}
      - {name: score, type: float32, nullable: true}
`, filepath.Join(dir, "data"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "config", "check", "--config", cfgPath); err != nil || !strings.Contains(out, "name: tokens") {
		t.Fatalf("config check: %v\n%s", err, out)
	}
	p := startServe(t, "--config", cfgPath)
	post := func(path, body string, want int) {
		t.Helper()
		if code, resp := httpDo(t, "POST", p.url(path), "application/x-ndjson", body); code != want {
			t.Fatalf("POST %s: %d %s; want %d", path, code, resp, want)
		}
	}
	rollout := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"prompt":"p","completion":"c"}`+"\n", id)
	}
	tokens := func(id string, n int) string {
		return fmt.Sprintf(`{"id":%q,"tokens":[%d,%d,%d],"score":0.5}`+"\n", id, n, n+1, n+2)
	}
	post("/v1/tables/rollouts/shards/default/rows", rollout("r1")+rollout("r2"), http.StatusOK)
	post("/v1/shards/default/rows", rollout("r3"), http.StatusOK) // the shorthand: the first table
	post("/v1/tables/tokens/shards/t0/rows", tokens("k1", 1)+tokens("k2", 2), http.StatusOK)
	post("/v1/tables/tokens/shards/t1/rows", tokens("k3", 3), http.StatusOK)
	post("/v1/tables/tokens/shards/t0/rows", rollout("bad"), http.StatusBadRequest) // the other table's columns
	post("/v1/tables/nope/shards/t0/rows", tokens("k9", 9), http.StatusNotFound)
	post("/v1/tables/rollouts/shards/t0/rows", rollout("r9"), http.StatusNotFound) // t0 is the other table's shard
	code, body := httpDo(t, "GET", p.url("/v1/tables"), "", "")
	if code != http.StatusOK || !strings.Contains(string(body), "tokens") || !strings.Contains(string(body), "rollouts") {
		t.Fatalf("GET /v1/tables: %d %s", code, body)
	}
	p.signal(t, syscall.SIGTERM)
	if err := p.wait(t, time.Minute); err != nil {
		t.Fatalf("serve: %v", err)
	}
	out, err := run(t, "merge", "--config", cfgPath, "-o", "json")
	if err != nil {
		t.Fatalf("merge: %v\n%s", err, out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	merged := map[string]int64{}
	for dec.More() {
		var rep mergeReport
		if err := dec.Decode(&rep); err != nil {
			t.Fatalf("merge report: %v\n%s", err, out)
		}
		merged[rep.Table] = rep.Base.Rows
	}
	if merged["rollouts"] != 3 || merged["tokens"] != 3 {
		t.Fatalf("merged %v; want 3 rows in each table", merged)
	}
	// The REST catalog of a serve of both tables lists and loads both.
	rp := startServe(t, "--config", cfgPath, "--iceberg-rest-listen", "127.0.0.1:0")
	rec := rp.find(msgIcebergREST)
	if rec == nil {
		t.Fatalf("no %q logged", msgIcebergREST)
	}
	restURL := "http://" + rec["addr"].(string)
	code, body = httpDo(t, "GET", restURL+"/v1/namespaces/rollwal/tables", "", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"name":"rollouts"`) || !strings.Contains(string(body), `"name":"tokens"`) {
		t.Fatalf("REST tables: %d %s", code, body)
	}
	for _, table := range []string{"rollouts", "tokens"} {
		if code, body := httpDo(t, "GET", restURL+"/v1/namespaces/rollwal/tables/"+table, "", ""); code != http.StatusOK || !strings.Contains(string(body), "metadata-location") {
			t.Fatalf("REST load %s: %d %.300s", table, code, body)
		}
	}
	rp.signal(t, syscall.SIGTERM)
	if err := rp.wait(t, time.Minute); err != nil {
		t.Fatalf("serve: %v", err)
	}
	for table, want := range map[string]string{
		"rollouts": `[["r1", "r2", "r3"], ["completion", "id", "metadata", "prompt", "reward"]]`,
		"tokens":   `[["k1", "k2", "k3"], ["id", "score", "tokens"]]`,
	} {
		got := readTableWithPyarrow(t, py, filepath.Join(dir, "data", table, "base"))
		if got != want {
			t.Errorf("table %s: pyarrow read %s; want %s", table, got, want)
		}
	}
}

// readTableWithPyarrow returns the sorted ids and user column names of a
// base, as pyarrow reads the files of its latest readers' manifest.
func readTableWithPyarrow(t *testing.T, py, baseDir string) string {
	t.Helper()
	const script = `
import glob, json, os, sys
import pyarrow.dataset as ds
base = sys.argv[1]
m = json.load(open(max(glob.glob(os.path.join(base, "_manifest", "*.json")))))
tb = ds.dataset([os.path.join(base, f["path"]) for f in m["files"]]).to_table()
cols = sorted(c for c in tb.column_names if not c.startswith("_"))
print(json.dumps([sorted(tb.column("id").to_pylist()), cols]))
`
	out, err := exec.Command(py, "-c", script, baseDir).CombinedOutput()
	if err != nil {
		t.Fatalf("pyarrow on %s: %v\n%s", baseDir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestTablesConfigRefused: a bad tables: section is refused by config
// check naming the key, and --table must name one of the tables.
func TestTablesConfigRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ yaml, want string }{
		{"tables: [{name: a}, {name: a}]", `tables[1].name "a": is the name of another table`},
		{"tables: [{name: a/b}]", "tables[0].name"},
		{"tables: [{name: a, shards: [x, x]}]", `"x" named twice`},
		{`tables: [{name: a, columns: [{name: c, type: "list<list<int32>>"}]}]`, "not supported"},
		{"memory_budget: 268435456\ntables: [{name: a, memory_budget: 201326592}, {name: b, memory_budget: 201326592}]", "add up to"},
		{"tables: [{name: a, flush_bites: 1}]", "flush_bites"},
		{"columns:\n" + manyColumns(100), "more than 262144"},
	} {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := run(t, "config", "check", "--config", path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v\n%s; want an error with %q", tc.yaml, err, out, tc.want)
		}
	}
	// At the defaults, any number of tables fits: the budget grows to what
	// they need.
	five := filepath.Join(dir, "five.yaml")
	if err := os.WriteFile(five, []byte("tables: [{name: a}, {name: b}, {name: c}, {name: d}, {name: e, flush_bytes: 268435456}]"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "config", "check", "--config", five); err != nil || !strings.Contains(out, "memory_budget: 1073741824") {
		t.Errorf("five tables at the defaults: %v\n%s", err, out)
	}
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte("tables: [{name: a}, {name: b}]"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "merge", "--config", path, "--data-dir", dir, "--table", "c"); err == nil || !strings.Contains(err.Error(), "--table c: not a table of the configuration (tables: a, b)") {
		t.Errorf("merge --table c: %v", err)
	}
}

// TestMergeTakesTheRecordedColumns: a table written with columns of its
// own (generate --schema rl) is merged by a merge given no columns: the
// table's schema record names them.
func TestMergeTakesTheRecordedColumns(t *testing.T) {
	py := pyenv.Python(t, "the columns of the merged base")
	dir := t.TempDir()
	if out, err := run(t, "generate", "--schema", "rl", "--data-dir", dir, "--rows", "40", "--shards", "1"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := run(t, "merge", "--data-dir", dir); err != nil {
		t.Fatalf("merge: %v\n%s", err, out)
	}
	got := readTableWithPyarrow(t, py, filepath.Join(dir, "rollouts", "base"))
	if !strings.Contains(got, `["created_at", "env", "id", "logprobs", "messages", "policy_version", "prompt_tokens", "response_tokens", "reward"]`) {
		t.Fatalf("base read as %.300s", got)
	}
}

// manyColumns declares n columns with long docs: more than a schema record
// holds.
func manyColumns(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "  - {name: c%d, type: int32, doc: %s}\n", i, strings.Repeat("d", 4000))
	}
	return b.String()
}

// TestConfigCheckShowsColumns: config check prints configured columns as
// settings, and otherwise the columns a new table gets, as comments (so
// that its output, read back, still configures none).
func TestConfigCheckShowsColumns(t *testing.T) {
	dir := t.TempDir()
	out, err := run(t, "config", "check")
	if err != nil || !strings.Contains(out, "# columns: not set") || !strings.Contains(out, "#     - name: prompt") {
		t.Fatalf("config check without columns: %v\n%s", err, out)
	}
	again := filepath.Join(dir, "again.yaml")
	if err := os.WriteFile(again, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if out2, err := run(t, "config", "check", "--config", again); err != nil || out2 != out {
		t.Fatalf("config check of its own output: %v\n%s", err, out2)
	}
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte(`columns: [{name: tokens, type: "list<int32>"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "config", "check", "--config", cfg)
	if err != nil || !strings.Contains(out, "columns:\n  - name: tokens\n    type: list<int32>") || strings.Contains(out, "# columns") {
		t.Fatalf("config check with columns: %v\n%s", err, out)
	}
}
