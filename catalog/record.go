package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// recordFormat is the version of the table record's encoding. Wire format.
const recordFormat = 1

// record is the catalog's value for one table: where its current metadata
// is, and where the one before it was.
//
//	{"format":1,"metadata_location":"/d/t/base/metadata/00002-….metadata.json",
//	 "previous_metadata_location":"/d/t/base/metadata/00001-….metadata.json"}
type record struct {
	Format           int    `json:"format"`
	MetadataLocation string `json:"metadata_location"`
	// PreviousMetadataLocation is empty for a table just created.
	PreviousMetadataLocation string `json:"previous_metadata_location,omitempty"`
}

func (r record) encode() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // two strings and an int always encode
	}
	return b
}

// decodeRecord decodes strictly: unknown fields, a wrong format or an empty
// location are refused.
func decodeRecord(key string, data []byte) (record, error) {
	var r record
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return record{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	if dec.More() {
		return record{}, fmt.Errorf("%w: %s: data after the record", ErrCorrupt, key)
	}
	if r.Format != recordFormat || r.MetadataLocation == "" {
		return record{}, fmt.Errorf("%w: %s: format %d, metadata location %q", ErrCorrupt, key, r.Format, r.MetadataLocation)
	}
	return r, nil
}
