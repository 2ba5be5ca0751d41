package memtable

import (
	"testing"

	"github.com/rollwal/rollwal/schema"
)

// TestUseSchemaSealsOneVersionPerGeneration: a new schema seals an active
// memtable that holds rows (a generation holds rows of one schema) and
// takes effect in place in one that holds none, keeping its generation
// and its ids' index; a batch of the old schema is refused afterwards.
func TestUseSchemaSealsOneVersionPerGeneration(t *testing.T) {
	s, _ := newTestSet(1, 1<<20)
	defer s.Close()
	wider, err := schema.New(append(append([]schema.Column(nil), testSchema.Columns...), schema.Column{Name: "judge", Type: schema.Float64, Nullable: true}))
	if err != nil {
		t.Fatal(err)
	}
	insert(t, s, 1, 1, "a")
	s.UseSchema(wider)
	if len(s.Sealed()) != 1 || s.Sealed()[0].Schema() != testSchema || s.Active().Schema() != wider || s.Active().Generation() != 2 {
		t.Fatalf("after a new schema: %d sealed, active generation %d", len(s.Sealed()), s.Active().Generation())
	}
	if fresh, dups := s.Filter(batch(t, "a")); dups != 1 || fresh.Len() != 0 {
		t.Fatal("the sealed generation's ids left the index")
	}
	s.UseSchema(testSchema)
	if len(s.Sealed()) != 1 || s.Active().Generation() != 2 || s.Schema() != testSchema {
		t.Fatalf("an empty active memtable was sealed: %d sealed, generation %d", len(s.Sealed()), s.Active().Generation())
	}
	s.UseSchema(wider)
	mustPanic(t, "the schema has 5", func() { insert(t, s, 2, 1, "b") })
}
