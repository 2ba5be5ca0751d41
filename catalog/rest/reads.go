package rest

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Wire format of the answers (the specification's schemas of the same
// names). A next-page-token is null at the end of a list, never absent.
type (
	catalogConfig struct {
		Defaults  iceberg.Properties `json:"defaults"`
		Overrides iceberg.Properties `json:"overrides"`
		Endpoints []string           `json:"endpoints"`
	}
	listNamespacesResponse struct {
		Namespaces    []table.Identifier `json:"namespaces"`
		NextPageToken *string            `json:"next-page-token"`
	}
	getNamespaceResponse struct {
		Namespace  table.Identifier   `json:"namespace"`
		Properties iceberg.Properties `json:"properties"`
	}
	tableIdentifier struct {
		Namespace table.Identifier `json:"namespace"`
		Name      string           `json:"name"`
	}
	listTablesResponse struct {
		Identifiers   []tableIdentifier `json:"identifiers"`
		NextPageToken *string           `json:"next-page-token"`
	}
	loadTableResult struct {
		MetadataLocation string             `json:"metadata-location"`
		Metadata         table.Metadata     `json:"metadata"`
		Config           iceberg.Properties `json:"config"`
	}
	oauthError struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
)

// endpoints is what GET /v1/config advertises: the reads that a client
// needs to find, load and scan a table. A client that negotiates endpoints
// refuses every other operation itself, before sending it.
var endpoints = []string{
	"GET /v1/{prefix}/namespaces",
	"GET /v1/{prefix}/namespaces/{namespace}",
	"HEAD /v1/{prefix}/namespaces/{namespace}",
	"GET /v1/{prefix}/namespaces/{namespace}/tables",
	"GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
	"HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
}

// nsSeparator is the namespace separator (the specification's default,
// 0x1F, %1F in a URL).
const nsSeparator = "\x1f"

// namespace checks a namespace from a path or from the parent parameter,
// its levels joined by 0x1F. This catalog has one level: a nested
// namespace does not exist.
func namespace(s string) (table.Identifier, *apiError) {
	levels := strings.Split(s, nsSeparator)
	if slices.Contains(levels, "") {
		return nil, badRequest("namespace %q has an empty level", strings.Join(levels, "."))
	}
	if len(levels) > 1 {
		return nil, noSuchNamespace(strings.Join(levels, "."), ": this catalog has one namespace level")
	}
	return table.Identifier{s}, nil
}

func (h *handler) config(_ context.Context, w http.ResponseWriter, r *http.Request, _ params) {
	c := catalogConfig{Defaults: iceberg.Properties{}, Overrides: iceberg.Properties{}, Endpoints: endpoints}
	if h.opts.Prefix != "" {
		c.Overrides["prefix"] = h.opts.Prefix
	}
	h.ok(w, r, c)
}

func (h *handler) listNamespaces(ctx context.Context, w http.ResponseWriter, r *http.Request, _ params) {
	q := r.URL.Query()
	var parent table.Identifier
	if p := q.Get("parent"); p != "" { // empty: absent, as the specification says for now
		var e *apiError
		if parent, e = namespace(p); e != nil {
			h.fail(w, r, e)
			return
		}
	}
	pg, e := h.pager(q)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	nss, err := h.cat.ListNamespaces(ctx, parent)
	if err != nil {
		h.fail(w, r, h.fromCatalog(r, err, strings.Join(parent, ".")))
		return
	}
	key := func(ns table.Identifier) string { return strings.Join(ns, nsSeparator) }
	nss = slices.Clone(nss)
	slices.SortFunc(nss, func(a, b table.Identifier) int { return cmp.Compare(key(a), key(b)) })
	nss = slices.CompactFunc(nss, func(a, b table.Identifier) bool { return key(a) == key(b) })
	out, next := page(nss, key, pg)
	h.ok(w, r, listNamespacesResponse{Namespaces: append([]table.Identifier{}, out...), NextPageToken: next})
}

func (h *handler) loadNamespace(ctx context.Context, w http.ResponseWriter, r *http.Request, p params) {
	ns, e := namespace(p.ns)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	props, err := h.cat.LoadNamespaceProperties(ctx, ns)
	if err != nil {
		h.fail(w, r, h.fromCatalog(r, err, p.ns))
		return
	}
	if props == nil {
		props = iceberg.Properties{}
	}
	h.ok(w, r, getNamespaceResponse{Namespace: ns, Properties: props})
}

func (h *handler) namespaceExists(ctx context.Context, w http.ResponseWriter, r *http.Request, p params) {
	if h.requireNamespace(ctx, w, r, p) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// requireNamespace reports whether the path's namespace exists; when it
// does not (or cannot be checked) it has answered with the error.
func (h *handler) requireNamespace(ctx context.Context, w http.ResponseWriter, r *http.Request, p params) bool {
	ns, e := namespace(p.ns)
	if e != nil {
		h.fail(w, r, e)
		return false
	}
	ok, err := h.cat.CheckNamespaceExists(ctx, ns)
	switch {
	case err != nil:
		h.fail(w, r, h.fromCatalog(r, err, p.ns))
	case !ok:
		h.fail(w, r, noSuchNamespace(p.ns, ""))
	}
	return err == nil && ok
}

func (h *handler) listTables(ctx context.Context, w http.ResponseWriter, r *http.Request, p params) {
	ns, e := namespace(p.ns)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	pg, e := h.pager(r.URL.Query())
	if e != nil {
		h.fail(w, r, e)
		return
	}
	ids := []tableIdentifier{}
	for ident, err := range h.cat.ListTables(ctx, ns) {
		if err != nil {
			h.fail(w, r, h.fromCatalog(r, err, p.ns))
			return
		}
		if len(ident) < 2 {
			continue // not a table identifier; no catalog yields one
		}
		ids = append(ids, tableIdentifier{Namespace: slices.Clone(ident[:len(ident)-1]), Name: ident[len(ident)-1]})
	}
	key := func(t tableIdentifier) string { return t.Name }
	slices.SortFunc(ids, func(a, b tableIdentifier) int { return cmp.Compare(a.Name, b.Name) })
	ids = slices.CompactFunc(ids, func(a, b tableIdentifier) bool { return a.Name == b.Name })
	out, next := page(ids, key, pg)
	h.ok(w, r, listTablesResponse{Identifiers: out, NextPageToken: next})
}

// tableIdent checks the path's namespace and table.
func tableIdent(p params) (table.Identifier, string, *apiError) {
	ns, e := namespace(p.ns)
	if e != nil {
		return nil, "", e
	}
	return append(ns, p.name), p.ns + "." + p.name, nil
}

func (h *handler) loadTable(ctx context.Context, w http.ResponseWriter, r *http.Request, p params) {
	ident, name, e := tableIdent(p)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	// snapshots=refs asks for the referenced snapshots only; all of them
	// are a superset that every client reads.
	if s := r.URL.Query().Get("snapshots"); s != "" && s != "all" && s != "refs" {
		h.fail(w, r, badRequest("snapshots %q: want all or refs", s))
		return
	}
	tbl, err := h.cat.LoadTable(ctx, ident)
	if err != nil {
		h.fail(w, r, h.fromCatalog(r, err, name))
		return
	}
	h.ok(w, r, loadTableResult{MetadataLocation: tbl.MetadataLocation(), Metadata: tbl.Metadata(), Config: iceberg.Properties{}})
}

func (h *handler) tableExists(ctx context.Context, w http.ResponseWriter, r *http.Request, p params) {
	ident, name, e := tableIdent(p)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	ok, err := h.cat.CheckTableExists(ctx, ident)
	switch {
	case err != nil:
		h.fail(w, r, h.fromCatalog(r, err, name))
	case !ok:
		h.fail(w, r, noSuchTable(name))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// reportMetrics accepts a scan or commit report and drops it unread:
// clients that do not negotiate endpoints send one after every scan, and
// a refusal would only fill their logs. It changes nothing.
func (h *handler) reportMetrics(_ context.Context, w http.ResponseWriter, _ *http.Request, _ params) {
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) unsupported(_ context.Context, w http.ResponseWriter, r *http.Request, _ params) {
	h.fail(w, r, &apiError{status: http.StatusNotAcceptable, typ: typeUnsupported,
		msg: "this catalog neither plans scans nor vends credentials: load the table and plan the scan in the client"})
}

func (h *handler) listViews(ctx context.Context, w http.ResponseWriter, r *http.Request, p params) {
	if h.requireNamespace(ctx, w, r, p) {
		h.ok(w, r, listTablesResponse{Identifiers: []tableIdentifier{}})
	}
}

func (h *handler) noSuchView(_ context.Context, w http.ResponseWriter, r *http.Request, p params) {
	h.fail(w, r, &apiError{status: http.StatusNotFound, typ: typeNoSuchView,
		msg: "view " + strings.ReplaceAll(p.ns, nsSeparator, ".") + "." + p.name + " does not exist: this catalog has no views"})
}

// oauthTokens answers the deprecated token exchange in OAuth's own error
// format (RFC 6749 §5.2), which clients decode for this endpoint.
func (h *handler) oauthTokens(_ context.Context, w http.ResponseWriter, _ *http.Request, _ params) {
	writeJSON(w, http.StatusBadRequest, oauthError{Error: "unsupported_grant_type",
		Description: "this catalog issues no tokens: configure the client with the property token=<bearer token> instead of credential"})
}
