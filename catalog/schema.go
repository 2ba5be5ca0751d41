package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/apache/iceberg-go"
	icecat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/rollwal/rollwal/schema"
)

// Field ids of the base table. Wire format: never renumber. The system
// columns have the same ids in every table; user column i (0-based, in
// schema order) has FirstUserFieldID+i. Field order follows the Parquet
// layout of base files (id, user columns, _seq, _epoch).
const (
	IDFieldID        = 1
	SeqFieldID       = 2
	EpochFieldID     = 3
	FirstUserFieldID = 4
)

// SeqSortOrderID is the id of the base table's sort order: _seq ascending.
const SeqSortOrderID = 1

// BaseSchema is a table schema as an Iceberg schema (schema id 0). id is
// the identifier field. _seq and _epoch are uint64 in the files and long
// in Iceberg, which has no unsigned type: values stay below 2^63. The
// fields inside lists and structs are numbered after every user column,
// depth first in schema order, so that a column's id does not depend on
// what the columns before it hold.
func BaseSchema(s *schema.Schema) (*iceberg.Schema, error) {
	fields := []iceberg.NestedField{{ID: IDFieldID, Name: schema.IDColumn, Type: iceberg.PrimitiveTypes.String, Required: true}}
	next := FirstUserFieldID + len(s.Columns)
	for i := range s.Columns {
		col := &s.Columns[i]
		t, err := icebergType(col, &next)
		if err != nil {
			return nil, fmt.Errorf("catalog: column %q: %w", col.Name, err)
		}
		fields = append(fields, iceberg.NestedField{ID: FirstUserFieldID + i, Name: col.Name, Type: t, Required: !col.Nullable, Doc: col.Doc})
	}
	fields = append(fields,
		iceberg.NestedField{ID: SeqFieldID, Name: schema.SeqColumn, Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: EpochFieldID, Name: schema.EpochColumn, Type: iceberg.PrimitiveTypes.Int64, Required: true})
	return iceberg.NewSchemaWithIdentifiers(0, []int{IDFieldID}, fields...), nil
}

// icebergType is col's Iceberg type; next is the next free field id for
// the fields nested inside it.
func icebergType(col *schema.Column, next *int) (iceberg.Type, error) {
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
		id := *next
		*next++
		e, err := icebergType(col.Element, next)
		if err != nil {
			return nil, err
		}
		return &iceberg.ListType{ElementID: id, Element: e, ElementRequired: !col.Element.Nullable}, nil
	case schema.Struct:
		ids := *next
		*next += len(col.Fields)
		st := &iceberg.StructType{}
		for f := range col.Fields {
			fc := &col.Fields[f]
			t, err := icebergType(fc, next)
			if err != nil {
				return nil, err
			}
			st.FieldList = append(st.FieldList, iceberg.NestedField{ID: ids + f, Name: fc.Name, Type: t, Required: !fc.Nullable, Doc: fc.Doc})
		}
		return st, nil
	}
	return nil, fmt.Errorf("no Iceberg type for %v", col.Type)
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
	mapping, err := json.Marshal(sc.NameMapping())
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
// location (the base directory): BaseSchema, unpartitioned, BaseSortOrder,
// BaseProperties.
func (c *Etcd) CreateBaseTable(ctx context.Context, ident table.Identifier, location string, s *schema.Schema) (*table.Table, error) {
	sc, err := BaseSchema(s)
	if err != nil {
		return nil, err
	}
	order, err := BaseSortOrder()
	if err != nil {
		return nil, err
	}
	props, err := BaseProperties(sc)
	if err != nil {
		return nil, err
	}
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
