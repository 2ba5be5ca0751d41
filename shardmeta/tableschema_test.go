package shardmeta

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/internal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/schema"
)

func mustSchema(t *testing.T, cols ...string) *schema.Schema {
	t.Helper()
	var out []schema.Column
	for _, c := range cols {
		name, typ, _ := strings.Cut(c, " ")
		col, err := schema.ParseColumnType(typ)
		if err != nil {
			t.Fatal(err)
		}
		col.Name = name
		out = append(out, col)
	}
	s, err := schema.New(out)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSchemaRecordFailsClosed: of two writers racing to record a table's
// first schema, one records it and the other is held to it; a writer with
// other columns is refused naming the difference, and changes nothing.
func TestSchemaRecordFailsClosed(t *testing.T) {
	ctx := testCtx(t)
	cli := server(t).Client()
	keys := Keys{Prefix: "rollwal-test", Table: etcdtest.Name(t, "", MaxNameLen)}
	a := mustSchema(t, "tokens list<int32>", "reward float64")
	b := mustSchema(t, "tokens list<int64>", "reward float64")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []*schema.Schema{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = EnsureSchema(ctx, cli, keys, s, 5*time.Second)
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("two different schemas raced: %v, %v; want exactly one recorded", errs[0], errs[1])
	}
	winner := a
	if errs[0] != nil {
		winner = b
	}
	for _, err := range errs {
		if err != nil && (!errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), `column "tokens" is list<int`)) {
			t.Fatalf("refusal %v does not name the difference", err)
		}
	}
	rec, err := EnsureSchema(ctx, cli, keys, winner, 5*time.Second)
	if err != nil || rec.Version != 1 || rec.Fingerprint != winner.Fingerprint() {
		t.Fatalf("the same schema again: %+v, %v", rec, err)
	}
	for _, tc := range []struct {
		s    *schema.Schema
		want string
	}{
		{mustSchema(t, "tokens list<int32>"), `lacks the table's column "reward"`},
		{mustSchema(t, "tokens list<int32>", "reward float64", "judge float32"), `adds column "judge"`},
		{mustSchema(t, "toks list<int32>", "reward float64"), `column 0 is "tokens" in the table and "toks"`},
	} {
		if winner != a {
			break
		}
		if _, err := EnsureSchema(ctx, cli, keys, tc.s, 5*time.Second); !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want a mismatch with %q", err, tc.want)
		}
	}
	got, err := LoadSchema(ctx, cli, keys)
	if err != nil || got.Fingerprint != winner.Fingerprint() {
		t.Fatalf("the record changed: %+v, %v", got, err)
	}
	if _, err := cli.Put(ctx, keys.Schema(), `{"version":1,"fingerprint":"x","columns":[{"name":"a","type":"int32"}]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureSchema(ctx, cli, keys, winner, 5*time.Second); err == nil || !errors.Is(err, ErrInvalidManifest) {
		t.Fatalf("a damaged record: %v", err)
	}
}
