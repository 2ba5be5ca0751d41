package generation

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// TestReadStored: ReadStored reads a file with the schema of its own
// footer, whatever schema a caller has: a footer with field ids keeps
// them (a later schema version's, here 9 for a column added by hand), a
// footer without ids gets version 1's (WithFieldIDs). Read, given another
// schema, refuses the same file.
func TestReadStored(t *testing.T) {
	plain := allTypes(t)
	cols, next := schema.WithFieldIDs(plain.Columns)
	cols = append(cols, schema.Column{Name: "added", Type: schema.Float64, Nullable: true, ID: next + 5})
	evolved, err := schema.New(cols)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, s := range map[string]*schema.Schema{"without ids": plain, "with ids": evolved} {
		t.Run(name, func(t *testing.T) {
			d := allTypesRows(t, s, 20, 7)
			f, err := Write(context.Background(), Options{}, filepath.Join(dir), s, Meta{Table: "t", Shard: name, Generation: 1, Epoch: 1 << 40}, d)
			if err != nil {
				t.Fatal(err)
			}
			_, got, err := ReadStored(vfs.Default, f.Path)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := schema.WithFieldIDs(s.Columns)
			if len(got.Rows.Schema.Columns) != len(want) || got.Rows.Len() != 20 {
				t.Fatalf("read %d columns, %d rows", len(got.Rows.Schema.Columns), got.Rows.Len())
			}
			for i, c := range got.Rows.Schema.Columns {
				if c.ID != want[i].ID || c.Name != want[i].Name || c.ID == 0 {
					t.Fatalf("column %d: %s id %d, want %s id %d", i, c.Name, c.ID, want[i].Name, want[i].ID)
				}
			}
			other := evolved
			if s == evolved {
				other = plain
			}
			if _, _, err := Read(vfs.Default, f.Path, other); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read with another schema: %v, want ErrCorrupt", err)
			}
		})
	}
}
