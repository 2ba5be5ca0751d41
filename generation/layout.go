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
// struct type made at run time (parquet-go keeps struct field order). The
// struct is never instantiated: rows are written column by column.

// bloomBitsPerValue sizes the split-block bloom filter on id: 10 bits per
// distinct id give about a 1% false-positive rate.
const bloomBitsPerValue = 10

// parquetSchemaName is the name of the root of the Parquet schema.
const parquetSchemaName = "rollwal"

// layout is the Parquet shape of one table schema.
type layout struct {
	schema *parquet.Schema
	// leaf index of each column in the file: id is 0, user column i is i+1,
	// then _seq and _epoch.
	seqIndex, epochIndex int
}

func newLayout(s *schema.Schema) (*layout, error) {
	fields := make([]reflect.StructField, 0, len(s.Columns)+3)
	fields = append(fields, structField(0, schema.IDColumn, reflect.TypeFor[string](), ""))
	for i, c := range s.Columns {
		t, opts, err := goTypeOf(c)
		if err != nil {
			return nil, err
		}
		fields = append(fields, structField(i+1, c.Name, t, opts))
	}
	n := len(fields)
	// DELTA_BINARY_PACKED: _seq increases and _epoch is nearly constant, so
	// both shrink to a few bytes per page.
	fields = append(fields,
		structField(n, schema.SeqColumn, reflect.TypeFor[uint64](), ",delta"),
		structField(n+1, schema.EpochColumn, reflect.TypeFor[uint64](), ",delta"))
	ps, err := schemaOfStruct(reflect.StructOf(fields))
	if err != nil {
		return nil, err
	}
	return &layout{schema: ps, seqIndex: n, epochIndex: n + 1}, nil
}

func structField(i int, name string, t reflect.Type, opts string) reflect.StructField {
	return reflect.StructField{
		Name: fmt.Sprintf("F%d", i),
		Type: t,
		Tag:  reflect.StructTag(fmt.Sprintf(`parquet:"%s%s"`, name, opts)),
	}
}

func goTypeOf(c schema.Column) (reflect.Type, string, error) {
	opts := ""
	if c.Nullable {
		opts = ",optional"
	}
	switch c.Type {
	case schema.String:
		return reflect.TypeFor[string](), opts, nil
	case schema.JSON:
		return reflect.TypeFor[string](), opts + ",json", nil
	case schema.Int64:
		return reflect.TypeFor[int64](), opts, nil
	case schema.Float64:
		return reflect.TypeFor[float64](), opts, nil
	case schema.Bool:
		return reflect.TypeFor[bool](), opts, nil
	}
	return nil, "", fmt.Errorf("generation: column %q: unsupported type %v", c.Name, c.Type)
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
