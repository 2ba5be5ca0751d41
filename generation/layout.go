package generation

import (
	"fmt"
	"reflect"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/schema"
)

// The Parquet layout of a generation file: id first, then the user columns in
// schema order, then the system columns. Column order is wire format.
//
// parquet.Group sorts its fields by name, so the schema is built from a Go
// struct type made at run time (parquet-go keeps struct field order, at every
// depth: a struct column is a nested struct type). The struct is never
// instantiated: rows are written column by column.
//
// Types, with the optional/required repetition of each level following
// the nullability of the column, the list element and the struct field:
//
//	string    BYTE_ARRAY (STRING)        json  BYTE_ARRAY (JSON)
//	int64     INT64 (INT(64,true))       int32 INT32 (INT(32,true))
//	float64   DOUBLE                     float32 FLOAT
//	bool      BOOLEAN                    binary BYTE_ARRAY (no annotation)
//	timestamp INT64 (TIMESTAMP(isAdjustedToUTC=true,unit=MICROS))
//	list<T>   group (LIST) { repeated group list { T element } }
//	struct    group { fields, in declared order }

// bloomBitsPerValue sizes the split-block bloom filter on id: 10 bits per
// distinct id give about a 1% false-positive rate.
const bloomBitsPerValue = 10

// parquetSchemaName is the name of the root of the Parquet schema.
const parquetSchemaName = "rollwal"

// layout is the Parquet shape of one table schema.
type layout struct {
	schema *parquet.Schema
	// first[i] is the leaf index of user column i's first leaf (id is leaf
	// 0). A primitive or a list of primitives has one leaf; a struct, or a
	// list of structs, one per field.
	first []int
	// nested[i] describes the leaves of user column i when it is a list or
	// a struct, nil otherwise.
	nested [][]nestedLeaf
	// seqIndex and epochIndex are the leaf indexes of _seq and _epoch.
	seqIndex, epochIndex int
}

func newLayout(s *schema.Schema) (*layout, error) {
	lay := &layout{first: make([]int, len(s.Columns)), nested: make([][]nestedLeaf, len(s.Columns))}
	fields := make([]reflect.StructField, 0, len(s.Columns)+3)
	fields = append(fields, structField(0, schema.IDColumn, reflect.TypeFor[string](), "", ""))
	leaf := 1
	for i := range s.Columns {
		c := &s.Columns[i]
		t, opts, elemOpts, err := goTypeOf(c)
		if err != nil {
			return nil, err
		}
		fields = append(fields, structField(i+1, c.Name, t, opts, elemOpts))
		lay.first[i] = leaf
		lay.nested[i] = nestedLeaves(c, leaf)
		leaf += max(len(lay.nested[i]), 1)
	}
	n := len(fields)
	// DELTA_BINARY_PACKED: _seq increases and _epoch is nearly constant, so
	// both shrink to a few bytes per page.
	fields = append(fields,
		structField(n, schema.SeqColumn, reflect.TypeFor[uint64](), ",delta", ""),
		structField(n+1, schema.EpochColumn, reflect.TypeFor[uint64](), ",delta", ""))
	ps, err := schemaOfStruct(reflect.StructOf(fields))
	if err != nil {
		return nil, err
	}
	lay.schema, lay.seqIndex, lay.epochIndex = ps, leaf, leaf+1
	if err := lay.checkLevels(); err != nil {
		return nil, err
	}
	return lay, nil
}

// checkLevels holds the levels this package computes for nested leaves to
// the ones parquet-go derives from the schema: the writer and the decoder
// trust them for every value.
func (lay *layout) checkLevels() error {
	paths := lay.schema.Columns()
	if len(paths) != lay.epochIndex+1 {
		return fmt.Errorf("generation: the parquet schema has %d leaves, want %d", len(paths), lay.epochIndex+1)
	}
	for _, leaves := range lay.nested {
		for _, l := range leaves {
			lc, _ := lay.schema.Lookup(paths[l.index]...)
			if lc.MaxDefinitionLevel != int(l.lv.max) || lc.MaxRepetitionLevel != l.lv.maxRep() {
				return fmt.Errorf("generation: leaf %v has levels (rep %d, def %d), the layout computed (%d, %d)",
					paths[l.index], lc.MaxRepetitionLevel, lc.MaxDefinitionLevel, l.lv.maxRep(), l.lv.max)
			}
		}
	}
	return nil
}

func structField(i int, name string, t reflect.Type, opts, elemOpts string) reflect.StructField {
	tag := fmt.Sprintf(`parquet:"%s%s"`, name, opts)
	if elemOpts != "" {
		tag += fmt.Sprintf(` parquet-element:"%s"`, elemOpts)
	}
	return reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: t, Tag: reflect.StructTag(tag)}
}

// goTypeOf returns the Go type whose parquet-go node is column c, with the
// tag options of the field and, for a list, of its element.
func goTypeOf(c *schema.Column) (t reflect.Type, opts, elemOpts string, err error) {
	switch c.Type {
	case schema.List:
		t, elemOpts, err = elementTypeOf(c)
		if err != nil {
			return nil, "", "", err
		}
		return reflect.SliceOf(t), optional(c) + ",list", elemOpts, nil
	case schema.Struct:
		t, err = structTypeOf(c)
		return t, optional(c), "", err
	}
	t, opts, err = primitiveTypeOf(c)
	return t, optional(c) + opts, "", err
}

func elementTypeOf(c *schema.Column) (reflect.Type, string, error) {
	e := c.Element
	if e.Type == schema.Struct {
		t, err := structTypeOf(e)
		return t, optional(e), err
	}
	t, opts, err := primitiveTypeOf(e)
	if err != nil {
		return nil, "", fmt.Errorf("generation: column %q: %w", c.Name, err)
	}
	return t, optional(e) + opts, nil
}

func structTypeOf(c *schema.Column) (reflect.Type, error) {
	fields := make([]reflect.StructField, len(c.Fields))
	for i := range c.Fields {
		f := &c.Fields[i]
		t, opts, err := primitiveTypeOf(f)
		if err != nil {
			return nil, fmt.Errorf("generation: column %q: %w", c.Name, err)
		}
		fields[i] = structField(i, f.Name, t, optional(f)+opts, "")
	}
	return reflect.StructOf(fields), nil
}

func primitiveTypeOf(c *schema.Column) (reflect.Type, string, error) {
	switch c.Type {
	case schema.String:
		return reflect.TypeFor[string](), "", nil
	case schema.JSON:
		return reflect.TypeFor[string](), ",json", nil
	case schema.Int64:
		return reflect.TypeFor[int64](), "", nil
	case schema.Float64:
		return reflect.TypeFor[float64](), "", nil
	case schema.Bool:
		return reflect.TypeFor[bool](), "", nil
	case schema.Int32:
		return reflect.TypeFor[int32](), "", nil
	case schema.Float32:
		return reflect.TypeFor[float32](), "", nil
	case schema.Binary:
		// []byte is a BYTE_ARRAY without the STRING annotation: Arrow binary.
		return reflect.TypeFor[[]byte](), "", nil
	case schema.Timestamp:
		// The unit alone: parquet-go sets isAdjustedToUTC by default.
		return reflect.TypeFor[int64](), ",timestamp(microsecond)", nil
	}
	return nil, "", fmt.Errorf("generation: %q: unsupported type %v", c.Name, c.Type)
}

func optional(c *schema.Column) string {
	if c.Nullable {
		return ",optional"
	}
	return ""
}

// schemaOfStruct turns parquet-go's panics on a bad struct into an error.
func schemaOfStruct(t reflect.Type) (ps *parquet.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("generation: building the parquet schema: %v", r)
		}
	}()
	return parquet.NewSchema(parquetSchemaName, parquet.SchemaOf(reflect.New(t).Interface())), nil
}
