// Package schema describes a table's columns and turns producer rows into
// validated, columnar batches.
//
// Every row has an "id" (non-empty UTF-8, at most MaxIDBytes, unique per table
// by contract) and the table's own columns. The writer adds two system
// columns, _seq and _epoch, when it stores a row; producers never send them.
//
// A Batch is the one in-memory form of rows after validation: the WAL stores
// its encoding (see encode.go), the memtable appends its columns, and a
// generation file is written from them. Validation happens once, for a whole
// batch, before anything of it is written.
//
// A table's schema changes by versions, and every file and WAL record
// written under an old one must stay readable. So each column, list element
// and struct field carries a field id (WithFieldIDs) that names it in every
// version, whatever it is called later; Evolve allows only the changes that
// old files can be read under (add a nullable column, widen a number, make
// a column nullable, rename, drop) and says what changed; Convert moves a
// batch written under one version to another by field id. The versions
// themselves are records in etcd (shardmeta.SchemaRecord), which every
// writer and merge of the table follows.
package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// MaxIDBytes bounds the length of a row id.
const MaxIDBytes = 1024

// MaxValueBytes bounds one string value (its UTF-8 bytes) or json value (its
// JSON text). A row is logged in one WAL record of at most 64 MiB
// (wal.MaxPayloadSize), so a value must fit well inside one; 32 MiB leaves
// the other half to the id, the row's other columns and the encoding. A
// generation holds such a value in a single Parquet page, which pyarrow and
// DuckDB read (generation.TestHugeValueReadsInPyarrow).
const MaxValueBytes = 32 << 20

// Names of the columns every stored row carries.
const (
	IDColumn    = "id"
	SeqColumn   = "_seq"
	EpochColumn = "_epoch"
)

// Type is a column's logical type. Its numeric values are wire format (they
// appear in WAL records and fingerprints): never renumber.
type Type uint8

// Column types.
const (
	String    Type = 1 // UTF-8 text
	Int64     Type = 2
	Float64   Type = 3
	Bool      Type = 4
	JSON      Type = 5 // UTF-8 text holding one valid JSON value
	Int32     Type = 6
	Float32   Type = 7
	Binary    Type = 8  // bytes; base64 in NDJSON
	Timestamp Type = 9  // microseconds since 1970-01-01 UTC; RFC 3339 in NDJSON
	List      Type = 10 // a list of Element values
	Struct    Type = 11 // a struct of Fields
)

var typeNames = map[Type]string{
	String: "string", Int64: "int64", Float64: "float64", Bool: "bool", JSON: "json",
	Int32: "int32", Float32: "float32", Binary: "binary", Timestamp: "timestamp", List: "list", Struct: "struct",
}

func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// ParseType parses a type's name (list and struct included, without their
// parts; ParseColumnType parses a whole type).
func ParseType(name string) (Type, error) {
	for t, n := range typeNames {
		if n == name {
			return t, nil
		}
	}
	return 0, fmt.Errorf("schema: unknown column type %q (want %s, list<…> or struct<…>)", name, primitiveNames())
}

// MarshalText writes the type's name (for YAML and JSON configuration).
func (t Type) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText parses a type's name.
func (t *Type) UnmarshalText(b []byte) error {
	v, err := ParseType(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// Column is one user column of a table, or a list's element or a struct's
// field inside one.
type Column struct {
	Name     string `json:"name" yaml:"name"`
	Type     Type   `json:"type" yaml:"type"`
	Nullable bool   `json:"nullable,omitempty" yaml:"nullable"`
	Doc      string `json:"doc,omitempty" yaml:"doc,omitempty"`
	// Element is a list's element type.
	Element *Column `json:"element,omitempty" yaml:"element,omitempty"`
	// Fields are a struct's fields, in order.
	Fields []Column `json:"fields,omitempty" yaml:"fields,omitempty"`
	// ID is the Iceberg field id; 0 means not assigned. The stored schema
	// record assigns ids (WithFieldIDs, Evolve), never configuration: an id
	// names the column in every file written, whatever it is called later.
	ID int `json:"id,omitempty" yaml:"-"`
	// RenamedFrom, in configuration only, says that this column (or struct
	// field) is the one called RenamedFrom in the stored schema. Evolve
	// reads it; it is not stored.
	RenamedFrom string `json:"-" yaml:"renamed_from,omitempty"`
	// Aliases are the earlier names of this column or field, oldest
	// first. Base files carry no Parquet field ids, so readers' name
	// mappings list them to still resolve files written under an old name.
	Aliases []string `json:"aliases,omitempty" yaml:"-"`
}

// Schema is a table's user columns, in order. The id column is implicit and
// always first; _seq and _epoch are implicit and always last.
type Schema struct {
	Columns []Column `json:"columns" yaml:"columns"`

	index map[string]int
}

// Rollout is the default schema: an RL rollout.
func Rollout() *Schema {
	s, err := New([]Column{
		{Name: "prompt", Type: String},
		{Name: "completion", Type: String},
		{Name: "reward", Type: Float64, Nullable: true},
		{Name: "metadata", Type: JSON, Nullable: true},
	})
	if err != nil {
		panic(err) // a constant schema that does not validate is a programming error
	}
	return s
}

var columnName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,127}$`)

// New validates columns and returns a schema over them.
func New(cols []Column) (*Schema, error) {
	s := &Schema{Columns: append([]Column(nil), cols...)}
	if err := s.init(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Schema) init() error {
	if len(s.Columns) == 0 {
		return fmt.Errorf("schema: no columns (a table needs at least one column besides id)")
	}
	if len(s.Columns) > MaxColumns {
		return fmt.Errorf("schema: %d columns, more than %d", len(s.Columns), MaxColumns)
	}
	s.index = make(map[string]int, len(s.Columns))
	for i := range s.Columns {
		c := &s.Columns[i]
		if c.Name == IDColumn {
			return fmt.Errorf("schema: column %d: %q is implicit and must not be declared", i, c.Name)
		}
		if err := checkColumn(c, fmt.Sprintf("column %d (%q)", i, c.Name), 0, 0); err != nil {
			return fmt.Errorf("schema: %w", err)
		}
		if _, dup := s.index[c.Name]; dup {
			return fmt.Errorf("schema: column %q declared twice", c.Name)
		}
		s.index[c.Name] = i
	}
	return checkFieldIDs(s.Columns)
}

// Validate checks a schema that was filled in by a decoder (YAML, JSON).
func (s *Schema) Validate() error { return s.init() }

// Index returns the position of a user column, or -1.
func (s *Schema) Index(name string) int {
	if s.index == nil {
		if err := s.init(); err != nil {
			return -1
		}
	}
	i, ok := s.index[name]
	if !ok {
		return -1
	}
	return i
}

// Fingerprint is a stable hash of the columns, their types and nullability
// (nested parts included). Two schemas with the same fingerprint store rows
// identically. Docs do not count, nor do field ids, aliases and
// renamed_from: a schema's fingerprint is the same before and after ids
// are assigned.
func (s *Schema) Fingerprint() string {
	var b strings.Builder
	for i := range s.Columns {
		c := &s.Columns[i]
		// The form of the first five types predates nesting and is kept, so
		// that files written before keep their fingerprints.
		fmt.Fprintf(&b, "%s:%d:%t", c.Name, c.Type, c.Nullable)
		if !c.Type.IsPrimitive() {
			b.WriteString("=")
			c.writeFingerprint(&b)
		}
		b.WriteString(";")
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8])
}

func (c *Column) writeFingerprint(b *strings.Builder) {
	switch c.Type {
	case List:
		fmt.Fprintf(b, "list(%d:%t", c.Element.Type, c.Element.Nullable)
		if c.Element.Type == Struct {
			c.Element.writeFingerprint(b)
		}
		b.WriteString(")")
	case Struct:
		b.WriteString("struct(")
		for _, f := range c.Fields {
			fmt.Fprintf(b, "%s:%d:%t,", f.Name, f.Type, f.Nullable)
		}
		b.WriteString(")")
	}
}
