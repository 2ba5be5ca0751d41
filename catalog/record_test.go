package catalog

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeRecordStrict: a record that is not exactly what encode writes
// is refused as ErrCorrupt.
func TestDecodeRecordStrict(t *testing.T) {
	good := record{Format: 1, MetadataLocation: "/d/metadata/00001-x.metadata.json", PreviousMetadataLocation: "/d/p"}
	if r, err := decodeRecord("k", good.encode()); err != nil || r != good {
		t.Fatalf("round trip: %+v %v", r, err)
	}
	for _, bad := range []string{
		``, `{}`, `null`, `[]`,
		`{"format":2,"metadata_location":"/m"}`,
		`{"format":1,"metadata_location":""}`,
		`{"format":1}`,
		`{"format":1,"metadata_location":"/m","extra":1}`,
		`{"format":1,"metadata_location":"/m"} {}`,
		`{"format":"1","metadata_location":"/m"}`,
	} {
		if _, err := decodeRecord("k", []byte(bad)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decode %q: %v, want ErrCorrupt", bad, err)
		}
	}
}

// TestMetadataVersion: names follow <version %05d>-<uuid>.metadata.json;
// anything else is refused.
func TestMetadataVersion(t *testing.T) {
	loc := metadataLocation("/d/base/", 42)
	if v, err := parseMetadataVersion(loc); err != nil || v != 42 {
		t.Fatalf("%s: %d %v", loc, v, err)
	}
	for _, bad := range []string{"/d/v1.metadata.json", "/d/1-0b6e5a9c-0000-4000-8000-000000000000.metadata.json",
		"/d/00001-not-a-uuid-not-a-uuid-not-a-uuid-xxxx.metadata.json", "/d/00001-0b6e5a9c-0000-4000-8000-000000000000.json"} {
		if _, err := parseMetadataVersion(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", bad, err)
		}
	}
}

// FuzzDecodeRecord: decoding never panics, and what decodes re-encodes to
// a record that decodes to the same value.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"format":1,"metadata_location":"/m","previous_metadata_location":"/p"}`))
	f.Add([]byte(`{"format":1,"metadata_location":"/m"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRecord("k", data)
		if err != nil {
			return
		}
		again, err := decodeRecord("k", r.encode())
		if err != nil || again != r {
			t.Fatalf("%q: re-decoded %+v %v, want %+v", data, again, err, r)
		}
	})
}

// docRecordMax is the table record's bound that docs/format/etcd.md
// states: two metadata locations of PATH_MAX (4,096 bytes) each.
const docRecordMax = 8300

// TestRecordBounded: a record naming two metadata files at PATH_MAX
// encodes within docRecordMax.
func TestRecordBounded(t *testing.T) {
	long := "/" + strings.Repeat("d", 4095)
	if n := len(record{Format: recordFormat, MetadataLocation: long, PreviousMetadataLocation: long}.encode()); n > docRecordMax {
		t.Fatalf("record with two 4096-byte locations: %d bytes, docs/format/etcd.md states %d", n, docRecordMax)
	}
}
