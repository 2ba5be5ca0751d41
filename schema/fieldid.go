package schema

import (
	"fmt"
	"slices"
)

// Field ids. Every column, list element and struct field has an Iceberg
// field id, kept for its whole life: files written under one schema
// version are read under a later one by id, not by name or position.
//
// A table created before ids were stored gets them by the rule that
// catalog.BaseSchema has always used, so its Iceberg ids do not change:
//
//	1, 2, 3                 id, _seq, _epoch
//	4 + i                   user column i
//	4 + len(columns), ...   nested parts, depth first in column order:
//	                        a list's element, then the element's parts;
//	                        a struct's fields (consecutive ids), then
//	                        each field's parts in order
//
// Wire format: the ids are in the etcd record, generation footers and
// the Iceberg metadata. Never renumber.

// FirstUserFieldID is the field id of the first user column (1 to 3 are
// id, _seq and _epoch). catalog.FirstUserFieldID is the same.
const FirstUserFieldID = 4

// WithFieldIDs returns a deep copy of cols with field ids. When no part
// has an id, they are assigned by the rule above; when every part has
// one, they are kept. nextID is the first id not used, at least
// FirstUserFieldID+len(cols). A mix of parts with and without ids is
// copied as it is: New refuses it.
func WithFieldIDs(cols []Column) (out []Column, nextID int) {
	out = copyColumns(cols)
	if hasFieldIDs(out) {
		return out, max(maxFieldID(out)+1, FirstUserFieldID+len(out))
	}
	for i := range out {
		out[i].ID = FirstUserFieldID + i
	}
	next := FirstUserFieldID + len(out)
	for i := range out {
		numberNested(&out[i], &next)
	}
	return out, next
}

// numberNested gives ids to c's nested parts that have none, from *next,
// depth first: a list's element and then its parts; a struct's fields and
// then each field's parts. Evolve numbers new parts the same way.
func numberNested(c *Column, next *int) {
	switch c.Type {
	case List:
		if c.Element.ID == 0 {
			c.Element.ID = *next
			*next++
		}
		numberNested(c.Element, next)
	case Struct:
		for f := range c.Fields {
			if c.Fields[f].ID == 0 {
				c.Fields[f].ID = *next
				*next++
			}
		}
		for f := range c.Fields {
			numberNested(&c.Fields[f], next)
		}
	}
}

// walkParts calls fn for every column and nested part with its path
// (messages[].role).
func walkParts(cols []Column, fn func(c *Column, path string)) {
	for i := range cols {
		walkPart(&cols[i], cols[i].Name, fn)
	}
}

func walkPart(c *Column, path string, fn func(c *Column, path string)) {
	fn(c, path)
	if c.Element != nil {
		walkPart(c.Element, path+"[]", fn)
	}
	for f := range c.Fields {
		walkPart(&c.Fields[f], path+"."+c.Fields[f].Name, fn)
	}
}

// hasFieldIDs reports whether any part has an id.
func hasFieldIDs(cols []Column) bool {
	found := false
	walkParts(cols, func(c *Column, _ string) { found = found || c.ID != 0 })
	return found
}

func maxFieldID(cols []Column) int {
	m := 0
	walkParts(cols, func(c *Column, _ string) { m = max(m, c.ID) })
	return m
}

// checkFieldIDs holds ids to what WithFieldIDs and Evolve make: on every
// part or on none, unique, and not those of the system columns.
func checkFieldIDs(cols []Column) error {
	if !hasFieldIDs(cols) {
		return nil
	}
	var err error
	owner := make(map[int]string)
	walkParts(cols, func(c *Column, path string) {
		switch prev, dup := owner[c.ID]; {
		case err != nil:
		case c.ID == 0:
			err = fmt.Errorf("schema: %s has no field id, but other parts have one (ids are on every part or on none)", path)
		case c.ID < FirstUserFieldID:
			err = fmt.Errorf("schema: %s: field id %d is below %d (1 to 3 are id, _seq and _epoch)", path, c.ID, FirstUserFieldID)
		case dup:
			err = fmt.Errorf("schema: %s and %s have the same field id %d", prev, path, c.ID)
		}
		owner[c.ID] = path
	})
	return err
}

// copyColumns is a deep copy: elements, fields and aliases included.
func copyColumns(cols []Column) []Column {
	if cols == nil {
		return nil
	}
	out := make([]Column, len(cols))
	for i := range cols {
		out[i] = copyColumn(&cols[i])
	}
	return out
}

func copyColumn(c *Column) Column {
	out := *c
	out.Aliases = slices.Clone(c.Aliases)
	out.Fields = copyColumns(c.Fields)
	if c.Element != nil {
		e := copyColumn(c.Element)
		out.Element = &e
	}
	return out
}
