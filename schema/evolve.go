package schema

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rollwal/rollwal/errs"
)

// Schema evolution. A table's schema has versions; Evolve derives the
// next from the stored one and the configuration, and allows only what
// every file already written can be read under:
//
//   - add a nullable column, or a nullable field to a struct
//   - widen int32 to int64 or float32 to float64 (a column, a list's
//     element or a struct's field)
//   - make a required column, element or field nullable
//   - rename a column or struct field (renamed_from in the configuration)
//   - drop a top-level column
//
// Ids stay with their parts across versions (see fieldid.go). A name that
// belonged to a dropped column or was renamed away is retired for good:
// base files carry no Parquet field ids, and readers resolve their
// columns by name through the name mapping, which lists old names.

// ErrSchemaChange marks a change of schema that Evolve refuses.
var ErrSchemaChange = errs.New(errs.InvalidInput, "schema: change not allowed")

const allowedChanges = "allowed: add a nullable column or struct field, widen int32→int64 or float32→float64, " +
	"make a column nullable, rename with renamed_from, drop a column"

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s (%s)", ErrSchemaChange, fmt.Sprintf(format, args...), allowedChanges)
}

// Evolution is the next version of a schema.
type Evolution struct {
	// Columns are the configured columns with field ids: the stored ids
	// for the parts that were there, new ones for the rest.
	Columns []Column
	// NextID is the first field id not used yet, by any version.
	NextID int
	// Retired are the names that may never be used again: the given ones,
	// then those renamed away and those of dropped columns (and their
	// aliases).
	Retired []string
	// Changes say what changed, one plain sentence each: each configured
	// column's in configured order (rename, widen, nullable, doc, then
	// its nested parts'), then the drops in stored order, then a reorder.
	Changes []string
}

// Evolve derives the next schema version from the stored columns (with
// ids; without any, WithFieldIDs assigns them), the retired names, the
// configured columns (ids in them are ignored) and the next free field id.
// Top-level columns and struct fields match by name, or by renamed_from;
// a list's element matches its stored element. A renamed_from that names
// one of the column's aliases is a rename already made and is no change:
// configuration may keep it. A refusal wraps ErrSchemaChange.
func Evolve(stored []Column, retired []string, configured []Column, nextID int) (Evolution, error) {
	stored, next := WithFieldIDs(stored)
	if _, err := New(stored); err != nil {
		return Evolution{}, fmt.Errorf("schema: the stored schema is invalid: %s", strings.TrimPrefix(err.Error(), "schema: "))
	}
	cols := copyColumns(configured)
	walkParts(cols, func(c *Column, _ string) { c.ID, c.Aliases = 0, nil })
	if _, err := New(cols); err != nil {
		return Evolution{}, err
	}
	e := &evolver{retired: slices.Clone(retired), next: max(nextID, next)}
	if err := e.columns(stored, cols); err != nil {
		return Evolution{}, err
	}
	if _, err := New(cols); err != nil {
		return Evolution{}, refuse("the result is not a valid schema: %s", strings.TrimPrefix(err.Error(), "schema: "))
	}
	if len(e.changes) == 0 {
		cols = stored
	}
	return Evolution{Columns: cols, NextID: e.next, Retired: e.retired, Changes: e.changes}, nil
}

type evolver struct {
	retired []string
	next    int
	changes []string
}

func (e *evolver) note(format string, args ...any) {
	e.changes = append(e.changes, fmt.Sprintf(format, args...))
}

func (e *evolver) retire(names ...string) {
	for _, n := range names {
		if !slices.Contains(e.retired, n) {
			e.retired = append(e.retired, n)
		}
	}
}

func columnLabel(name string) string { return fmt.Sprintf("column %q", name) }

// columns evolves the top-level columns: cols (configured, in place)
// from stored.
func (e *evolver) columns(stored, cols []Column) error {
	taken := namesTaken(stored, e.retired)
	match, err := matchNames(stored, cols, taken, "column", columnLabel)
	if err != nil {
		return err
	}
	for i, j := range match {
		if err := e.topColumn(stored, cols, i, j); err != nil {
			return err
		}
	}
	e.number(cols, match)
	for j := range stored {
		if !slices.Contains(match, j) {
			e.note("drop column %q", stored[j].Name)
			e.retire(stored[j].Name)
			e.retire(stored[j].Aliases...)
		}
	}
	if reordered(match) {
		e.note("reorder the columns to %s", quoteNames(cols))
	}
	return nil
}

// topColumn evolves configured column i from stored column j, or adds
// it (j < 0).
func (e *evolver) topColumn(stored, cols []Column, i, j int) error {
	c := &cols[i]
	if j >= 0 {
		if c.Name != stored[j].Name {
			e.retire(stored[j].Name)
		}
		return e.column(&stored[j], c, columnLabel, c.Name)
	}
	if !c.Nullable {
		return refuse("add column %q (%s) as required: a new column must be nullable", c.Name, c.TypeString())
	}
	e.note("add column %q (%s, nullable)", c.Name, c.TypeString())
	return nil
}

// number gives ids to the new parts: the new columns' own first, in
// order, then every part without one (new columns' and new struct
// fields'), depth first, as WithFieldIDs numbers a new table.
func (e *evolver) number(cols []Column, match []int) {
	for i, j := range match {
		if j < 0 {
			cols[i].ID = e.next
			e.next++
		}
	}
	for i := range cols {
		numberNested(&cols[i], &e.next)
	}
}

// namesTaken are the names a new or renamed part may not take: retired
// ones and the aliases of the stored parts.
func namesTaken(stored []Column, retired []string) map[string]bool {
	taken := make(map[string]bool)
	for _, n := range retired {
		taken[n] = true
	}
	for i := range stored {
		for _, n := range stored[i].Aliases {
			taken[n] = true
		}
	}
	return taken
}

// matcher pairs configured parts (top-level columns, or the fields of
// one struct) with their stored parts.
type matcher struct {
	stored []Column
	byName map[string]int
	taken  map[string]bool     // names a new or renamed part may not take
	kind   string              // column or field, for refusals
	label  func(string) string // names a part in a refusal
}

// matchNames pairs each configured part with its stored part: match[i]
// is the stored index, or -1 for a new part.
func matchNames(stored, cols []Column, taken map[string]bool, kind string, label func(string) string) ([]int, error) {
	m := &matcher{stored: stored, byName: make(map[string]int, len(stored)), taken: taken, kind: kind, label: label}
	for j := range stored {
		m.byName[stored[j].Name] = j
	}
	match := make([]int, len(cols))
	owner := make(map[int]int) // stored index → configured index
	for i := range cols {
		j, err := m.matchOne(&cols[i])
		if err != nil {
			return nil, err
		}
		if k, dup := owner[j]; dup {
			return nil, m.keptTwice(&cols[i], &cols[k], j)
		}
		if j >= 0 {
			owner[j] = i
		}
		match[i] = j
	}
	for i, j := range match {
		if err := m.checkNewName(&cols[i], j); err != nil {
			return nil, err
		}
	}
	return match, nil
}

// matchOne finds the stored part of c: by renamed_from, else by name.
func (m *matcher) matchOne(c *Column) (int, error) {
	own, hasOwn := m.byName[c.Name]
	if c.RenamedFrom == "" || c.RenamedFrom == c.Name {
		if hasOwn {
			return own, nil
		}
		return -1, nil
	}
	if j, ok := m.byName[c.RenamedFrom]; ok {
		return j, nil
	}
	if hasOwn && slices.Contains(m.stored[own].Aliases, c.RenamedFrom) {
		return own, nil // renamed before; the configuration still says so
	}
	return -1, refuse("%s: renamed_from %q names nothing in the stored schema", m.label(c.Name), c.RenamedFrom)
}

// keptTwice refuses two configured parts, a and b, matching stored part
// j: one of them by renamed_from, which it names.
func (m *matcher) keptTwice(a, b *Column, j int) error {
	if a.RenamedFrom == "" {
		a = b
	}
	return refuse("%s: renamed_from %q names a %s that is also kept under its own name", m.label(a.Name), m.stored[j].Name, m.kind)
}

// checkNewName refuses a new part (j < 0) or one renamed from stored
// part j whose name is retired or still another stored part's.
func (m *matcher) checkNewName(c *Column, j int) error {
	if j >= 0 && m.stored[j].Name == c.Name {
		return nil
	}
	what := "add " + m.label(c.Name)
	if j >= 0 {
		what = fmt.Sprintf("rename %s to %q", m.label(m.stored[j].Name), c.Name)
	}
	if m.taken[c.Name] {
		return refuse("%s: the name %q was used before and is retired (files written under it resolve by name)", what, c.Name)
	}
	if _, ok := m.byName[c.Name]; ok {
		return refuse("%s: the name %q is still in use for a different %s", what, c.Name, m.kind)
	}
	return nil
}

// column evolves c (configured, in place) from old, its stored part: a
// top-level column or a struct field. top is the top-level column's name.
func (e *evolver) column(old, c *Column, label func(string) string, top string) error {
	c.ID, c.Aliases, c.RenamedFrom = old.ID, slices.Clone(old.Aliases), ""
	if c.Name != old.Name {
		c.Aliases = append(c.Aliases, old.Name)
		e.note("rename %s to %q", label(old.Name), c.Name)
	}
	return e.part(old, c, label(c.Name), "", top)
}

// part evolves a part's type, nullability, doc and nested parts. what
// names the part; hint says what is allowed to it in particular.
func (e *evolver) part(old, c *Column, what, hint, top string) error {
	switch {
	case old.Type == c.Type:
	case widens(old.Type, c.Type):
		e.note("widen %s from %s to %s", what, old.Type, c.Type)
	default:
		return refuse("%s from %s to %s%s", what, old.TypeString(), c.TypeString(), hint)
	}
	switch {
	case old.Nullable && !c.Nullable:
		return refuse("%s from nullable to required%s", what, hint)
	case !old.Nullable && c.Nullable:
		e.note("make %s nullable", what)
	}
	if old.Doc != c.Doc {
		e.note("change the doc of %s", what)
	}
	switch c.Type {
	case List:
		return e.element(old.Element, c.Element, top)
	case Struct:
		return e.fields(old, c, top)
	}
	return nil
}

func widens(from, to Type) bool {
	return from == Int32 && to == Int64 || from == Float32 && to == Float64
}

// element evolves a list's element, which matches positionally.
func (e *evolver) element(old, c *Column, top string) error {
	c.ID, c.Aliases, c.RenamedFrom = old.ID, slices.Clone(old.Aliases), ""
	hint := ": a list element can only be widened or made nullable"
	return e.part(old, c, "element of "+columnLabel(top), hint, top)
}

// fields evolves a struct's fields; they may be added (nullable),
// renamed, widened and made nullable, never dropped.
func (e *evolver) fields(old, c *Column, top string) error {
	label := func(name string) string { return fmt.Sprintf("field %q of column %q", name, top) }
	match, err := matchNames(old.Fields, c.Fields, namesTaken(old.Fields, nil), "field", label)
	if err != nil {
		return err
	}
	for i, j := range match {
		f := &c.Fields[i]
		if j >= 0 {
			if err := e.column(&old.Fields[j], f, label, top); err != nil {
				return err
			}
			continue
		}
		if !f.Nullable {
			return refuse("add %s as required: a new field must be nullable", label(f.Name))
		}
		e.note("add field %q to column %q", f.Name, top)
	}
	for j := range old.Fields {
		if !slices.Contains(match, j) {
			return refuse("drop %s: struct fields cannot be dropped", label(old.Fields[j].Name))
		}
	}
	if reordered(match) {
		e.note("reorder the fields of column %q to %s", top, quoteNames(c.Fields))
	}
	return nil
}

// reordered reports whether the kept parts are no longer in their stored
// order.
func reordered(match []int) bool {
	last := -1
	for _, j := range match {
		if j >= 0 {
			if j < last {
				return true
			}
			last = j
		}
	}
	return false
}

func quoteNames(cols []Column) string {
	names := make([]string, len(cols))
	for i := range cols {
		names[i] = fmt.Sprintf("%q", cols[i].Name)
	}
	return strings.Join(names, ", ")
}
