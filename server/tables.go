package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/schema"
)

// Several tables in one server. Each table is its own engine.Host (a host
// serves the shards of one table) with its own schema; the routes
//
//	/v1/tables/{table}/shards/...
//
// address the shards of one table, and the older routes
//
//	/v1/shards/...
//
// are their shorthand for the first table, so that a one-table writer and
// its clients need not name the table. The in-flight limits, the body
// limits and the tokens are the process's, shared by every table.

// Table is one table a server serves.
type Table struct {
	// Name is the table's name in the routes: required, and unique, when a
	// server has several tables. A lone table without one takes its host's,
	// once the engine tells it (see hostTable), else is unnamed and served
	// by the shorthand routes alone.
	Name string
	// Host holds the table's shards (required).
	Host *engine.Host
	// Schema is the table's schema, the host's engine.Options.Schema: the
	// decoders follow it (a json column keeps the JSON text sent, a list or
	// struct column decodes to values, an Arrow column's type must fit its
	// column's). Default schema.Rollout(), as the engine's; a shard that
	// tells its own schema is decoded by that one (see tableSchema).
	Schema *schema.Schema
	// Shards are the table's shards this process hosts. Readiness requires
	// every one of them to be open and healthy; a request for a shard
	// outside them is 404. Empty means whatever the host has open.
	Shards []string
}

// table is a Table as the server serves it.
type table struct {
	Table
	hosted map[string]bool // of Shards
}

func newTable(t Table) *table {
	out := &table{Table: t, hosted: map[string]bool{}}
	for _, name := range t.Shards {
		out.hosted[name] = true
	}
	return out
}

// tables are the tables to serve: Tables, or the one table of Host,
// Schema and Shards; with the defaults of Table filled in.
func (o *Options) tables() []Table {
	ts := o.Tables
	if len(ts) == 0 {
		ts = []Table{{Host: o.Host, Schema: o.Schema, Shards: o.Shards}}
	}
	out := make([]Table, len(ts))
	for i, t := range ts {
		if t.Name == "" && len(ts) == 1 && t.Host != nil {
			t.Name = hostTable(t.Host)
		}
		if t.Schema == nil {
			t.Schema = schema.Rollout()
		}
		out[i] = t
	}
	return out
}

// hostTable is the table of h, once the engine tells it (engine.Host has
// no accessor yet), else "".
func hostTable(h *engine.Host) string {
	if t, ok := any(h).(interface{ Table() string }); ok {
		return t.Table()
	}
	return ""
}

// Validate reports the first problem of the tables to serve. New panics
// on it; a caller with options from configuration validates first.
func (o *Options) Validate() error {
	if len(o.Tables) > 0 && (o.Host != nil || o.Schema != nil || len(o.Shards) > 0) {
		// One of the two would be ignored without a word.
		return errors.New("server: set Tables or Host, Schema and Shards, not both")
	}
	ts := o.tables()
	seen := map[string]bool{}
	for i, t := range ts {
		switch {
		case t.Host == nil:
			return fmt.Errorf("server: table %d (%q) has no host", i, t.Name)
		case t.Name == "" && len(ts) > 1:
			return fmt.Errorf("server: table %d has no name; each of several tables needs one", i)
		case seen[t.Name]:
			return fmt.Errorf("server: table %q is given twice", t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

// shardName names shard of t in messages: with its table, where it has a
// name, since several tables may each have a shard of that name.
func (t *table) shardName(shard string) string {
	if t.Name == "" {
		return shard
	}
	return fmt.Sprintf("%s of table %s", shard, t.Name)
}

// shardNames are the shards readiness requires and the table list shows:
// Shards, else those open.
func (t *table) shardNames() []string {
	if len(t.Shards) > 0 {
		return t.Shards
	}
	var out []string
	for _, sh := range t.Host.Shards() {
		out = append(out, sh.Name())
	}
	return out
}

// tableHandler serves a request addressed to table t.
type tableHandler func(w http.ResponseWriter, r *http.Request, t *table)

// first serves the shorthand routes, which address the first table.
func (s *Server) first(h tableHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { h(w, r, s.tables[0]) }
}

// named serves the routes that name their {table}, or answers 404.
func (s *Server) named(h tableHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("table")
		t, ok := s.byName[name]
		if !ok {
			s.failAs(w, r, errs.NotFound, apiError{Error: fmt.Sprintf("unknown table %q: not served here (tables: %s)", name, s.tableList()),
				Code: codeUnknownTable})
			return
		}
		h(w, r, t)
	}
}

// tableList names the tables for a message.
func (s *Server) tableList() string {
	names := make([]string, len(s.tables))
	for i, t := range s.tables {
		names[i] = fmt.Sprintf("%q", t.Name)
	}
	return strings.Join(names, ", ")
}

// TablesResponse answers GET /v1/tables.
type TablesResponse struct {
	Tables []TableInfo `json:"tables"`
}

// TableInfo is one table of a TablesResponse: its name and the shards
// readiness requires of it (those open, where the server was given none).
type TableInfo struct {
	Name   string   `json:"name"`
	Shards []string `json:"shards"`
}

func (s *Server) handleTables(w http.ResponseWriter, _ *http.Request) {
	out := TablesResponse{Tables: []TableInfo{}}
	for _, t := range s.tables {
		out.Tables = append(out.Tables, TableInfo{Name: t.Name, Shards: append([]string{}, t.shardNames()...)})
	}
	writeJSON(w, http.StatusOK, out)
}
