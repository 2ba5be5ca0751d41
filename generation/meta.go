package generation

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"

	"github.com/rollwal/rollwal/schema"
)

// FormatVersion is the version of the generation file format written by this
// package (columns, footer keys, naming; see docs/format/generation.md).
// Readers refuse any other version.
const FormatVersion = 1

// Meta describes one generation file. Write stores every field in the Parquet
// footer's key-value metadata under a "rollwal." key (see metaKeys); ReadMeta
// reads them back and validates them.
type Meta struct {
	FormatVersion     int    // FormatVersion; Write fills in 0
	Table             string // table name
	Shard             string // shard id within the table
	Generation        uint64 // generation number within the shard
	Epoch             uint64 // writer epoch that wrote the file
	SeqFirst          uint64 // lowest _seq covered (inclusive)
	SeqLast           uint64 // highest _seq covered (inclusive)
	Rows              int64  // number of rows; Write fills in 0
	SchemaFingerprint string // schema.Schema.Fingerprint; Write fills in ""
	CreatedUnixNano   int64  // wall-clock time of the write; Write fills in 0
}

// Footer key-value metadata keys. They are wire format: never rename one
// within a FormatVersion.
const (
	keyPrefix            = "rollwal."
	keyFormatVersion     = keyPrefix + "format_version"
	keyTable             = keyPrefix + "table"
	keyShard             = keyPrefix + "shard"
	keyGeneration        = keyPrefix + "generation"
	keyEpoch             = keyPrefix + "epoch"
	keySeqFirst          = keyPrefix + "seq_first"
	keySeqLast           = keyPrefix + "seq_last"
	keyRows              = keyPrefix + "rows"
	keySchemaFingerprint = keyPrefix + "schema_fingerprint"
	keyCreatedUnixNano   = keyPrefix + "created_unix_nano"
	keySchema            = keyPrefix + "schema"
	keyChecksum          = keyPrefix + "checksum"
)

// metaField binds one Meta field to its footer key, as text.
type metaField struct {
	key    string
	format func(*Meta) string
	parse  func(*Meta, string) error
}

func uintField(key string, p func(*Meta) *uint64) metaField {
	return metaField{
		key:    key,
		format: func(m *Meta) string { return strconv.FormatUint(*p(m), 10) },
		parse: func(m *Meta, s string) (err error) {
			*p(m), err = strconv.ParseUint(s, 10, 64)
			return err
		},
	}
}

func intField(key string, p func(*Meta) *int64) metaField {
	return metaField{
		key:    key,
		format: func(m *Meta) string { return strconv.FormatInt(*p(m), 10) },
		parse: func(m *Meta, s string) (err error) {
			*p(m), err = strconv.ParseInt(s, 10, 64)
			return err
		},
	}
}

func stringField(key string, p func(*Meta) *string) metaField {
	return metaField{
		key:    key,
		format: func(m *Meta) string { return *p(m) },
		parse:  func(m *Meta, s string) error { *p(m) = s; return nil },
	}
}

// metaFields lists every Meta field, in the order they are written.
var metaFields = []metaField{
	{
		key:    keyFormatVersion,
		format: func(m *Meta) string { return strconv.Itoa(m.FormatVersion) },
		parse: func(m *Meta, s string) (err error) {
			m.FormatVersion, err = strconv.Atoi(s)
			return err
		},
	},
	stringField(keyTable, func(m *Meta) *string { return &m.Table }),
	stringField(keyShard, func(m *Meta) *string { return &m.Shard }),
	uintField(keyGeneration, func(m *Meta) *uint64 { return &m.Generation }),
	uintField(keyEpoch, func(m *Meta) *uint64 { return &m.Epoch }),
	uintField(keySeqFirst, func(m *Meta) *uint64 { return &m.SeqFirst }),
	uintField(keySeqLast, func(m *Meta) *uint64 { return &m.SeqLast }),
	intField(keyRows, func(m *Meta) *int64 { return &m.Rows }),
	stringField(keySchemaFingerprint, func(m *Meta) *string { return &m.SchemaFingerprint }),
	intField(keyCreatedUnixNano, func(m *Meta) *int64 { return &m.CreatedUnixNano }),
}

// keyValues returns the footer metadata of a file: every Meta field and the
// schema's columns as JSON.
func keyValues(m *Meta, s *schema.Schema) ([][2]string, error) {
	cols, err := json.Marshal(s.Columns)
	if err != nil {
		return nil, fmt.Errorf("generation: encoding the schema: %w", err)
	}
	kv := make([][2]string, 0, len(metaFields)+2)
	for _, f := range metaFields {
		kv = append(kv, [2]string{f.key, f.format(m)})
	}
	kv = append(kv, [2]string{keySchema, string(cols)})
	return append(kv, [2]string{keyChecksum, checksum(kv)}), nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksum is the CRC-32C, as 8 hex digits, of the rollwal.* pairs in the
// order metaFields lists them followed by rollwal.schema, each written as
// key, NUL, value, NUL. Parquet has no checksum over its footer; this one
// makes a damaged rollwal.* value an error instead of a wrong generation
// number or seq range.
func checksum(kv [][2]string) string {
	h := crc32.New(castagnoli)
	for _, p := range kv {
		h.Write([]byte(p[0]))
		h.Write([]byte{0})
		h.Write([]byte(p[1]))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%08x", h.Sum32())
}

// checkChecksum recomputes the checksum of the footer's rollwal.* pairs.
func checkChecksum(lookup func(string) (string, bool)) error {
	want, ok := lookup(keyChecksum)
	if !ok {
		return fmt.Errorf("footer key %s is missing", keyChecksum)
	}
	kv := make([][2]string, 0, len(metaFields)+1)
	for _, f := range metaFields {
		v, _ := lookup(f.key)
		kv = append(kv, [2]string{f.key, v})
	}
	v, _ := lookup(keySchema)
	kv = append(kv, [2]string{keySchema, v})
	if got := checksum(kv); got != want {
		return fmt.Errorf("footer checksum mismatch: computed %s, stored %q", got, want)
	}
	return nil
}

// parseMeta reads every Meta field from a footer lookup function. It checks
// syntax only; validate checks meaning.
func parseMeta(lookup func(string) (string, bool)) (Meta, error) {
	var m Meta
	for _, f := range metaFields {
		v, ok := lookup(f.key)
		if !ok {
			return Meta{}, fmt.Errorf("footer key %s is missing", f.key)
		}
		if err := f.parse(&m, v); err != nil {
			return Meta{}, fmt.Errorf("footer key %s: cannot parse %q", f.key, v)
		}
	}
	return m, nil
}

// parseSchema reads the schema stored in the footer.
func parseSchema(lookup func(string) (string, bool)) (*schema.Schema, error) {
	v, ok := lookup(keySchema)
	if !ok {
		return nil, fmt.Errorf("footer key %s is missing", keySchema)
	}
	var cols []schema.Column
	if err := json.Unmarshal([]byte(v), &cols); err != nil {
		return nil, fmt.Errorf("footer key %s: %v", keySchema, err)
	}
	s, err := schema.New(cols)
	if err != nil {
		return nil, fmt.Errorf("footer key %s: %v", keySchema, err)
	}
	return s, nil
}

// validate checks the meaning of a Meta read from a footer against itself,
// the stored schema and the file's row count.
func (m *Meta) validate(stored *schema.Schema, numRows int64) error {
	switch {
	case m.FormatVersion != FormatVersion:
		return fmt.Errorf("unknown format version %d (this build reads %d)", m.FormatVersion, FormatVersion)
	case m.Rows <= 0:
		return fmt.Errorf("footer says %d rows; a generation has at least one", m.Rows)
	case m.Rows != numRows:
		return fmt.Errorf("footer says %d rows, the file holds %d", m.Rows, numRows)
	case m.SeqFirst > m.SeqLast:
		return fmt.Errorf("seq range [%d, %d] is empty", m.SeqFirst, m.SeqLast)
	case stored.Fingerprint() != m.SchemaFingerprint:
		return fmt.Errorf("stored schema has fingerprint %s, footer says %s", stored.Fingerprint(), m.SchemaFingerprint)
	}
	return nil
}
