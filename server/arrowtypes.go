package server

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/rollwal/rollwal/schema"
)

// The Arrow types a column takes. Each schema type takes the Arrow types
// whose every value it holds exactly: a narrower integer or float widens,
// a wider one is refused rather than narrowed (an int64 for an int32
// column, a float64 for a float32 one). Two exceptions keep what producers
// sent before these types: an int64 for a float64 column is taken value by
// value, each within ±2^53 where float64 is exact (pandas makes int64
// columns of whole numbers); and any column takes the null type (every value
// null) and a dictionary whose values it takes.
//
//	schema type   Arrow types
//	string, json  utf8, large_utf8, utf8_view
//	binary        binary, large_binary, binary_view
//	bool          bool
//	int32         int32, int16, int8, uint16, uint8
//	int64         int64, int32, int16, int8, uint32, uint16, uint8
//	float32       float32
//	float64       float64, float32, int32, int16, int8, uint32, uint16,
//	              uint8, int64 (each value within ±2^53)
//	timestamp     timestamp of any unit, time zone UTC, +00:00 or none (a
//	              timestamp without a zone is taken as UTC: the column
//	              stores instants, and producers of naive times mean UTC far
//	              more often than not)
//	list<T>       list, large_list, list_view, large_list_view,
//	              fixed_size_list of an element type T takes
//	struct<…>     struct whose fields are the column's by name, in any
//	              order; a field it lacks is null in every row
//	any           null; dictionary<values: V> where V is taken
var arrowFor = map[schema.Type][]arrow.Type{
	schema.String:  {arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW},
	schema.JSON:    {arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW},
	schema.Binary:  {arrow.BINARY, arrow.LARGE_BINARY, arrow.BINARY_VIEW},
	schema.Bool:    {arrow.BOOL},
	schema.Int32:   {arrow.INT32, arrow.INT16, arrow.INT8, arrow.UINT16, arrow.UINT8},
	schema.Int64:   {arrow.INT64, arrow.INT32, arrow.INT16, arrow.INT8, arrow.UINT32, arrow.UINT16, arrow.UINT8},
	schema.Float32: {arrow.FLOAT32},
	schema.Float64: {arrow.FLOAT64, arrow.FLOAT32, arrow.INT32, arrow.INT16, arrow.INT8, arrow.UINT32, arrow.UINT16, arrow.UINT8, arrow.INT64},
	schema.List:    {arrow.LIST, arrow.LARGE_LIST, arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW, arrow.FIXED_SIZE_LIST},
}

// arrowNames are the names of Arrow types in messages, as pyarrow and
// arrow-go print them.
var arrowNames = map[arrow.Type]string{
	arrow.STRING: "utf8", arrow.LARGE_STRING: "large_utf8", arrow.STRING_VIEW: "utf8_view",
	arrow.BINARY: "binary", arrow.LARGE_BINARY: "large_binary", arrow.BINARY_VIEW: "binary_view",
	arrow.BOOL: "bool", arrow.INT8: "int8", arrow.INT16: "int16", arrow.INT32: "int32", arrow.INT64: "int64",
	arrow.UINT8: "uint8", arrow.UINT16: "uint16", arrow.UINT32: "uint32", arrow.FLOAT32: "float32", arrow.FLOAT64: "float64",
	arrow.LIST: "list", arrow.LARGE_LIST: "large_list", arrow.LIST_VIEW: "list_view", arrow.LARGE_LIST_VIEW: "large_list_view",
	arrow.FIXED_SIZE_LIST: "fixed_size_list",
}

// typeError is an Arrow type that does not fit the column, at path: the
// column's name, [] for a list's elements, .name for a struct's fields.
type typeError struct {
	path string
	err  error
}

func (e *typeError) Error() string { return e.err.Error() }

// fitArrow checks that Arrow type dt carries values of col; path names
// col in errors.
func fitArrow(dt arrow.DataType, col *schema.Column, path string) error {
	switch dt := dt.(type) {
	case *arrow.NullType:
		return nil
	case *arrow.DictionaryType:
		return fitArrow(dt.ValueType, col, path)
	}
	switch col.Type {
	case schema.Timestamp:
		return fitTimestamp(dt, col, path)
	case schema.Struct:
		return fitStruct(dt, col, path)
	}
	if !slices.Contains(arrowFor[col.Type], dt.ID()) {
		return mismatch(dt, col, path)
	}
	if col.Type == schema.List {
		return fitArrow(dt.(arrow.ListLikeType).Elem(), col.Element, path+"[]")
	}
	return nil
}

func mismatch(dt arrow.DataType, col *schema.Column, path string) error {
	return &typeError{path, fmt.Errorf("Arrow type %s does not fit type %s; send %s", dt, col.TypeString(), sendNames(col))}
}

// sendNames says what Arrow types col takes.
func sendNames(col *schema.Column) string {
	switch col.Type {
	case schema.Timestamp:
		return "timestamp (any unit) with time zone UTC, +00:00 or none"
	case schema.Struct:
		return "struct with fields of the column's names"
	}
	var names []string
	for _, t := range arrowFor[col.Type] {
		names = append(names, arrowNames[t])
	}
	if col.Type == schema.List {
		return strings.Join(names, ", ") + " of " + sendNames(col.Element)
	}
	return strings.Join(names, ", ") + " (or dictionary-encoded)"
}

// fitTimestamp takes a timestamp in UTC: Arrow stores instants in every
// zone, but one the column does not name is more likely a mistake than
// meant.
func fitTimestamp(dt arrow.DataType, col *schema.Column, path string) error {
	ts, ok := dt.(*arrow.TimestampType)
	if !ok {
		return mismatch(dt, col, path)
	}
	switch tz := ts.TimeZone; {
	case tz == "", strings.EqualFold(tz, "UTC"), tz == "+00:00":
		return nil
	}
	return &typeError{path, fmt.Errorf("Arrow type %s: time zone %q is not taken; send timestamps in UTC (time zone UTC, +00:00 or none)", dt, ts.TimeZone)}
}

// fitStruct takes a struct whose fields the column has, each of a type its
// field takes; a field of the column that the struct lacks is null.
func fitStruct(dt arrow.DataType, col *schema.Column, path string) error {
	st, ok := dt.(*arrow.StructType)
	if !ok {
		return mismatch(dt, col, path)
	}
	seen := map[string]bool{}
	for _, f := range st.Fields() {
		fc := structField(col, f.Name)
		switch {
		case seen[f.Name]:
			return &typeError{path + "." + f.Name, errors.New("the Arrow struct has this field twice")}
		case fc == nil:
			return &typeError{path + "." + f.Name, fmt.Errorf("unknown field: the struct's type is %s", col.TypeString())}
		}
		seen[f.Name] = true
		if err := fitArrow(f.Type, fc, path+"."+f.Name); err != nil {
			return err
		}
	}
	return nil
}

func structField(col *schema.Column, name string) *schema.Column {
	for i := range col.Fields {
		if col.Fields[i].Name == name {
			return &col.Fields[i]
		}
	}
	return nil
}
