package engine

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rollwal/rollwal/schema"
)

// TestRecordNamesItsSchemaVersion: a record of rows of version 1 keeps
// the kinds WALs had before versions (so an old WAL reads as it did); one
// of a later version is kind 2 and decodes with that version's columns;
// a record naming a version out of range, or one the table does not
// have, is refused.
func TestRecordNamesItsSchemaVersion(t *testing.T) {
	v1 := mustColumns(t, evolveColumns(1))
	v2 := mustColumns(t, evolveColumns(2))
	lookup := func(v int) (*schema.Schema, error) {
		switch v {
		case 1:
			return v1, nil
		case 2:
			return v2, nil
		}
		return nil, errors.New("no such version")
	}
	var s Shard
	for _, tc := range []struct {
		meta     RecordMeta
		sch      *schema.Schema
		wantKind uint8
	}{
		{RecordMeta{}, v1, kindBatch},
		{RecordMeta{Source: Source{Name: "k", Offset: 7}}, v1, kindMetaBatch},
		{RecordMeta{SchemaVersion: 2}, v2, kindVersionedBatch},
		{RecordMeta{Source: Source{Name: "k", Offset: 7}, SchemaVersion: 2}, v2, kindVersionedBatch},
	} {
		row := schema.Row{"id": "a", "text": "t", "score": 3}
		if tc.sch == v2 {
			row["judge"] = 0.5
		}
		b, err := tc.sch.Build([]schema.Row{row})
		if err != nil {
			t.Fatal(err)
		}
		payload, kind := s.encodeRecord(nil, tc.meta, b)
		if kind != tc.wantKind {
			t.Fatalf("%+v: kind %d, want %d", tc.meta, kind, tc.wantKind)
		}
		m, got, err := decodeRecord(lookup, kind, payload, false)
		if err != nil || got.Schema != tc.sch || m.Source != tc.meta.Source || max(m.SchemaVersion, 1) != max(tc.meta.SchemaVersion, 1) {
			t.Fatalf("%+v: decoded %+v, %v", tc.meta, m, err)
		}
	}
	for _, v := range []uint64{0, 1, 3, maxSchemaVersion + 1} {
		payload := binary.AppendUvarint(nil, v)
		payload = appendMeta(payload, RecordMeta{})
		if _, _, err := decodeRecord(lookup, kindVersionedBatch, payload, false); err == nil {
			t.Errorf("a record of version %d decoded", v)
		}
	}
}
