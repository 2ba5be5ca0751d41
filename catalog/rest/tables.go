package rest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/apache/iceberg-go"
	icecat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// Tables is one Reader over several catalogs, each holding one table (a
// process's tables each have their base catalog): namespaces are the
// union of theirs, a table is loaded from the catalog that holds it.
type Tables map[string]Reader

var _ Reader = Tables{}

// tableOf is the catalog of the table ident names; ErrNoSuchTable when
// none holds it.
func (ts Tables) tableOf(ident table.Identifier) (Reader, error) {
	if len(ident) > 0 {
		if r, ok := ts[ident[len(ident)-1]]; ok {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", icecat.ErrNoSuchTable, strings.Join(ident, "."))
}

// names are the table names in order, so that listings are stable.
func (ts Tables) names() []string {
	out := make([]string, 0, len(ts))
	for n := range ts {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (ts Tables) ListNamespaces(ctx context.Context, parent table.Identifier) ([]table.Identifier, error) {
	var out []table.Identifier
	for _, n := range ts.names() {
		nss, err := ts[n].ListNamespaces(ctx, parent)
		if err != nil && !errors.Is(err, icecat.ErrNoSuchNamespace) {
			return nil, err
		}
		for _, ns := range nss {
			if !slices.ContainsFunc(out, func(o table.Identifier) bool { return slices.Equal(o, ns) }) {
				out = append(out, ns)
			}
		}
	}
	return out, nil
}

func (ts Tables) LoadNamespaceProperties(ctx context.Context, ns table.Identifier) (iceberg.Properties, error) {
	for _, n := range ts.names() {
		props, err := ts[n].LoadNamespaceProperties(ctx, ns)
		if !errors.Is(err, icecat.ErrNoSuchNamespace) {
			return props, err
		}
	}
	return nil, fmt.Errorf("%w: %s", icecat.ErrNoSuchNamespace, strings.Join(ns, "."))
}

func (ts Tables) CheckNamespaceExists(ctx context.Context, ns table.Identifier) (bool, error) {
	for _, n := range ts.names() {
		if ok, err := ts[n].CheckNamespaceExists(ctx, ns); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

func (ts Tables) ListTables(ctx context.Context, ns table.Identifier) iter.Seq2[table.Identifier, error] {
	return func(yield func(table.Identifier, error) bool) {
		found := false
		for _, n := range ts.names() {
			for ident, err := range ts[n].ListTables(ctx, ns) {
				if errors.Is(err, icecat.ErrNoSuchNamespace) {
					break
				}
				found = found || err == nil
				if !yield(ident, err) {
					return
				}
			}
		}
		if !found {
			if ok, err := ts.CheckNamespaceExists(ctx, ns); err != nil || !ok {
				yield(nil, errors.Join(err, fmt.Errorf("%w: %s", icecat.ErrNoSuchNamespace, strings.Join(ns, "."))))
			}
		}
	}
}

func (ts Tables) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	r, err := ts.tableOf(ident)
	if err != nil {
		return nil, err
	}
	return r.LoadTable(ctx, ident)
}

func (ts Tables) CheckTableExists(ctx context.Context, ident table.Identifier) (bool, error) {
	r, err := ts.tableOf(ident)
	if err != nil {
		return false, nil
	}
	return r.CheckTableExists(ctx, ident)
}
