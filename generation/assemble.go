package generation

import (
	"fmt"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/schema"
)

// The decoder's side of nested.go: each leaf of a list or struct column
// rebuilds its values from the levels. The column's first leaf also builds
// the column's shape (row nulls, list offsets, nulls of list elements of
// structs); every other leaf checks that its levels say the same, so a
// damaged level in any leaf is an error, never a silently different row.
// Decoding goes leaf by leaf within a row group, so the first leaf has
// built the shape of a row group's rows before the others read them.

// assembler rebuilds one nested leaf.
type assembler struct {
	lv         levels
	first      bool           // builds the shape
	built      *int           // rows whose shape the first leaf has built
	top        *schema.Vector // the column
	shell, out *schema.Vector // see nestedLeaf.vectors
	row, elem  int            // rows and list elements this leaf has read
	open       bool           // the current row is a list that may go on
}

// nestedSinks returns the sinks of column vector v's leaves.
func nestedSinks(leaves []nestedLeaf, v *schema.Vector) []sink {
	built := new(int)
	sinks := make([]sink, len(leaves))
	for i := range leaves {
		shell, out := leaves[i].vectors(v)
		a := &assembler{lv: leaves[i].lv, first: i == 0, built: built, top: v, shell: shell, out: out}
		sinks[i] = a.put
	}
	return sinks
}

func (a *assembler) put(v parquet.Value) error {
	rep, def := v.RepetitionLevel(), v.DefinitionLevel()
	switch {
	case def > int(a.lv.max) || rep > a.lv.maxRep():
		return fmt.Errorf("levels (rep %d, def %d) above the leaf's (%d, %d)", rep, def, a.lv.maxRep(), a.lv.max)
	case rep == 0:
		return a.startRow(v, byte(def))
	case !a.open || def < int(a.lv.elem):
		return fmt.Errorf("row %d: a list element (rep %d, def %d) outside a list", a.row-1, rep, def)
	}
	return a.element(v, byte(def))
}

func (a *assembler) startRow(v parquet.Value, def byte) error {
	if err := a.endRow(); err != nil {
		return err
	}
	r := a.row
	a.row++
	a.open = false
	null := def < a.lv.present
	if err := a.shapeRow(r, null); err != nil {
		return err
	}
	switch {
	case !a.lv.list && null:
		appendLeaf(a.out, v, false) // a null struct's fields hold zeros
		return nil
	case !a.lv.list:
		return a.slot(r, v, def)
	case null || def < a.lv.elem: // a null or an empty list
		return nil
	}
	a.open = true
	return a.element(v, def)
}

// shapeRow builds row r's null flag and list offset, or checks them.
func (a *assembler) shapeRow(r int, null bool) error {
	if a.first {
		markNull(a.top, r, null)
		if a.lv.list {
			a.top.Offsets = append(a.top.Offsets, a.top.Offsets[len(a.top.Offsets)-1])
		}
		*a.built++
		return nil
	}
	switch {
	case r >= *a.built:
		return fmt.Errorf("row %d: more rows than the column's first leaf", r)
	case a.top.IsNull(r) != null:
		return fmt.Errorf("row %d: null in one leaf of the column and not in another", r)
	}
	return nil
}

// endRow checks that the current row of a list has as many elements as
// the first leaf gave it.
func (a *assembler) endRow() error {
	if a.first || !a.lv.list || a.row == 0 || a.elem == int(a.top.Offsets[a.row]) {
		return nil
	}
	return fmt.Errorf("row %d: %d list elements in one leaf of the column, %d in another",
		a.row-1, a.elem-int(a.top.Offsets[a.row-1]), a.top.Offsets[a.row]-a.top.Offsets[a.row-1])
}

func (a *assembler) element(v parquet.Value, def byte) error {
	k := a.elem
	a.elem++
	if a.first {
		a.top.Offsets[a.row]++
	} else if k >= int(a.top.Offsets[a.row]) {
		return fmt.Errorf("row %d: more list elements than the column's first leaf", a.row-1)
	}
	return a.slot(k, v, def)
}

// slot appends value k: a struct row's field, or a list element (or its
// field), with the null flag of a list element of structs.
func (a *assembler) slot(k int, v parquet.Value, def byte) error {
	if a.shell != nil {
		null := def < a.lv.slot
		if a.first {
			markNull(a.shell, k, null)
		} else if a.shell.IsNull(k) != null {
			return fmt.Errorf("list element %d: null in one leaf of the column and not in another", k)
		}
		if null {
			appendLeaf(a.out, v, false) // a null element's fields hold zeros
			return nil
		}
	}
	appendLeaf(a.out, v, def < a.lv.max)
	return nil
}

// markNull records value i's null flag, keeping Nulls nil until the first
// null (the schema package's convention).
func markNull(v *schema.Vector, i int, null bool) {
	switch {
	case null && v.Nulls == nil:
		v.Nulls = make([]bool, i, max(i+1, 8))
		v.Nulls = append(v.Nulls, true)
	case v.Nulls != nil:
		v.Nulls = append(v.Nulls, null)
	}
}

// appendLeaf appends val to a primitive vector, or a zero value marked
// null when null is set.
func appendLeaf(v *schema.Vector, val parquet.Value, null bool) {
	markNull(v, v.Len(), null)
	if null || val.IsNull() {
		val = parquet.Value{}
	}
	switch v.Type {
	case schema.String, schema.JSON, schema.Binary:
		v.Str = append(v.Str, string(val.ByteArray()))
	case schema.Int64, schema.Timestamp:
		v.I64 = append(v.I64, val.Int64())
	case schema.Int32:
		v.I32 = append(v.I32, val.Int32())
	case schema.Float64:
		v.F64 = append(v.F64, val.Double())
	case schema.Float32:
		v.F32 = append(v.F32, val.Float())
	case schema.Bool:
		v.Bool = append(v.Bool, val.Boolean())
	}
}
