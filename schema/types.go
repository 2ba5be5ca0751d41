package schema

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Nesting. A column is a primitive, a struct of primitive fields, or a
// list whose elements are primitives or structs of primitive fields — what
// RL rollouts carry (token ids, log-probabilities, chat messages) and what
// every reader maps one to one onto Arrow, Parquet and Iceberg types.
// Deeper nesting (lists of lists, structs of lists) is refused.

// Limits of a schema. They bound what a configuration can make a writer
// hold per row and per batch, not what producers send.
const (
	MaxColumns      = 1024 // user columns of a table
	MaxStructFields = 256  // fields of one struct
	MaxDocBytes     = 4096 // a column's or field's doc
	// MaxListElements bounds the elements of one list value: a million
	// tokens of context fits four times over. A list's elements count
	// towards MaxValueBytes too.
	MaxListElements = 1 << 22
)

// ElementName is the name of a list's element (the Parquet LIST
// convention); an element's own Name is ignored.
const ElementName = "element"

// IsPrimitive reports whether t holds one value per row (no children).
func (t Type) IsPrimitive() bool { return t >= String && t <= Timestamp }

func (t Type) known() bool { return t >= String && t <= Struct }

// checkColumn validates a column or, at depth > 0, a nested field.
// depth 0: a table column; 1: a list element or a struct field; 2: a
// field of a struct that is a list element.
func checkColumn(c *Column, path string, depth int, parent Type) error {
	if parent != List && !columnName.MatchString(c.Name) {
		return fmt.Errorf("%s: invalid name %q (letters, digits and _, starting with a letter, at most 128)", path, c.Name)
	}
	if len(c.Doc) > MaxDocBytes || !utf8.ValidString(c.Doc) {
		return fmt.Errorf("%s: doc must be valid UTF-8 of at most %d bytes", path, MaxDocBytes)
	}
	if !c.Type.known() {
		return fmt.Errorf("%s: unknown type %d", path, c.Type)
	}
	if c.Type != List && c.Element != nil {
		return fmt.Errorf("%s: an element is declared, but the type is %s, not list", path, c.Type)
	}
	if c.Type != Struct && len(c.Fields) > 0 {
		return fmt.Errorf("%s: fields are declared, but the type is %s, not struct", path, c.Type)
	}
	switch c.Type {
	case List:
		return checkList(c, path, depth)
	case Struct:
		return checkStruct(c, path, depth, parent)
	}
	return nil
}

func checkList(c *Column, path string, depth int) error {
	switch {
	case depth > 0:
		return fmt.Errorf("%s: a list inside a list or a struct is not supported (lists hold primitives or structs of primitives)", path)
	case c.Element == nil:
		return fmt.Errorf("%s: a list needs an element type (list<int32>, or element: in the long form)", path)
	}
	return checkColumn(c.Element, path+"[]", depth+1, List)
}

func checkStruct(c *Column, path string, depth int, parent Type) error {
	switch {
	case depth > 0 && parent != List:
		return fmt.Errorf("%s: a struct inside a struct is not supported (struct fields are primitives)", path)
	case len(c.Fields) == 0:
		return fmt.Errorf("%s: a struct needs at least one field", path)
	case len(c.Fields) > MaxStructFields:
		return fmt.Errorf("%s: %d fields, more than %d", path, len(c.Fields), MaxStructFields)
	}
	seen := make(map[string]bool, len(c.Fields))
	for i := range c.Fields {
		f := &c.Fields[i]
		if seen[f.Name] {
			return fmt.Errorf("%s: field %q declared twice", path, f.Name)
		}
		seen[f.Name] = true
		if err := checkColumn(f, path+"."+f.Name, depth+1, Struct); err != nil {
			return err
		}
	}
	return nil
}

// TypeString is the column's type in the short form a configuration may
// use: int32, list<float32>, struct<role: string, content: string>,
// list<struct<…>>. Nested parts that are nullable are marked with a
// trailing '?', which ParseColumnType reads back.
func (c *Column) TypeString() string {
	var b strings.Builder
	c.writeType(&b)
	return b.String()
}

func (c *Column) writeType(b *strings.Builder) {
	switch c.Type {
	case List:
		b.WriteString("list<")
		if c.Element != nil {
			c.Element.writeNested(b)
		}
		b.WriteString(">")
	case Struct:
		b.WriteString("struct<")
		for i := range c.Fields {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(c.Fields[i].Name)
			b.WriteString(": ")
			c.Fields[i].writeNested(b)
		}
		b.WriteString(">")
	default:
		b.WriteString(c.Type.String())
	}
}

func (c *Column) writeNested(b *strings.Builder) {
	c.writeType(b)
	if c.Nullable {
		b.WriteString("?")
	}
}

// ParseColumnType parses a type in the short form (see TypeString) into a
// column without a name: its Type, Element and Fields. Elements and fields
// are not nullable unless marked with '?'.
func ParseColumnType(expr string) (Column, error) {
	p := &typeParser{s: expr}
	c, err := p.column()
	if err == nil {
		p.space()
		if p.i < len(p.s) {
			err = p.errorf("unexpected %q", p.s[p.i:])
		}
	}
	if err != nil {
		return Column{}, fmt.Errorf("schema: type %q: %w", expr, err)
	}
	return c, nil
}

type typeParser struct {
	s string
	i int
}

func (p *typeParser) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *typeParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *typeParser) word() string {
	p.space()
	start := p.i
	for p.i < len(p.s) {
		ch := p.s[p.i]
		if ch != '_' && (ch < '0' || ch > '9') && (ch < 'a' || ch > 'z') && (ch < 'A' || ch > 'Z') {
			break
		}
		p.i++
	}
	return p.s[start:p.i]
}

func (p *typeParser) expect(ch byte) error {
	p.space()
	if p.i >= len(p.s) || p.s[p.i] != ch {
		return p.errorf("want %q", ch)
	}
	p.i++
	return nil
}

func (p *typeParser) peek(ch byte) bool {
	p.space()
	return p.i < len(p.s) && p.s[p.i] == ch
}

func (p *typeParser) column() (Column, error) {
	name := p.word()
	switch name {
	case "":
		return Column{}, p.errorf("want a type name")
	case "list":
		if err := p.expect('<'); err != nil {
			return Column{}, err
		}
		e, err := p.nested()
		if err != nil {
			return Column{}, err
		}
		return Column{Type: List, Element: &e}, p.expect('>')
	case "struct":
		return p.structType()
	}
	t, err := ParseType(name)
	if err != nil || !t.IsPrimitive() {
		return Column{}, p.errorf("unknown type %q (want %s, list<…> or struct<…>)", name, primitiveNames())
	}
	return Column{Type: t}, nil
}

// nested parses a list element or a struct field's type and its '?'.
func (p *typeParser) nested() (Column, error) {
	c, err := p.column()
	if err != nil {
		return Column{}, err
	}
	if p.peek('?') {
		p.i++
		c.Nullable = true
	}
	return c, nil
}

func (p *typeParser) structType() (Column, error) {
	if err := p.expect('<'); err != nil {
		return Column{}, err
	}
	c := Column{Type: Struct}
	for {
		name := p.word()
		if name == "" {
			return Column{}, p.errorf("want a field name")
		}
		if err := p.expect(':'); err != nil {
			return Column{}, err
		}
		f, err := p.nested()
		if err != nil {
			return Column{}, err
		}
		f.Name = name
		c.Fields = append(c.Fields, f)
		if !p.peek(',') {
			return c, p.expect('>')
		}
		p.i++
	}
}

func primitiveNames() string {
	var names []string
	for t := String; t <= Timestamp; t++ {
		names = append(names, t.String())
	}
	return strings.Join(names, ", ")
}

// columnSpec is a column as configuration writes it: the type in the short
// form (list<int32>) or as a name with element: / fields: beside it.
type columnSpec struct {
	Name     string   `json:"name" yaml:"name"`
	Type     string   `json:"type" yaml:"type"`
	Nullable bool     `json:"nullable" yaml:"nullable"`
	Doc      string   `json:"doc" yaml:"doc"`
	Element  *Column  `json:"element" yaml:"element"`
	Fields   []Column `json:"fields" yaml:"fields"`
	// ID and Aliases come from the stored record (JSON) only, RenamedFrom
	// from configuration (YAML) only: see Column.
	ID          int      `json:"id" yaml:"-"`
	Aliases     []string `json:"aliases" yaml:"-"`
	RenamedFrom string   `json:"-" yaml:"renamed_from"`
}

func (c *Column) fromSpec(sp columnSpec) error {
	var t Column
	if strings.Contains(sp.Type, "<") {
		if sp.Element != nil || len(sp.Fields) > 0 {
			return fmt.Errorf("column %q: type %q is given in the short form and with element or fields beside it; use one", sp.Name, sp.Type)
		}
		var err error
		if t, err = ParseColumnType(sp.Type); err != nil {
			return fmt.Errorf("column %q: %w", sp.Name, err)
		}
	} else {
		typ, err := ParseType(sp.Type)
		if err != nil {
			return fmt.Errorf("column %q: %w", sp.Name, err)
		}
		t = Column{Type: typ, Element: sp.Element, Fields: sp.Fields}
	}
	*c = Column{Name: sp.Name, Type: t.Type, Nullable: sp.Nullable, Doc: sp.Doc, Element: t.Element, Fields: t.Fields,
		ID: sp.ID, Aliases: sp.Aliases, RenamedFrom: sp.RenamedFrom}
	return nil
}

// UnmarshalJSON reads a column in either form (see columnSpec).
func (c *Column) UnmarshalJSON(b []byte) error {
	var sp columnSpec
	if err := json.Unmarshal(b, &sp); err != nil {
		return err
	}
	return c.fromSpec(sp)
}

// UnmarshalYAML reads a column in either form (see columnSpec).
func (c *Column) UnmarshalYAML(n *yaml.Node) error {
	// Node.Decode cannot be made strict: a misspelt key (nulable) would be
	// dropped, and the column silently differ from what was meant.
	if n.Kind == yaml.MappingNode {
		for i := 0; i < len(n.Content); i += 2 {
			switch k := n.Content[i].Value; k {
			case "name", "type", "nullable", "doc", "element", "fields", "renamed_from":
			default:
				return fmt.Errorf("line %d: unknown key %q in a column (want name, type, nullable, doc, element, fields or renamed_from)", n.Content[i].Line, k)
			}
		}
	}
	var sp columnSpec
	if err := n.Decode(&sp); err != nil {
		return err
	}
	return c.fromSpec(sp)
}

// MarshalYAML writes the short form of the type when it says everything
// (no doc or renamed_from on a nested part), the long form otherwise.
func (c Column) MarshalYAML() (any, error) {
	out := columnOut{Name: c.Name, Type: c.TypeString(), Nullable: c.Nullable, Doc: c.Doc, RenamedFrom: c.RenamedFrom}
	if c.nestedExtras() {
		out.Type, out.Element, out.Fields = c.Type.String(), c.Element, c.Fields
	}
	return out, nil
}

type columnOut struct {
	Name     string   `yaml:"name,omitempty"`
	Type     string   `yaml:"type"`
	Nullable bool     `yaml:"nullable,omitempty"`
	Doc      string   `yaml:"doc,omitempty"`
	Element  *Column  `yaml:"element,omitempty"`
	Fields   []Column `yaml:"fields,omitempty"`
	// RenamedFrom is last: it is read rarely and dropped once applied.
	RenamedFrom string `yaml:"renamed_from,omitempty"`
}

// nestedExtras reports a nested part with what the short form cannot
// say: a doc or a renamed_from.
func (c *Column) nestedExtras() bool {
	if c.Element != nil && (c.Element.Doc != "" || c.Element.nestedExtras()) {
		return true
	}
	for i := range c.Fields {
		if c.Fields[i].Doc != "" || c.Fields[i].RenamedFrom != "" {
			return true
		}
	}
	return false
}
