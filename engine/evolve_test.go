package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// evolveV1 and evolveV2 are a table's first columns and the columns after
// a change that widens score and adds a nullable judge.
func evolveColumns(v int) []schema.Column {
	cols := []schema.Column{{Name: "text", Type: schema.String}, {Name: "score", Type: schema.Int32}}
	if v == 2 {
		cols[1].Type = schema.Int64
		cols = append(cols, schema.Column{Name: "judge", Type: schema.Float64, Nullable: true})
	}
	return cols
}

func mustColumns(t testing.TB, cols []schema.Column) *schema.Schema {
	t.Helper()
	s, err := schema.New(cols)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSchemaChangeWhileAppending: producers append rows of the first
// version (batches built before the change) and of the second (rows with
// the new column once the shard serves it) while the schema changes and
// flushes run; the writer then dies without a last flush and its
// successor replays a WAL tail of both versions. Every row is in exactly
// one generation, each generation is of one version and says which, and
// read in the second version every value is what was sent: old rows'
// judge null, scores widened.
func TestSchemaChangeWhileAppending(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewStrictMem()
	opts := testOptions(fs, tableName(t, ""))
	opts.Schema, opts.NoFlushOnClose, opts.FlushBytes = mustColumns(t, evolveColumns(1)), true, 256<<10
	opts.EnsureDefaults()
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	v1 := s.Schema()

	sent := newSentRows()
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if err := appendEvolving(ctx, s, v1, sent, fmt.Sprintf("p%d-%d", p, i), p%2 == 0); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	sent.waitFor(t, 200)
	keys := shardmeta.Keys{Prefix: opts.Prefix, Table: opts.Table}
	rec, changes, err := shardmeta.ApplySchema(ctx, opts.Etcd, keys, evolveColumns(2), false, 5*time.Second)
	if err != nil || rec.Version != 2 {
		t.Fatalf("apply: %+v %v, %v", rec, changes, err)
	}
	t.Logf("version 2: %v", changes)
	waitUntil(t, "the shard serves version 2", func() bool { return s.Schema().Index("judge") >= 0 })
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sent.waitFor(t, sent.count()+400)
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if sent.withJudge.Load() == 0 {
		t.Fatal("no row with the new column was appended")
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}

	opts.Schema = mustColumns(t, evolveColumns(2))
	h2 := openHost(t, opts)
	defer h2.Close(ctx)
	s2 := mustOpen(t, h2, "s0")
	if _, err := s2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkEvolved(t, fs, opts, rec.Schema(), sent, true)
}

// appendEvolving appends one row: from a batch of v1 (an old producer),
// or from a row map with judge when the shard serves it.
func appendEvolving(ctx context.Context, s *Shard, v1 *schema.Schema, sent *sentRows, id string, old bool) error {
	score := int64(len(id)) * 1_000_003
	row := schema.Row{"id": id, "text": "text of " + id, "score": score % (1 << 30)}
	judge := any(nil)
	var err error
	if old {
		var b *schema.Batch
		if b, err = v1.Build([]schema.Row{row}); err == nil {
			_, err = s.AppendBatch(ctx, b, Source{})
		}
	} else {
		if s.Schema().Index("judge") >= 0 {
			judge = float64(len(id)) / 4
			row["judge"] = judge
		}
		_, err = s.Append(ctx, []schema.Row{row}, Source{})
	}
	if err != nil {
		return fmt.Errorf("append %s: %w", id, err)
	}
	sent.add(id, row["text"].(string), score%(1<<30), judge)
	return nil
}

type sentRow struct {
	text  string
	score int64
	judge any
}

type sentRows struct {
	mu        sync.Mutex
	rows      map[string]sentRow
	grew      chan struct{}
	withJudge atomic.Int64
}

func newSentRows() *sentRows {
	return &sentRows{rows: map[string]sentRow{}, grew: make(chan struct{}, 1)}
}

func (r *sentRows) add(id, text string, score int64, judge any) {
	r.mu.Lock()
	r.rows[id] = sentRow{text, score, judge}
	r.mu.Unlock()
	if judge != nil {
		r.withJudge.Add(1)
	}
	select {
	case r.grew <- struct{}{}:
	default:
	}
}

func (r *sentRows) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.rows)
}

// waitFor waits, within a bound, until n rows were sent.
func (r *sentRows) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(time.Minute)
	for r.count() < n {
		select {
		case <-r.grew:
		case <-deadline:
			t.Fatalf("only %d of %d rows appended within a minute", r.count(), n)
		}
	}
}

// waitUntil polls cond, within a bound.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// checkEvolved reads every committed generation with the version it
// records, converts it to v2 and holds each row to what was sent.
func checkEvolved(t *testing.T, fs vfs.FS, opts Options, v2 *schema.Schema, sent *sentRows, both bool) {
	t.Helper()
	ctx := context.Background()
	m, err := LoadManifest(ctx, opts.Etcd, opts.Prefix, opts.Table, "s0")
	if err != nil {
		t.Fatal(err)
	}
	keys := shardmeta.Keys{Prefix: opts.Prefix, Table: opts.Table}
	seen := map[string]int{}
	versions := map[int]int{}
	for _, g := range m.Flushed {
		v := max(g.SchemaVersion, 1)
		versions[v]++
		rec, err := shardmeta.LoadSchemaVersion(ctx, opts.Etcd, keys, v)
		if err != nil {
			t.Fatal(err)
		}
		_, d, err := generation.Read(fs, filepath.Join(opts.DataDir, opts.Table, "shards", "s0", "gen", g.File), rec.Schema())
		if err != nil {
			t.Fatalf("generation %d of version %d: %v", g.Number, v, err)
		}
		b, err := schema.Convert(d.Rows, v2)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range b.IDs {
			seen[id]++
			checkEvolvedRow(t, b, i, sent.rows[id])
		}
	}
	if both && (versions[1] == 0 || versions[2] == 0) {
		t.Errorf("generations per version %v: want some of each", versions)
	}
	for id := range sent.rows {
		if seen[id] != 1 {
			t.Errorf("row %s is in %d generations", id, seen[id])
		}
	}
	if len(seen) != len(sent.rows) {
		t.Errorf("%d rows stored, %d sent", len(seen), len(sent.rows))
	}
}

func checkEvolvedRow(t *testing.T, b *schema.Batch, i int, want sentRow) {
	t.Helper()
	text, score, judge := b.Value(0, i), b.Value(1, i), b.Value(2, i)
	if text != want.text || score != want.score || judge != want.judge {
		t.Fatalf("row %s: got %v %v %v, sent %+v", b.IDs[i], text, score, judge, want)
	}
}

// TestAppendOfNoVersionRefused: a batch built for columns that are no
// version of the table's schema is refused, naming why.
func TestAppendOfNoVersionRefused(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.Schema = mustColumns(t, evolveColumns(1))
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	other := mustColumns(t, []schema.Column{{Name: "text", Type: schema.Binary}})
	b, err := other.Build([]schema.Row{{"id": "a", "text": []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendBatch(ctx, b, Source{}); !errors.Is(err, ErrInvalidAppend) {
		t.Fatalf("append of another schema's batch: %v", err)
	}
}

// TestReplayOfTwoSchemaVersions: a WAL tail holds records of version 1
// (written before the change) and of version 2; a replay decodes each
// with its own version and every row reads back in version 2.
func TestReplayOfTwoSchemaVersions(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewStrictMem()
	opts := testOptions(fs, tableName(t, ""))
	opts.Schema, opts.NoFlushOnClose = mustColumns(t, evolveColumns(1)), true
	opts.EnsureDefaults()
	sent := newSentRows()
	life := func(v int, ids ...string) {
		t.Helper()
		opts.Schema = mustColumns(t, evolveColumns(v))
		h := openHost(t, opts)
		s := mustOpen(t, h, "s0")
		for _, id := range ids {
			if err := appendEvolving(ctx, s, s.Schema(), sent, id, false); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	life(1, "a", "bb", "ccc")
	keys := shardmeta.Keys{Prefix: opts.Prefix, Table: opts.Table}
	rec, _, err := shardmeta.ApplySchema(ctx, opts.Etcd, keys, evolveColumns(2), false, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	life(2, "dddd", "eeeee")
	if sent.withJudge.Load() != 2 {
		t.Fatalf("%d rows with judge, want 2", sent.withJudge.Load())
	}
	opts.NoFlushOnClose = false
	life(2)
	checkEvolved(t, fs, opts, rec.Schema(), sent, false)
}
