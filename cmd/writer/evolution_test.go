package main

// Schema evolution without downtime: `writer schema apply` and `writer
// schema show`, their flag errors, and TestSchemaEvolutionWhileServing on
// real processes (the helpers that start and watch them are in
// process_test.go and datadir_process_test.go).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/rollwal/rollwal/internal/arrowtest"
	"github.com/rollwal/rollwal/internal/pyenv"
	"github.com/rollwal/rollwal/server"
)

// TestSchemaCommandFlags: bad flags, arguments and configurations are
// refused before any etcd is touched, each naming what is wrong.
func TestSchemaCommandFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		writeTestFile(t, path, text)
		return path
	}
	none := write("none.yaml", "data_dir: "+dir+"\n")
	cols := write("cols.yaml", "data_dir: "+dir+"\ncolumns: [{name: score, type: int32}]\n")
	tables := write("tables.yaml", "data_dir: "+dir+"\ntables:\n  - name: a\n  - name: b\n    columns: [{name: score, type: int32}]\n")
	bad := write("bad.yaml", "data_dir: "+dir+"\ncolumns: [{name: score, type: int33}]\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"schema", "apply"}, "--config FILE is required"},
		{[]string{"schema", "apply", "--config", cols, "extra"}, `unknown command "extra"`},
		{[]string{"schema", "apply", "--config", cols, "--dry-rn"}, "unknown flag: --dry-rn"},
		{[]string{"schema", "apply", "--config", cols, "-o", "yaml"}, `--output "yaml": want table or json`},
		{[]string{"schema", "apply", "--config", none}, "declares no columns"},
		{[]string{"schema", "apply", "--config", tables, "--table", "a"}, "--table a: the configuration declares no columns: for it"},
		{[]string{"schema", "apply", "--config", tables, "--table", "c"}, "--table c: not a table of the configuration (tables: a, b)"},
		{[]string{"schema", "apply", "--config", bad}, "int33"},
		{[]string{"schema", "apply", "--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		{[]string{"schema", "show", "--version", "-1", "--data-dir", dir}, "--version -1: want a version number"},
		{[]string{"schema", "show", "--version", "x"}, `invalid argument "x" for "--version"`},
		{[]string{"schema", "show", "-o", "table"}, `--output "table": want yaml or json`},
		{[]string{"schema", "show", "v2"}, `unknown command "v2"`},
		{[]string{"schema", "show", "--config", tables, "--version", "2"}, "--version 2: give --table too, the configuration has 2 tables"},
		{[]string{"schema", "show", "--data-dir", filepath.Join(dir, "nope")}, "nope"},
		// Without a running serve, apply fails rather than start the
		// embedded etcd itself.
		{[]string{"schema", "apply", "--config", cols}, "never starts the embedded one"},
	} {
		out, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("writer %s: %v\n%s; want an error with %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("schema apply without a serve started the embedded etcd: %v", err)
	}
	for _, args := range [][]string{{"schema", "--help"}, {"schema", "apply", "--help"}, {"schema", "show", "--help"}} {
		if out, err := run(t, args...); err != nil || !strings.Contains(out, "renamed_from") && !strings.Contains(out, "--version") && !strings.Contains(out, "--dry-run") {
			t.Errorf("writer %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestSchemaApplyShow: apply and show in-process against a data dir's
// embedded etcd (as a running serve would have it): the first apply of a
// table records version 1, a change makes version 2 with its change lines
// (a dry run first writes nothing), the same columns again change nothing,
// a refused change names the column and writes nothing, and show prints
// any kept version with its field ids.
func TestSchemaApplyShow(t *testing.T) {
	dir := t.TempDir()
	m := startEmbeddedForTest(t, dir)
	defer m.Close()
	write := func(name, columns string) string {
		path := filepath.Join(dir, name)
		writeTestFile(t, path, fmt.Sprintf("data_dir: %s\ntable: judged\ncolumns:\n%s", dir, columns))
		return path
	}
	v1 := write("v1.yaml", "  - {name: score, type: int32}\n  - {name: text, type: string}\n")
	v2 := write("v2.yaml", "  - {name: score, type: int64}\n  - {name: text, type: string}\n  - {name: judge, type: float64, nullable: true}\n")
	renamed := write("v3.yaml", "  - {name: score, type: int64}\n  - {name: body, type: string, renamed_from: text}\n  - {name: judge, type: float64, nullable: true}\n")
	refused := write("bad.yaml", "  - {name: score, type: string}\n  - {name: text, type: string}\n  - {name: judge, type: float64, nullable: true}\n")

	mustRun := func(args ...string) string {
		t.Helper()
		out, err := run(t, args...)
		if err != nil {
			t.Fatalf("writer %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	version := func() int {
		t.Helper()
		var rec schemaShown
		out := mustRun("schema", "show", "--data-dir", dir, "--table", "judged", "-o", "json")
		if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.SchemaRecord == nil {
			t.Fatalf("schema show -o json: %v\n%s", err, out)
		}
		return rec.Version
	}

	if out := mustRun("schema", "apply", "--config", v1); !strings.Contains(out, "table judged: no schema record → version 1") {
		t.Fatalf("first apply:\n%s", out)
	}
	out := mustRun("schema", "apply", "--config", v2, "--dry-run")
	if !strings.Contains(out, "table judged: schema version 1 → 2 (dry run: nothing written)") || !strings.Contains(out, "judge") || !strings.Contains(out, "score") {
		t.Fatalf("dry run:\n%s", out)
	}
	if v := version(); v != 1 {
		t.Fatalf("after a dry run the table is at version %d; want 1", v)
	}
	out = mustRun("schema", "apply", "--config", v2)
	if !strings.Contains(out, "table judged: schema version 1 → 2\n") || !strings.Contains(out, "judge") || !strings.Contains(out, "score") {
		t.Fatalf("apply:\n%s", out)
	}
	if out := mustRun("schema", "apply", "--config", v2); !strings.Contains(out, "table judged: schema version 2: no change") {
		t.Fatalf("apply again:\n%s", out)
	}
	if out, err := run(t, "schema", "apply", "--config", refused); err == nil || !strings.Contains(err.Error(), `score`) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("a refused change: %v\n%s", err, out)
	}
	if v := version(); v != 2 {
		t.Fatalf("after a refused change the table is at version %d; want 2", v)
	}
	out = mustRun("schema", "apply", "--config", renamed, "-o", "json")
	var applied schemaApplied
	if err := json.Unmarshal([]byte(out), &applied); err != nil || applied.Before != 2 || applied.After != 3 || len(applied.Changes) == 0 {
		t.Fatalf("rename, -o json: %v %+v\n%s", err, applied, out)
	}

	shown := mustRun("schema", "show", "--config", renamed)
	for _, want := range []string{"table: judged", "version: 3", "- name: body", "field id", "formerly text", "- name: judge"} {
		if !strings.Contains(shown, want) {
			t.Errorf("schema show does not say %q:\n%s", want, shown)
		}
	}
	old := mustRun("schema", "show", "--data-dir", dir, "--table", "judged", "--version", "1")
	if !strings.Contains(old, "version: 1") || !strings.Contains(old, "type: int32") || strings.Contains(old, "name: judge") {
		t.Errorf("schema show --version 1:\n%s", old)
	}
	if out, err := run(t, "schema", "show", "--data-dir", dir, "--table", "judged", "--version", "9"); err == nil || !strings.Contains(err.Error(), "at schema version 3") {
		t.Errorf("schema show --version 9: %v\n%s", err, out)
	}
	if out, err := run(t, "schema", "show", "--data-dir", dir, "--table", "other"); err == nil || !strings.Contains(err.Error(), "table other has no schema record") {
		t.Errorf("schema show of a table without a record: %v\n%s", err, out)
	}
}

// ---- schema evolution while serving ----

// evoRow is a row the evolution test sends, as it must read back.
type evoRow struct {
	id    string
	score int64
	text  string
	judge *float64 // nil: null (old-schema rows, and some new ones)
}

// evoProducer posts rows of one schema to one writer's shard until told
// to stop (old schema) or for a number of batches (new schema).
type evoProducer struct {
	name   string
	base   string // the writer's URL
	shard  string
	arrow  bool // Arrow IPC, else NDJSON
	judged bool // the new schema: judge, and scores beyond int32
	rng    *rand.Rand
}

// rows makes the next batch.
func (p *evoProducer) rows(batch, n int) []evoRow {
	rows := make([]evoRow, n)
	for i := range rows {
		r := evoRow{id: fmt.Sprintf("%s-b%d-r%d", p.name, batch, i), text: fmt.Sprintf("text %d of %s", i, p.name)}
		if p.judged {
			r.score = p.rng.Int64N(1<<41) - 1<<40 // mostly beyond int32
			if p.rng.IntN(5) > 0 {
				j := p.rng.NormFloat64() * 10
				r.judge = &j
			}
		} else {
			r.score = int64(int32(p.rng.Uint32()))
		}
		rows[i] = r
	}
	return rows
}

// body encodes rows as NDJSON or as one Arrow IPC stream of the
// producer's schema, and returns it with its content type.
func (p *evoProducer) body(t *testing.T, rows []evoRow) (string, string) {
	if !p.arrow {
		var b strings.Builder
		for i, r := range rows {
			fmt.Fprintf(&b, `{"id":%q,"score":%d,"text":%q`, r.id, r.score, r.text)
			switch {
			case r.judge != nil:
				fmt.Fprintf(&b, `,"judge":%s`, strconv.FormatFloat(*r.judge, 'g', -1, 64))
			case p.judged && i%2 == 0:
				b.WriteString(`,"judge":null`) // else left out: null too
			}
			b.WriteString("}\n")
		}
		return b.String(), server.ContentTypeNDJSON
	}
	fields := []arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "score", Type: arrow.PrimitiveTypes.Int32},
		{Name: "text", Type: arrow.BinaryTypes.String}}
	if p.judged {
		fields[1].Type = arrow.PrimitiveTypes.Int64
		fields = append(fields, arrow.Field{Name: "judge", Type: arrow.PrimitiveTypes.Float64, Nullable: true})
	}
	sc := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		arrowtest.Append(t, b.Field(0), r.id)
		if p.judged {
			arrowtest.Append(t, b.Field(1), r.score)
			if r.judge != nil {
				arrowtest.Append(t, b.Field(3), *r.judge)
			} else {
				arrowtest.Append(t, b.Field(3), nil)
			}
		} else {
			arrowtest.Append(t, b.Field(1), int32(r.score))
		}
		arrowtest.Append(t, b.Field(2), r.text)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	return string(arrowtest.Stream(t, sc, []arrow.RecordBatch{rec})), server.ContentTypeArrow
}

// evoLedger is the ledger of the evolution test and what each row sent
// holds.
type evoLedger struct {
	*ledger
	mu   sync.Mutex
	sent map[string]evoRow
}

func (l *evoLedger) post(t *testing.T, c *http.Client, p *evoProducer, rows []evoRow) (int, string, error) {
	body, ctype := p.body(t, rows)
	ids := make([]string, len(rows))
	l.mu.Lock()
	for i, r := range rows {
		ids[i] = r.id
		l.sent[r.id] = r
	}
	l.mu.Unlock()
	code, b, err := tryDo(c, http.MethodPost, p.base+"/v1/shards/"+p.shard+"/rows", ctype, body)
	switch {
	case err == nil && code == http.StatusOK:
		if res, derr := appendResponse(b); derr != nil || res.Acked != len(rows) {
			l.record(ids, unknown)
			return code, string(b), fmt.Errorf("200 answered %s for %d rows", b, len(rows))
		}
		l.record(ids, acked)
	case err == nil && code == http.StatusBadRequest: // nothing written
	default:
		l.record(ids, unknown)
	}
	return code, string(b), err
}

// produceOld posts old-schema batches until stop is closed; afterApply
// counts the rows acknowledged once applied is closed.
func (l *evoLedger) produceOld(t *testing.T, p *evoProducer, stop, applied <-chan struct{}, afterApply *atomic.Int64) {
	c := &http.Client{Timeout: 30 * time.Second}
	for batch := 0; ; batch++ {
		select {
		case <-stop:
			return
		default:
		}
		after := isClosed(applied)
		rows := p.rows(batch, 25)
		code, body, err := l.post(t, c, p, rows)
		switch {
		case err == nil && code == http.StatusOK:
			if after {
				afterApply.Add(int64(len(rows)))
			}
		case err == nil && (code == http.StatusTooManyRequests || code == http.StatusConflict || code == http.StatusServiceUnavailable):
			// in doubt (recorded), or refused for now: go on
		default:
			t.Errorf("old-schema producer %s, batch %d: %d %s %v", p.name, batch, code, body, err)
			return
		}
	}
}

// produceNew posts batches of the new schema. Until the writer has picked
// the new version up it answers 400 naming a new column (judge) or the
// widened one (score, an int64 the old int32 refuses): the same batch is
// tried again, within pickup. Once one batch is acknowledged, every later
// one must be.
func (l *evoLedger) produceNew(t *testing.T, p *evoProducer, batches int, pickup time.Duration) {
	c := &http.Client{Timeout: 30 * time.Second}
	start := time.Now()
	deadline := start.Add(pickup)
	picked, refusals, fresh := false, 0, 0
	for batch := range batches {
		rows := p.rows(batch, 25)
		for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
			code, body, err := l.post(t, c, p, rows)
			if err == nil && code == http.StatusOK {
				if !picked {
					t.Logf("producer %s: the writer took the new schema after %v (%d refusals)", p.name, time.Since(start).Round(time.Millisecond), refusals)
				}
				picked = true
				break
			}
			newColumn := strings.Contains(body, "judge") || strings.Contains(body, "score")
			switch {
			case err == nil && code == http.StatusBadRequest && !picked && newColumn && time.Now().Before(deadline):
				refusals++ // the writer is still at the old version: try again
			case err == nil && code == http.StatusBadRequest && !picked && newColumn:
				t.Errorf("producer %s: the writer did not take the new schema within %v: still %d %s", p.name, pickup, code, body)
				return
			case err == nil && (code == http.StatusTooManyRequests || code == http.StatusConflict || code == http.StatusServiceUnavailable):
				fresh++ // in doubt (recorded): go on with fresh ids
				rows = p.rows(batches+fresh, 25)
			default:
				t.Errorf("new-schema producer %s, batch %d (the new version taken: %v): %d %s %v", p.name, batch, picked, code, body, err)
				return
			}
			time.Sleep(wait) // a pause between retries, bounded by deadline
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestSchemaEvolutionWhileServing: two writer processes serve one table
// (shards s0 and s1, one etcd: the first's embedded one) while producers
// send old-schema rows (score int32, text; NDJSON and Arrow) to both.
// `writer schema apply` then adds a nullable column (judge float64) and
// widens score to int64 in one version, without a restart: producers of
// the new schema are refused (400, naming the new column) only until each
// writer has taken the version, and the old-schema producers keep working
// throughout. A refused change (score to string; a new required column)
// exits 1 naming the column, and `writer schema show` still shows version
// 2. With the producers stopped, text is renamed to body (version 3).
// After a merge, pyiceberg and DuckDB read the Iceberg table with the new
// schema (judge double nullable, score long, body): every acknowledged id
// exactly once and nothing else, old rows with a null judge, the values
// sent. A writer restarted with the old columns fails closed.
func TestSchemaEvolutionWhileServing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	py := pyenv.Python(t, "what the Iceberg table reads back after the schema changed")
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	dir := t.TempDir()
	dirA, dirB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	// The merge runs on dirA and finds every shard's generations under
	// it: s1's directory is dirB's (shared storage, as a deployment
	// would mount it).
	if err := os.MkdirAll(filepath.Join(dirA, "judged", "shards"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dirB, "judged", "shards", "s1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dirB, "judged", "shards", "s1"), filepath.Join(dirA, "judged", "shards", "s1")); err != nil {
		t.Fatal(err)
	}
	const oldColumns = "  - {name: score, type: int32}\n  - {name: text, type: string}\n"
	const newColumns = "  - {name: score, type: int64}\n  - {name: text, type: string}\n  - {name: judge, type: float64, nullable: true}\n"
	config := func(name, dataDir, shard, columns, extra string) string {
		path := filepath.Join(dir, name)
		text := fmt.Sprintf("data_dir: %s\nlisten: 127.0.0.1:0\ntable: judged\nshards: [%s]\nflush_bytes: 65536\nflush_age: 500ms\nlease_ttl: 2s\n%scolumns:\n%s",
			dataDir, shard, extra, columns)
		writeTestFile(t, path, text)
		return path
	}
	cfgA := config("a.yaml", dirA, "s0", oldColumns, "")
	wa := startServe(t, "--config", cfgA)
	rec := readEndpoint(dirA)
	if !rec.found || rec.unverifiable != "" {
		t.Fatalf("the first writer's etcd endpoint: %+v", rec)
	}
	cfgB := config("b.yaml", dirB, "s1", oldColumns, fmt.Sprintf("etcd:\n  endpoints: [\"%s\"]\n", strings.Join(rec.rec.Endpoints, `", "`)))
	wb := startServe(t, "--config", cfgB)
	cfgNew := config("new.yaml", dirA, "s0", newColumns, "")
	cfgRenamed := config("renamed.yaml", dirA, "s0", strings.Replace(newColumns, "{name: text, type: string}", "{name: body, type: string, renamed_from: text}", 1), "")
	cfgString := config("string.yaml", dirA, "s0", "  - {name: score, type: string}\n  - {name: text, type: string}\n  - {name: judge, type: float64, nullable: true}\n", "")
	cfgRequired := config("required.yaml", dirA, "s0", newColumns+"  - {name: verdict, type: int32}\n", "")
	showVersion := func() int {
		t.Helper()
		out := runProc(t, secondProcessBound, "schema", "show", "--data-dir", dirA, "--table", "judged", "-o", "json").succeeded(t)
		var shown schemaShown
		if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.SchemaRecord == nil {
			t.Fatalf("schema show -o json: %v\n%s", err, out)
		}
		return shown.Version
	}
	if v := showVersion(); v != 1 {
		t.Fatalf("the table starts at schema version %d; want 1", v)
	}

	l := &evoLedger{ledger: newLedger(), sent: map[string]evoRow{}}
	stop, applied := make(chan struct{}), make(chan struct{})
	var afterApply atomic.Int64
	var olds, news sync.WaitGroup
	producer := func(name string, w *serveProc, shard string, arrow, judged bool, k uint64) *evoProducer {
		return &evoProducer{name: name, base: w.url(""), shard: shard, arrow: arrow, judged: judged, rng: rand.New(rand.NewPCG(seed, k))}
	}
	for _, p := range []*evoProducer{
		producer("old-nd-a", wa, "s0", false, false, 1), producer("old-ar-a", wa, "s0", true, false, 2),
		producer("old-nd-b", wb, "s1", false, false, 3), producer("old-ar-b", wb, "s1", true, false, 4),
	} {
		olds.Go(func() { l.produceOld(t, p, stop, applied, &afterApply) })
	}
	defer func() { // a failure stops them too
		if !isClosed(stop) {
			close(stop)
		}
		olds.Wait()
		news.Wait()
	}()
	l.waitAcked(t, 1000, 60*time.Second)
	// Before the change, rows of the new schema are refused, naming the
	// column, and nothing of them is written.
	for _, p := range []*evoProducer{
		producer("early-nd-a", wa, "s0", false, true, 21), producer("early-ar-b", wb, "s1", true, true, 22),
	} {
		code, body, err := l.post(t, &http.Client{Timeout: 30 * time.Second}, p, p.rows(0, 5))
		if err != nil || code != http.StatusBadRequest || !strings.Contains(body, "judge") && !strings.Contains(body, "score") {
			t.Fatalf("%s before the change: %d %s %v; want 400 naming judge or score", p.name, code, body, err)
		}
	}

	dry := runProc(t, secondProcessBound, "schema", "apply", "--config", cfgNew, "--dry-run").succeeded(t)
	if !strings.Contains(dry, "table judged: schema version 1 → 2 (dry run: nothing written)") {
		t.Fatalf("schema apply --dry-run:\n%s", dry)
	}
	if v := showVersion(); v != 1 {
		t.Fatalf("after a dry run the table is at schema version %d; want 1", v)
	}
	out := runProc(t, secondProcessBound, "schema", "apply", "--config", cfgNew).succeeded(t)
	close(applied)
	t.Logf("schema apply:\n%s", out)
	if !strings.Contains(out, "table judged: schema version 1 → 2\n") || !strings.Contains(out, "judge") || !strings.Contains(out, "score") {
		t.Fatalf("schema apply does not report 1 → 2 with judge and score:\n%s", out)
	}
	for _, p := range []*evoProducer{
		producer("new-nd-a", wa, "s0", false, true, 11), producer("new-ar-a", wa, "s0", true, true, 12),
		producer("new-nd-b", wb, "s1", false, true, 13), producer("new-ar-b", wb, "s1", true, true, 14),
	} {
		news.Go(func() { l.produceNew(t, p, 12, 60*time.Second) })
	}

	// Refused while everything runs: the column and the change are named,
	// and the version stays.
	runProc(t, secondProcessBound, "schema", "apply", "--config", cfgString).failed(t, "score", "string")
	runProc(t, secondProcessBound, "schema", "apply", "--config", cfgRequired).failed(t, "verdict")
	if v := showVersion(); v != 2 {
		t.Fatalf("after refused changes the table is at schema version %d; want 2", v)
	}
	shown := runProc(t, secondProcessBound, "schema", "show", "--data-dir", dirA, "--table", "judged").succeeded(t)
	if !strings.Contains(shown, "version: 2") || !strings.Contains(shown, "- name: judge") || !strings.Contains(shown, "field id") {
		t.Errorf("schema show:\n%s", shown)
	}

	news.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Old-schema rows after the new ones too, then stop.
	l.waitAcked(t, l.ackedCount()+400, 60*time.Second)
	close(stop)
	olds.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if afterApply.Load() == 0 {
		t.Fatal("no old-schema row was acknowledged after the schema changed")
	}
	// With the producers stopped, a rename (version 3): the files written
	// as text read as body through the field id.
	out = runProc(t, secondProcessBound, "schema", "apply", "--config", cfgRenamed).succeeded(t)
	if !strings.Contains(out, "table judged: schema version 2 → 3\n") || !strings.Contains(out, `rename column "text" to "body"`) {
		t.Fatalf("schema apply of a rename:\n%s", out)
	}
	wb.stop(t) // first: it uses wa's etcd
	wa.stop(t)

	// A writer restarted with the old columns fails closed naming the
	// difference; given none it would take the table's.
	runProc(t, 60*time.Second, "serve", "--config", cfgA).failed(t, "score")

	rep := merge(t, "--data-dir", dirA, "--table", "judged")
	l.mu.Lock()
	acks, doubts := len(l.acked), len(l.unknown)
	l.mu.Unlock()
	t.Logf("merged %d generations into %d rows; %d acknowledged, %d in doubt, %d old-schema rows acknowledged after the change",
		rep.Generations, rep.Base.Rows, acks, doubts, afterApply.Load())
	checkEvolvedTable(t, py, filepath.Join(dirA, "judged", "base"), l)
}

// readEvolvedScript prints the Iceberg table's schema (pyiceberg) and its
// rows as pyiceberg and DuckDB read them.
const readEvolvedScript = `
import glob, importlib.metadata, json, os, sys
import duckdb
from pyiceberg.table import StaticTable

base = sys.argv[1]
m = json.load(open(max(glob.glob(os.path.join(base, "_manifest", "*.json")))))
tbl = StaticTable.from_metadata(m["iceberg_metadata"])
res = {"schema": {f.name: {"type": str(f.field_type), "required": f.required, "id": f.field_id} for f in tbl.schema().fields}}
cols = ["id", "score", "judge", "body"]
t = tbl.scan(selected_fields=tuple(cols)).to_arrow()
res["pyiceberg"] = {"types": {f.name: str(f.type) for f in t.schema}, "rows": [[r[c] for c in cols] for r in t.to_pylist()]}
con = duckdb.connect()
con.execute("SET extension_directory = ?", [str(importlib.metadata.distribution("duckdb-ext-iceberg").locate_file("duckdb_ext/extensions"))])
con.execute("LOAD iceberg")
t = con.execute("SELECT id, score, judge, body FROM iceberg_scan(?)", [m["iceberg_metadata"]]).fetch_arrow_table()
res["duckdb"] = {"types": {f.name: str(f.type) for f in t.schema}, "rows": [[r[c] for c in cols] for r in t.to_pylist()]}
json.dump(res, sys.stdout)
`

// checkEvolvedTable reads the base as an Iceberg table and holds it to
// the ledger: the new schema, each acknowledged id once with the values
// sent, nothing that was not sent.
func checkEvolvedTable(t *testing.T, py, baseDir string, l *evoLedger) {
	t.Helper()
	cmd := exec.Command(py, "-c", readEvolvedScript, baseDir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("readers: %v\n%s", err, stderr.String())
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("readers' output: %v\n%.800s", err, out)
	}
	var fields map[string]struct {
		Type     string `json:"type"`
		Required bool   `json:"required"`
		ID       int    `json:"id"`
	}
	if err := json.Unmarshal(res["schema"], &fields); err != nil {
		t.Fatal(err)
	}
	t.Logf("the Iceberg schema: %s", res["schema"])
	for name, want := range map[string]struct {
		typ      string
		required bool
	}{"judge": {"double", false}, "score": {"long", true}, "body": {"string", true}} {
		if f, ok := fields[name]; !ok || f.Type != want.typ || f.Required != want.required {
			t.Errorf("the Iceberg schema has %s as %+v; want %s, required %v", name, f, want.typ, want.required)
		}
	}
	if _, ok := fields["text"]; ok {
		t.Errorf("the Iceberg schema still has text, renamed to body")
	}
	for _, reader := range []string{"pyiceberg", "duckdb"} {
		checkEvolvedRows(t, reader, res[reader], l)
	}
}

func checkEvolvedRows(t *testing.T, reader string, raw json.RawMessage, l *evoLedger) {
	t.Helper()
	var rd struct {
		Types map[string]string `json:"types"`
		Rows  [][]any           `json:"rows"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // scores beyond 2^53 stay exact
	if err := dec.Decode(&rd); err != nil {
		t.Fatalf("%s: %v", reader, err)
	}
	if rd.Types["score"] != "int64" || rd.Types["judge"] != "double" || rd.Types["body"] != "string" {
		t.Errorf("%s reads score as %s, judge as %s and body as %s; want int64, double and string", reader, rd.Types["score"], rd.Types["judge"], rd.Types["body"])
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ledger.mu.Lock()
	defer l.ledger.mu.Unlock()
	var errs []string
	report := func(format string, args ...any) {
		if len(errs) < 10 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	seen := map[string]int{}
	judged := 0
	for _, r := range rd.Rows {
		id, _ := r[0].(string)
		seen[id]++
		want, ok := l.sent[id]
		switch {
		case seen[id] > 1:
			report("id %s read %d times", id, seen[id])
			continue
		case !ok || !l.acked[id] && !l.unknown[id]:
			report("id %s is in the table, but was never posted (or was refused)", id)
			continue
		}
		if got := fmt.Sprint(r[1]); got != strconv.FormatInt(want.score, 10) {
			report("id %s: score %s; sent %d", id, got, want.score)
		}
		if got, _ := r[3].(string); got != want.text {
			report("id %s: body (formerly text) %q; sent %q", id, got, want.text)
		}
		switch {
		case want.judge == nil && r[2] != nil:
			report("id %s: judge %v; sent none (null)", id, r[2])
		case want.judge != nil && r[2] == nil:
			report("id %s: judge null; sent %v", id, *want.judge)
		case want.judge != nil:
			judged++
			if got, err := r[2].(json.Number).Float64(); err != nil || got != *want.judge {
				report("id %s: judge %v; sent %v", id, r[2], *want.judge)
			}
		}
	}
	missing := 0
	for id := range l.acked {
		if seen[id] == 0 {
			missing++
			report("acknowledged id %s is not in the table", id)
		}
	}
	if len(errs) > 0 {
		t.Errorf("%s read %d rows (%d acknowledged ids missing):\n%s", reader, len(rd.Rows), missing, strings.Join(errs, "\n"))
		return
	}
	if judged == 0 {
		t.Errorf("%s read no row with a judge value", reader)
	}
	t.Logf("%s read %d rows with the new schema, %d with a judge value; every acknowledged id once, values as sent", reader, len(rd.Rows), judged)
}

// TestReadmeSchemaEvolution: the columns of the README's "Schema
// evolution" apply to the table they evolve (score int32, text string) as
// one version with the change lines the README quotes.
func TestReadmeSchemaEvolution(t *testing.T) {
	lines, first := readmeSection(t, "### Schema evolution")
	start := slices.Index(lines, "```yaml")
	if start < 0 {
		t.Fatalf("README line %d: the Schema evolution section has no ```yaml block", first)
	}
	end := slices.Index(lines[start+1:], "```")
	if end < 0 {
		t.Fatalf("README line %d: the yaml block has no closing fence", first+start)
	}
	columns := strings.Join(lines[start+1:start+1+end], "\n") + "\n"
	dir := t.TempDir()
	m := startEmbeddedForTest(t, dir)
	defer m.Close()
	before := filepath.Join(dir, "before.yaml")
	writeTestFile(t, before, fmt.Sprintf("data_dir: %s\ntable: judged\ncolumns:\n  - {name: score, type: int32}\n  - {name: text, type: string}\n", dir))
	after := filepath.Join(dir, "after.yaml")
	writeTestFile(t, after, fmt.Sprintf("data_dir: %s\ntable: judged\n%s", dir, columns))
	if out, err := run(t, "schema", "apply", "--config", before); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := run(t, "schema", "apply", "--config", after)
	if err != nil {
		t.Fatalf("the README's columns (line %d): %v\n%s", first+start+1, err, out)
	}
	for _, want := range []string{"table judged: schema version 1 → 2\n", `widen column "score" from int32 to int64`,
		`add column "judge" (float64, nullable)`, `rename column "text" to "body"`} {
		if !strings.Contains(out, want) {
			t.Errorf("schema apply of the README's columns does not say %q:\n%s", want, out)
		}
	}
}
