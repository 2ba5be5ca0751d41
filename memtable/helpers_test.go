package memtable

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rollwal/rollwal/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testSchema = schema.Rollout()

// row is the rollout row the tests derive from an id: every column's value
// is a function of the id, so a misaligned column shows.
func row(id string) schema.Row {
	r := schema.Row{"id": id, "prompt": "p-" + id, "completion": "c-" + id}
	if !strings.HasSuffix(id, "~") { // ids ending in ~ have null reward and metadata
		r["reward"] = float64(len(id))
		r["metadata"] = fmt.Sprintf(`{"id":%q}`, id)
	}
	return r
}

func batch(t testing.TB, ids ...string) *schema.Batch {
	t.Helper()
	rows := make([]schema.Row, len(ids))
	for i, id := range ids {
		rows[i] = row(id)
	}
	b, err := testSchema.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkRows fails unless the ids of b are want and every column of b holds
// what row(id) says.
func checkRows(t testing.TB, b *schema.Batch, want ...string) {
	t.Helper()
	if err := rowsMismatch(b, want...); err != nil {
		t.Fatal(err)
	}
}

func rowsMismatch(b *schema.Batch, want ...string) error {
	if !slices.Equal(b.IDs, want) {
		return fmt.Errorf("ids %q, want %q", b.IDs, want)
	}
	for i, id := range b.IDs {
		r := row(id)
		for c, col := range testSchema.Columns {
			if got := b.Value(c, i); got != r[col.Name] {
				return fmt.Errorf("row %d (id %q) column %s = %#v, want %#v", i, id, col.Name, got, r[col.Name])
			}
		}
	}
	return nil
}

func newTestSet(gen uint64, limit int64) (*Set, *Budget) {
	b := NewBudget(limit)
	return NewSet(testSchema, gen, b, nil), b
}

// insert is the engine's append path: filter, acquire, insert. It returns
// the number of duplicates.
func insert(t testing.TB, s *Set, firstSeq, epoch uint64, ids ...string) int {
	t.Helper()
	fresh, dups := s.Filter(batch(t, ids...))
	if err := s.budget.Acquire(t.Context(), EstimateBytes(fresh), false); err != nil {
		t.Fatal(err)
	}
	s.Insert(fresh, firstSeq, epoch, "", 0)
	return dups
}

// fakeClock is a settable clock for CreatedAt.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic, want one containing %q", want)
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
			t.Fatalf("panic %q, want one containing %q", msg, want)
		}
	}()
	f()
}
