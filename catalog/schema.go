package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/apache/iceberg-go"
	icecat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/rollwal/rollwal/schema"
)

// Field ids of the base table. Wire format: never renumber. The system
// columns have the same ids in every table; the user columns carry their
// own (schema.Column.ID, assigned once by schema.WithFieldIDs and kept
// across schema versions): user column i of a table's first version has
// FirstUserFieldID+i. Field order follows the Parquet layout of base files
// (id, user columns, _seq, _epoch).
const (
	IDFieldID        = 1
	SeqFieldID       = 2
	EpochFieldID     = 3
	FirstUserFieldID = schema.FirstUserFieldID
)

// SeqSortOrderID is the id of the base table's sort order: _seq ascending.
const SeqSortOrderID = 1

// SchemaVersion is one version of a table's schema: its number (1, 2, …,
// as shardmeta records them) and its columns with their field ids. Its
// Iceberg schema id is Version-1.
type SchemaVersion struct {
	Version int
	Schema  *schema.Schema
}

// SchemaID is the version's Iceberg schema id.
func (v SchemaVersion) SchemaID() int { return v.Version - 1 }

func (v SchemaVersion) validate() error {
	if v.Version < 1 || v.Schema == nil {
		return fmt.Errorf("catalog: schema version %d (want ≥ 1, with columns)", v.Version)
	}
	return nil
}

// BaseSchema is a table schema as an Iceberg schema with schema id 0 (a
// table's first version): BaseSchemaVersion(SchemaVersion{1, s}).
func BaseSchema(s *schema.Schema) (*iceberg.Schema, error) {
	return BaseSchemaVersion(SchemaVersion{Version: 1, Schema: s})
}

// BaseSchemaVersion is a version of a table's schema as an Iceberg schema
// (schema id Version-1) with the columns' own field ids; a schema without
// ids (one recorded before ids existed: version 1) gets those
// schema.WithFieldIDs derives, so user column i is FirstUserFieldID+i and
// the fields inside lists and structs are numbered after every user
// column, depth first in schema order. id is the identifier field. _seq
// and _epoch are uint64 in the files and long in Iceberg, which has no
// unsigned type: values stay below 2^63.
func BaseSchemaVersion(v SchemaVersion) (*iceberg.Schema, error) {
	if err := v.validate(); err != nil {
		return nil, err
	}
	cols, _ := schema.WithFieldIDs(v.Schema.Columns)
	fields := []iceberg.NestedField{{ID: IDFieldID, Name: schema.IDColumn, Type: iceberg.PrimitiveTypes.String, Required: true}}
	for i := range cols {
		col := &cols[i]
		t, err := icebergType(col)
		if err != nil {
			return nil, fmt.Errorf("catalog: column %q: %w", col.Name, err)
		}
		f, err := nestedField(col, t)
		if err != nil {
			return nil, err
		}
		fields = append(fields, f)
	}
	fields = append(fields,
		iceberg.NestedField{ID: SeqFieldID, Name: schema.SeqColumn, Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: EpochFieldID, Name: schema.EpochColumn, Type: iceberg.PrimitiveTypes.Int64, Required: true})
	sc := iceberg.NewSchemaWithIdentifiers(v.SchemaID(), []int{IDFieldID}, fields...)
	if err := checkFieldIDs(sc); err != nil {
		return nil, fmt.Errorf("catalog: schema version %d: %w", v.Version, err)
	}
	return sc, nil
}

// nestedField is col as a field of type t, under its own id.
func nestedField(col *schema.Column, t iceberg.Type) (iceberg.NestedField, error) {
	if col.ID < FirstUserFieldID {
		return iceberg.NestedField{}, fmt.Errorf("catalog: column %q has field id %d (user fields start at %d)", col.Name, col.ID, FirstUserFieldID)
	}
	return iceberg.NestedField{ID: col.ID, Name: col.Name, Type: t, Required: !col.Nullable, Doc: col.Doc}, nil
}

// checkFieldIDs refuses a schema in which two fields share an id.
func checkFieldIDs(sc *iceberg.Schema) error {
	seen := map[int]string{}
	var walk func(prefix string, t iceberg.NestedType) error
	walk = func(prefix string, t iceberg.NestedType) error {
		for _, f := range t.Fields() {
			if other, dup := seen[f.ID]; dup {
				return fmt.Errorf("field id %d is both %s and %s%s", f.ID, other, prefix, f.Name)
			}
			seen[f.ID] = prefix + f.Name
			if nt, ok := f.Type.(iceberg.NestedType); ok {
				if err := walk(prefix+f.Name+".", nt); err != nil {
					return err
				}
			}
		}
		return nil
	}
	st := sc.AsStruct()
	return walk("", &st)
}

// icebergType is col's Iceberg type, with the field ids of the parts
// nested inside it.
func icebergType(col *schema.Column) (iceberg.Type, error) {
	switch col.Type {
	case schema.String, schema.JSON: // Iceberg v2 has no JSON type
		return iceberg.PrimitiveTypes.String, nil
	case schema.Int64:
		return iceberg.PrimitiveTypes.Int64, nil
	case schema.Float64:
		return iceberg.PrimitiveTypes.Float64, nil
	case schema.Bool:
		return iceberg.PrimitiveTypes.Bool, nil
	case schema.Int32:
		return iceberg.PrimitiveTypes.Int32, nil
	case schema.Float32:
		return iceberg.PrimitiveTypes.Float32, nil
	case schema.Binary:
		return iceberg.PrimitiveTypes.Binary, nil
	case schema.Timestamp: // microseconds, adjusted to UTC
		return iceberg.PrimitiveTypes.TimestampTz, nil
	case schema.List:
		e, err := icebergType(col.Element)
		if err != nil {
			return nil, err
		}
		if col.Element.ID < FirstUserFieldID {
			return nil, fmt.Errorf("list element has field id %d", col.Element.ID)
		}
		return &iceberg.ListType{ElementID: col.Element.ID, Element: e, ElementRequired: !col.Element.Nullable}, nil
	case schema.Struct:
		st := &iceberg.StructType{}
		for f := range col.Fields {
			fc := &col.Fields[f]
			t, err := icebergType(fc)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", fc.Name, err)
			}
			nf, err := nestedField(fc, t)
			if err != nil {
				return nil, err
			}
			st.FieldList = append(st.FieldList, nf)
		}
		return st, nil
	}
	return nil, fmt.Errorf("no Iceberg type for %v", col.Type)
}

// BaseNameMapping is the name mapping of a schema version
// (schema.name-mapping.default): every field id, nested ones included, to
// its current name and its earlier ones (schema.Column.Aliases), so that
// base files written before a rename — they carry no Parquet field ids;
// readers resolve their columns by name — still resolve to the field. An
// alias that is a sibling's current name is left out: that name is the
// sibling's. A table's mapping also keeps the columns earlier versions
// dropped (see EvolveNameMapping).
func BaseNameMapping(v SchemaVersion) (iceberg.NameMapping, error) {
	sc, err := BaseSchemaVersion(v)
	if err != nil {
		return nil, err
	}
	cols, _ := schema.WithFieldIDs(v.Schema.Columns)
	aliases := map[int][]string{}
	var collect func(cols []schema.Column)
	collect = func(cols []schema.Column) {
		for i := range cols {
			c := &cols[i]
			if len(c.Aliases) > 0 {
				aliases[c.ID] = c.Aliases
			}
			if c.Element != nil {
				collect([]schema.Column{*c.Element})
			}
			collect(c.Fields)
		}
	}
	collect(cols)
	return withAliases(sc.NameMapping(), aliases), nil
}

// EvolveNameMapping is the name mapping of a table moving to schema
// version v from a table whose mapping is prev: BaseNameMapping(v), and
// the top-level entries of prev whose field id v no longer has (dropped
// columns), under their names that no current column has. A dropped
// column stays in the old files, and iceberg-go refuses to read a file
// with a column the mapping does not name; under its own id, which no
// field of the schema has, readers skip it. (Its names are never used
// again: shardmeta retires them.)
func EvolveNameMapping(prev iceberg.NameMapping, v SchemaVersion) (iceberg.NameMapping, error) {
	nm, err := BaseNameMapping(v)
	if err != nil {
		return nil, err
	}
	live, taken := map[int]bool{}, map[string]bool{}
	var walk func(fields []iceberg.MappedField)
	walk = func(fields []iceberg.MappedField) {
		for _, m := range fields {
			if m.FieldID != nil {
				live[*m.FieldID] = true
			}
			walk(m.Fields)
		}
	}
	walk(nm)
	for _, m := range nm {
		for _, n := range m.Names {
			taken[n] = true
		}
	}
	for _, m := range prev {
		if m.FieldID == nil || live[*m.FieldID] {
			continue
		}
		var names []string
		for _, n := range m.Names {
			if !taken[n] {
				names, taken[n] = append(names, n), true
			}
		}
		if len(names) > 0 {
			m.Names = names
			nm = append(nm, m)
		}
	}
	return nm, nil
}

// withAliases adds to each mapped field the aliases of its id.
func withAliases(fields []iceberg.MappedField, aliases map[int][]string) []iceberg.MappedField {
	taken := map[string]bool{}
	for _, m := range fields {
		for _, n := range m.Names {
			taken[n] = true
		}
	}
	out := make([]iceberg.MappedField, len(fields))
	for i, m := range fields {
		m.Names = slices.Clone(m.Names)
		if m.FieldID != nil {
			for _, a := range aliases[*m.FieldID] {
				if !taken[a] {
					m.Names, taken[a] = append(m.Names, a), true
				}
			}
		}
		m.Fields = withAliases(m.Fields, aliases)
		out[i] = m
	}
	return out
}

// BaseSortOrder is _seq ascending: base files hold their rows in WAL order.
func BaseSortOrder() (table.SortOrder, error) {
	return table.NewSortOrder(SeqSortOrderID, []table.SortField{{
		SourceIDs: []int{SeqFieldID}, Transform: iceberg.IdentityTransform{},
		Direction: table.SortASC, NullOrder: table.NullsFirst,
	}})
}

// BaseProperties are the base table's properties: format v2; a name
// mapping, because base files carry no Parquet field ids (readers resolve
// columns by name through it); no automatic commit retries, because a
// base commit is replanned by the merge, never replayed by iceberg-go;
// and manifest merging.
func BaseProperties(sc *iceberg.Schema) (iceberg.Properties, error) {
	return baseProperties(sc.NameMapping())
}

func baseProperties(nm iceberg.NameMapping) (iceberg.Properties, error) {
	mapping, err := json.Marshal(nm)
	if err != nil {
		return nil, err
	}
	return iceberg.Properties{
		table.PropertyFormatVersion: "2",
		table.DefaultNameMappingKey: string(mapping),
		table.CommitNumRetriesKey:   strconv.Itoa(0),
		// One manifest per commit would make the manifest list (and the
		// ID check's reads) grow with every merge: merge them once there
		// are 100.
		table.ManifestMergeEnabledKey: "true",
	}, nil
}

// CreateBaseTable creates the Iceberg table of a rollwal base table at
// location (the base directory) with s as its first schema version:
// CreateBaseTableVersion(…, SchemaVersion{1, s}).
func (c *Etcd) CreateBaseTable(ctx context.Context, ident table.Identifier, location string, s *schema.Schema) (*table.Table, error) {
	return c.CreateBaseTableVersion(ctx, ident, location, SchemaVersion{Version: 1, Schema: s})
}

// CreateBaseTableVersion creates the Iceberg table of a rollwal base table
// at location (the base directory): BaseSchemaVersion(v) (schema id
// v.Version-1), unpartitioned, BaseSortOrder, BaseProperties with v's
// name mapping (BaseNameMapping).
func (c *Etcd) CreateBaseTableVersion(ctx context.Context, ident table.Identifier, location string, v SchemaVersion) (*table.Table, error) {
	sc, err := BaseSchemaVersion(v)
	if err != nil {
		return nil, err
	}
	order, err := BaseSortOrder()
	if err != nil {
		return nil, err
	}
	nm, err := BaseNameMapping(v)
	if err != nil {
		return nil, err
	}
	props, err := baseProperties(nm)
	if err != nil {
		return nil, err
	}
	props[SchemaVersionProperty] = strconv.Itoa(v.Version)
	return c.CreateTable(ctx, ident, sc, icecat.WithLocation(location),
		icecat.WithPartitionSpec(iceberg.UnpartitionedSpec), icecat.WithSortOrder(order), icecat.WithProperties(props))
}

// BaseNamespace is the namespace of every rollwal base table.
const BaseNamespace = "rollwal"

// BasePrefix is the catalog prefix of a rollwal table's base: under the
// table's own etcd root (/<prefix>/<table>/iceberg/...), so the catalog
// keys sit beside base/state and a table's keys never mix with another's.
func BasePrefix(prefix, tableName string) string { return prefix + "/" + tableName + "/iceberg" }

// BaseIdent is the Iceberg identifier of a rollwal table's base:
// rollwal.<table>.
func BaseIdent(tableName string) table.Identifier { return table.Identifier{BaseNamespace, tableName} }
