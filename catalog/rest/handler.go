package rest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Defaults of Options.
const (
	DefaultMaxTargetBytes = 4 << 10
	DefaultMaxPageSize    = 1000
	DefaultRequestTimeout = 30 * time.Second
)

// Options configure NewHandler.
type Options struct {
	// Prefix, when not empty, is the {prefix} path segment of the catalog's
	// routes: GET /v1/config hands it to clients as the override "prefix",
	// and the routes are served under /v1/<Prefix>/ only (a client that
	// ignored the override gets 404s that say so). 1 to 128 bytes of
	// A-Z a-z 0-9 . _ -. Empty (the default): /v1/namespaces/….
	Prefix string
	// Tokens are the bearer tokens accepted, several for rotation. With
	// any, every request needs one; with none (the default), none is
	// needed.
	Tokens []string
	// Logger receives internal errors, each with the reference its 500
	// carries, at error, and refusals at debug; nil discards.
	Logger *slog.Logger
	// MaxTargetBytes bounds a request's target, path and query; a longer
	// one is answered 414. 0: DefaultMaxTargetBytes.
	MaxTargetBytes int
	// MaxPageSize bounds a page of a paged list (one that sends
	// pageToken), and is the page size when pageSize is absent. 0:
	// DefaultMaxPageSize.
	MaxPageSize int
	// RequestTimeout bounds the catalog's work for one request. 0:
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
}

// EnsureDefaults fills in the zero fields.
func (o *Options) EnsureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxTargetBytes == 0 {
		o.MaxTargetBytes = DefaultMaxTargetBytes
	}
	if o.MaxPageSize == 0 {
		o.MaxPageSize = DefaultMaxPageSize
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
}

// Validate checks options after EnsureDefaults.
func (o *Options) Validate() error {
	switch {
	case o.Prefix != "" && !validSegment(o.Prefix):
		return fmt.Errorf("rest: prefix %q: want 1 to 128 bytes of A-Z a-z 0-9 . _ -", o.Prefix)
	case o.MaxTargetBytes < 64:
		return fmt.Errorf("rest: MaxTargetBytes %d: want at least 64", o.MaxTargetBytes)
	case o.MaxPageSize < 1:
		return fmt.Errorf("rest: MaxPageSize %d: want at least 1", o.MaxPageSize)
	case o.RequestTimeout < 0:
		return fmt.Errorf("rest: negative RequestTimeout %v", o.RequestTimeout)
	}
	for i, t := range o.Tokens {
		if t == "" || strings.ContainsAny(t, " \t\r\n") {
			return fmt.Errorf("rest: token %d is empty or has white space", i)
		}
	}
	return nil
}

func validSegment(s string) bool {
	if len(s) > 128 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// handler serves one catalog. It keeps no state between requests but the
// counter of error references.
type handler struct {
	cat    Reader
	opts   Options
	log    *slog.Logger
	tokens atomic.Pointer[[][sha256.Size]byte] // swapped whole by SetTokens
	refs   atomic.Uint64
}

// Handler is the catalog's http.Handler, whose tokens can be replaced
// while it serves.
type Handler struct{ h *handler }

func (x *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { x.h.ServeHTTP(w, r) }

// SetTokens replaces the accepted tokens, for rotation without a restart;
// a request is checked against the old set or the new, never a mix. None
// admits everyone from then on: keeping a token required is the
// caller's to do.
func (x *Handler) SetTokens(tokens []string) error {
	o := Options{Tokens: tokens}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return err
	}
	x.h.setTokens(tokens)
	return nil
}

func (h *handler) setTokens(tokens []string) {
	ds := make([][sha256.Size]byte, 0, len(tokens))
	for _, t := range tokens {
		ds = append(ds, sha256.Sum256([]byte(t)))
	}
	h.tokens.Store(&ds)
}

// Reader is what the handler reads of a catalog: every icecat.Catalog is
// one, and so is a view over several (one per table of a process).
type Reader interface {
	ListNamespaces(ctx context.Context, parent table.Identifier) ([]table.Identifier, error)
	LoadNamespaceProperties(ctx context.Context, namespace table.Identifier) (iceberg.Properties, error)
	CheckNamespaceExists(ctx context.Context, namespace table.Identifier) (bool, error)
	ListTables(ctx context.Context, namespace table.Identifier) iter.Seq2[table.Identifier, error]
	LoadTable(ctx context.Context, identifier table.Identifier) (*table.Table, error)
	CheckTableExists(ctx context.Context, identifier table.Identifier) (bool, error)
}

// NewHandler returns the read-only REST catalog over cat (see the package
// documentation). It panics when cat is nil or opts do not validate: call
// opts.Validate first to get an error instead.
func NewHandler(cat Reader, opts Options) *Handler {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	if cat == nil {
		panic("rest: nil catalog")
	}
	h := &handler{cat: cat, opts: opts, log: opts.Logger}
	h.setTokens(opts.Tokens)
	return &Handler{h}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	target := r.RequestURI
	if target == "" {
		target = r.URL.RequestURI()
	}
	if len(target) > h.opts.MaxTargetBytes {
		h.fail(w, r, &apiError{status: http.StatusRequestURITooLong, typ: typeBadRequest,
			msg: fmt.Sprintf("the request target is %d bytes, more than the %d this catalog reads", len(target), h.opts.MaxTargetBytes)})
		return
	}
	if !h.authorized(w, r) {
		return
	}
	segs, err := splitPath(r.URL.EscapedPath())
	if err != nil {
		h.fail(w, r, badRequest("malformed path: %v", err))
		return
	}
	res, t, e := h.route(segs)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	if op, ok := res.reads[r.Method]; ok {
		ctx, cancel := context.WithTimeout(r.Context(), h.opts.RequestTimeout)
		defer cancel()
		op(h, ctx, w, r, t)
		return
	}
	if what, ok := res.writes[r.Method]; ok {
		h.fail(w, r, &apiError{status: http.StatusForbidden, typ: "ForbiddenException",
			msg: fmt.Sprintf("this catalog is read-only: tables are written by rollwal's merge (refused: %s)", what)})
		return
	}
	allow := make([]string, 0, len(res.reads))
	for _, m := range methodOrder {
		if _, ok := res.reads[m]; ok {
			allow = append(allow, m)
		}
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	h.fail(w, r, &apiError{status: http.StatusMethodNotAllowed, typ: "MethodNotAllowedException",
		msg: fmt.Sprintf("%s is not a method of %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))})
}

var methodOrder = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete}

// splitPath splits an escaped path into its unescaped segments, so that an
// escaped "/" (%2F) stays inside its segment and %1F is the byte 0x1F.
func splitPath(escaped string) ([]string, error) {
	raw := strings.Split(strings.TrimPrefix(escaped, "/"), "/")
	segs := make([]string, len(raw))
	for i, s := range raw {
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, err
		}
		segs[i] = u
	}
	return segs, nil
}

// authorized checks the bearer token when tokens are configured, or
// answers 401.
func (h *handler) authorized(w http.ResponseWriter, r *http.Request) bool {
	tokens := *h.tokens.Load()
	if len(tokens) == 0 {
		return true
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="rollwal"`)
		h.fail(w, r, &apiError{status: http.StatusUnauthorized, typ: "NotAuthorizedException",
			msg: "this catalog needs a bearer token: send Authorization: Bearer TOKEN (the client property \"token\")"})
		return false
	}
	d := sha256.Sum256([]byte(tok))
	found := 0
	for i := range tokens { // every digest, in constant time: the time says nothing of which matched
		found |= subtle.ConstantTimeCompare(d[:], tokens[i][:])
	}
	if found == 1 {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="rollwal", error="invalid_token"`)
	h.fail(w, r, &apiError{status: http.StatusUnauthorized, typ: "NotAuthorizedException",
		msg: "the bearer token is not one this catalog accepts"})
	return false
}

// op serves a read. ctx is the request's, bounded by RequestTimeout.
type op func(h *handler, ctx context.Context, w http.ResponseWriter, r *http.Request, t params)

// params are a route's path parameters, unescaped.
type params struct {
	ns, name string
}

// resource is what a path names: the reads served, by method, and the
// writes refused, by method, with what they would do.
type resource struct {
	reads  map[string]op
	writes map[string]string
}

var (
	resConfig     = resource{reads: map[string]op{http.MethodGet: (*handler).config}}
	resOAuth      = resource{reads: map[string]op{http.MethodPost: (*handler).oauthTokens}}
	resNamespaces = resource{reads: map[string]op{http.MethodGet: (*handler).listNamespaces},
		writes: map[string]string{http.MethodPost: "create namespace"}}
	resNamespace = resource{reads: map[string]op{http.MethodGet: (*handler).loadNamespace, http.MethodHead: (*handler).namespaceExists},
		writes: map[string]string{http.MethodDelete: "drop namespace"}}
	resNamespaceProps = resource{writes: map[string]string{http.MethodPost: "update namespace properties"}}
	resTables         = resource{reads: map[string]op{http.MethodGet: (*handler).listTables},
		writes: map[string]string{http.MethodPost: "create table"}}
	resRegister = resource{writes: map[string]string{http.MethodPost: "register table"}}
	resTable    = resource{reads: map[string]op{http.MethodGet: (*handler).loadTable, http.MethodHead: (*handler).tableExists},
		writes: map[string]string{http.MethodPost: "commit to table", http.MethodDelete: "drop table"}}
	resMetrics  = resource{reads: map[string]op{http.MethodPost: (*handler).reportMetrics}}
	resPlanning = resource{reads: map[string]op{http.MethodGet: (*handler).unsupported, http.MethodPost: (*handler).unsupported,
		http.MethodDelete: (*handler).unsupported}}
	resViews = resource{reads: map[string]op{http.MethodGet: (*handler).listViews},
		writes: map[string]string{http.MethodPost: "create view"}}
	resView = resource{reads: map[string]op{http.MethodGet: (*handler).noSuchView, http.MethodHead: (*handler).noSuchView},
		writes: map[string]string{http.MethodPost: "replace view", http.MethodDelete: "drop view"}}
	resRegisterView = resource{writes: map[string]string{http.MethodPost: "register view"}}
	resRenameTable  = resource{writes: map[string]string{http.MethodPost: "rename table"}}
	resRenameView   = resource{writes: map[string]string{http.MethodPost: "rename view"}}
	resTransaction  = resource{writes: map[string]string{http.MethodPost: "commit transaction"}}
)

// route finds the resource of a path's segments (the first is "v1").
func (h *handler) route(segs []string) (resource, params, *apiError) {
	if len(segs) < 2 || segs[0] != "v1" {
		return resource{}, params{}, h.noRoute(segs)
	}
	rest := segs[1:]
	switch {
	case len(rest) == 1 && rest[0] == "config":
		return resConfig, params{}, nil
	case len(rest) == 2 && rest[0] == "oauth" && rest[1] == "tokens":
		return resOAuth, params{}, nil
	}
	if h.opts.Prefix != "" {
		if rest[0] != h.opts.Prefix {
			return resource{}, params{}, h.noRoute(segs)
		}
		rest = rest[1:]
	}
	if res, p, ok := match(rest); ok {
		return res, p, nil
	}
	return resource{}, params{}, h.noRoute(segs)
}

func match(s []string) (resource, params, bool) {
	n := len(s)
	if n == 2 {
		switch s[0] + "/" + s[1] {
		case "tables/rename":
			return resRenameTable, params{}, true
		case "views/rename":
			return resRenameView, params{}, true
		case "transactions/commit":
			return resTransaction, params{}, true
		}
	}
	if n == 0 || s[0] != "namespaces" {
		return resource{}, params{}, false
	}
	if n == 1 {
		return resNamespaces, params{}, true
	}
	p := params{ns: s[1]}
	if n == 2 {
		return resNamespace, p, true
	}
	if n == 3 {
		switch s[2] {
		case "properties":
			return resNamespaceProps, p, true
		case "tables":
			return resTables, p, true
		case "register":
			return resRegister, p, true
		case "views":
			return resViews, p, true
		case "register-view":
			return resRegisterView, p, true
		}
		return resource{}, params{}, false
	}
	p.name = s[3]
	switch {
	case s[2] == "tables" && n == 4:
		return resTable, p, true
	case s[2] == "views" && n == 4:
		return resView, p, true
	case s[2] != "tables":
		return resource{}, params{}, false
	case n == 5 && s[4] == "metrics":
		return resMetrics, p, true
	case n == 5 && (s[4] == "credentials" || s[4] == "plan" || s[4] == "tasks"), n == 6 && s[4] == "plan":
		return resPlanning, p, true
	}
	return resource{}, params{}, false
}

func (h *handler) noRoute(segs []string) *apiError {
	msg := "no such endpoint in the Iceberg REST catalog API"
	if h.opts.Prefix != "" {
		msg += fmt.Sprintf("; this catalog's routes are under /v1/%s/ (the \"prefix\" GET /v1/config hands out)", h.opts.Prefix)
	}
	return &apiError{status: http.StatusNotFound, typ: "NotFoundException", msg: msg}
}
