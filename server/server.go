// Package server is the writer's HTTP interface: NDJSON and Arrow IPC
// ingest into the shards of one or several tables (an engine.Host each),
// flush, status, liveness, readiness and metrics.
//
// It adds no storage of its own: a request's rows are decoded (against the
// table's schema), handed to the shard's Append as one batch, and answered
// 200 only once the engine acknowledged them, that is once they are durable
// in the WAL. A refusal is answered with the status of its error's
// category (package errs) and a code naming it (but for the HTTP layer's
// own 401, 403, 408 and 415), which the Go client (package client) and the
// Python one read back to decide whether to retry. What the server does
// bound is what requests cost before they reach the engine: body and row
// limits, the bytes and requests in flight (429 beyond them), and bearer
// tokens for ingest and for admin routes.
//
// The routes of a table's shards, all under /v1/tables/{table}:
//
//	POST /shards/{shard}/rows                   ingest (NDJSON or Arrow IPC)
//	POST /shards/{shard}/flush                  flush (admin)
//	GET  /shards/{shard}                        the shard's engine.Status
//	GET  /shards/{shard}/producers/{producer}   where a producer resumes
//	GET  /shards                                every open shard's status
//
// and each again under /v1 alone (POST /v1/shards/{shard}/rows, ...), as
// the shorthand for the first table (see tables.go). GET /v1/tables lists
// the tables and their shards. The probes /livez and /readyz and /metrics
// are the process's.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/wal"
)

// DefaultMaxBodyBytes bounds a request body unless Options.MaxBodyBytes is set.
const DefaultMaxBodyBytes = 64 << 20

// DefaultMaxRows bounds the rows of a request unless Options.MaxRows is set:
// the engine's default MaxBatchRows.
const DefaultMaxRows = 100000

// Content types of the ingest endpoint.
const (
	ContentTypeNDJSON = "application/x-ndjson"
	ContentTypeArrow  = "application/vnd.apache.arrow.stream"
)

// Options configure a Server.
type Options struct {
	// Tables are the tables served, each with its host, schema and shards
	// (see Table). The first is the one the shorthand routes /v1/shards/...
	// address; the others are reached by /v1/tables/{table}/shards/...
	// alone. Readiness requires the shards of every table.
	Tables []Table
	// Host, Schema and Shards are the one table of a server without
	// Tables, as its Table's fields; set them or Tables, not both.
	Host   *engine.Host
	Schema *schema.Schema
	Shards []string
	// Logger receives request errors; default discards.
	Logger *slog.Logger
	// Registry is served on /metrics; nil serves an empty registry.
	Registry *prometheus.Registry
	// MaxBodyBytes bounds a request body; default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxRows bounds the rows of a request while it is decoded, before the
	// engine's own MaxBatchRows applies; default DefaultMaxRows.
	MaxRows int
	// MaxDecodedBytes bounds what a request decodes to while it is
	// decoded: NDJSON values as a WAL record holds them, Arrow buffers as
	// their (compressed buffers: declared) uncompressed lengths, summed over
	// the stream, and the values made of them at decodedPerWAL times it
	// (valueReader). Default wal.MaxPayloadSize: a batch larger than one WAL
	// record cannot be stored, so decoding it is refused with 413 before
	// it costs that memory.
	MaxDecodedBytes int64
	// MaxInflightBytes bounds the body bytes that ingest requests in
	// flight reserve together (see inflight.go); default
	// DefaultMaxInflightBytes, and never below MaxBodyBytes, so that a body
	// of any size accepted can be admitted.
	MaxInflightBytes int64
	// MaxInflightRequests bounds the ingest requests in flight; default
	// one per MiB of MaxInflightBytes, at least 16.
	MaxInflightRequests int
	// InflightWait bounds how long a request waits for room within those
	// limits before it is answered 429 inflight_limit; default
	// DefaultInflightWait, negative refuses at once.
	InflightWait time.Duration
	// HTTP bounds the connections of the listeners (HTTPServer, Listener).
	HTTP HTTPOptions
	// IngestTokens, when any is set, are the bearer tokens that ingest and
	// the reads of /v1/ need; AdminTokens, when any is set, those that
	// flush needs (see auth.go). Probes and /metrics need none.
	IngestTokens, AdminTokens []string
}

// DefaultMaxInflightBytes is one eighth of the engine's default memory
// budget (512 MiB). A request in flight costs about three times its body:
// its rows (1.4 times the body for 1 KiB-class NDJSON rows), the WAL
// record the engine encodes from them (about the body again) and, until
// the next collection, the garbage of decoding; so ingest adds some 3/8 of
// the budget at most. It equals DefaultMaxBodyBytes: one request of the
// largest size, or many smaller ones, at a time.
const DefaultMaxInflightBytes = 64 << 20

// InflightBytesFor is the default MaxInflightBytes for an engine memory
// budget: one eighth of it, and at least the body limit.
func InflightBytesFor(budget, maxBody int64) int64 { return max(budget/8, maxBody) }

// Server is an http.Handler over the hosts of its tables.
type Server struct {
	opts   Options
	mux    *http.ServeMux
	ready  atomic.Bool
	tables []*table // Options.tables(); the first is the shorthand's
	byName map[string]*table

	probeMu sync.Mutex
	probing map[*engine.Shard]*probe
	last    map[*engine.Shard]string

	inflight   *inflight
	conns      *connCount // of the ingest listener
	probeConns *connCount
	tokens     atomic.Pointer[tokens] // swapped whole by SetTokens
	probes     *http.ServeMux         // /livez, /readyz, /metrics
	http       *httpMetrics
	handler    http.Handler // mux, counted and timed

	// readyMu guards reason, the last answer of /readyz ("" ready), whose
	// changes alone are logged above DEBUG.
	readyMu sync.Mutex
	reason  string
}

// probe is one in-flight Status call made for readiness.
type probe struct {
	done    chan struct{}
	stopped string
}

// probeWait bounds how long /readyz waits for a shard's status (a flush
// holds it); past that the last known state answers.
const probeWait = 300 * time.Millisecond

// New returns a server that is not ready until SetReady(true). It panics
// when opts do not Validate.
func New(opts Options) *Server {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	opts.ensureDefaults()
	s := &Server{opts: opts, mux: http.NewServeMux(), byName: map[string]*table{},
		probing: map[*engine.Shard]*probe{}, last: map[*engine.Shard]string{},
		inflight: newInflight(opts.MaxInflightBytes, int64(opts.MaxInflightRequests), opts.InflightWait, opts.Registry),
		probes:   http.NewServeMux(), reason: "not started"}
	s.SetTokens(opts.IngestTokens, opts.AdminTokens)
	s.conns, s.probeConns = newConnCounts(opts.Registry)
	s.http = newHTTPMetrics(opts.Registry)
	for _, t := range opts.tables() {
		s.tables = append(s.tables, newTable(t))
		s.byName[t.Name] = s.tables[len(s.tables)-1]
	}
	s.route()
	s.handler = s.http.wrap(s.mux)
	opts.Logger.Info("http limits", "max_body_bytes", opts.MaxBodyBytes, "max_inflight_bytes", opts.MaxInflightBytes,
		"max_inflight_requests", opts.MaxInflightRequests, "max_conns", opts.HTTP.MaxConns,
		"ingest_tokens", len(opts.IngestTokens), "admin_tokens", len(opts.AdminTokens))
	for _, mux := range []*http.ServeMux{s.mux, s.probes} {
		mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			io.WriteString(w, "ok\n")
		})
		mux.HandleFunc("GET /readyz", s.handleReady)
		mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{Registry: opts.Registry}))
	}
	return s
}

// route registers the /v1/ routes: each table route twice, under
// /v1/tables/{table} and as the first table's shorthand under /v1.
func (s *Server) route() {
	for _, rt := range []struct {
		method, path string
		need         scope
		h            tableHandler
	}{
		{"POST", "/shards/{shard}/rows", scopeIngest, s.handleRows},
		{"POST", "/shards/{shard}/flush", scopeAdmin, s.handleFlush},
		{"GET", "/shards/{shard}", scopeIngest, s.handleStatus},
		{"GET", "/shards/{shard}/producers/{producer}", scopeIngest, s.handleProducer},
		{"GET", "/shards", scopeIngest, s.handleList},
	} {
		s.mux.HandleFunc(rt.method+" /v1"+rt.path, s.authorize(rt.need, s.first(rt.h)))
		s.mux.HandleFunc(rt.method+" /v1/tables/{table}"+rt.path, s.authorize(rt.need, s.named(rt.h)))
	}
	s.mux.HandleFunc("GET /v1/tables", s.authorize(scopeIngest, s.handleTables))
}

func (o *Options) ensureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	setDefault(&o.MaxBodyBytes, DefaultMaxBodyBytes)
	setDefault(&o.MaxRows, DefaultMaxRows)
	setDefault(&o.MaxDecodedBytes, wal.MaxPayloadSize)
	setDefault(&o.MaxInflightBytes, DefaultMaxInflightBytes)
	o.MaxInflightBytes = max(o.MaxInflightBytes, o.MaxBodyBytes)
	setDefault(&o.MaxInflightRequests, max(16, int(o.MaxInflightBytes>>20)))
	switch {
	case o.InflightWait == 0:
		o.InflightWait = DefaultInflightWait
	case o.InflightWait < 0:
		o.InflightWait = 0
	}
	o.HTTP.ensureDefaults()
}

// Inflight returns what ingest requests in flight hold now, and the most
// they held at once.
func (s *Server) Inflight() InflightStats { return s.inflight.stats() }

// SetReady marks the server ready (after every shard replayed) or unready
// (at shutdown).
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// apiError is the JSON body of every error answer. Line locates an NDJSON
// row (1-based) and ByteOffset, where known, the refused byte in that line
// (0-based); RecordBatch and Row locate an Arrow row (0-based, as Arrow
// libraries index them). Path locates the refused part of a list or struct
// value, from its column (messages[3].role); for an Arrow type, [] stands
// for a list's elements.
//
// The status is the category's of the error (package errs: one table for
// the server and the client), but for the answers of the HTTP layer (401
// and 403 of access control, 408 of a body that came too slowly, 415) and
// a 500 of an error no category covers. Code names the kind of refusal
// where one status covers several (see the code* constants; errs.FromHTTP
// reads the category back from status and code); Parameter names the
// query parameter a 400 refuses. The producer fields are set on a 409 with
// code "sequence" only.
type apiError struct {
	Error       string `json:"error"`
	Code        string `json:"code,omitempty"`
	Parameter   string `json:"parameter,omitempty"`
	Line        int    `json:"line,omitempty"`
	ByteOffset  *int   `json:"byte_offset,omitempty"`
	RecordBatch *int   `json:"record_batch,omitempty"`
	Row         *int   `json:"row,omitempty"`
	Column      string `json:"column,omitempty"`
	Path        string `json:"path,omitempty"`
	// Producer, Seq and Count are the refused batch's session, first
	// sequence and row count; ExpectedSeq the producer's next expected
	// sequence; UnknownProducer that the shard holds no state for it.
	Producer        string  `json:"producer,omitempty"`
	Seq             *uint64 `json:"seq,omitempty"`
	Count           *int    `json:"count,omitempty"`
	ExpectedSeq     *uint64 `json:"expected_seq,omitempty"`
	UnknownProducer *bool   `json:"unknown_producer,omitempty"`
}

// Codes of error answers, in apiError.Code. Each is one of its category's
// errs codes (TestAnswerCodes checks).
const (
	codeBadParameter     = "bad_parameter"      // 400: a query parameter is malformed
	codeInvalidAppend    = "invalid_append"     // 400: the engine refused the producer id, sequence or source
	codeSequence         = "sequence"           // 409: the batch is not at the producer's next expected sequence
	codeConflict         = "conflict"           // 409: another conflict with the shard's state (nothing written)
	codeNotOwner         = "not_owner"          // 409: fenced, not the owner (an append: nothing written)
	codeOutcomeUnknown   = "outcome_unknown"    // 409: written, but not acknowledged
	codeBackpressure     = "backpressure"       // 429: memory budget exhausted; Retry-After
	codeMergesBehind     = "merges_behind"      // 429: the shard waits for a merge; Retry-After
	codeTooManyProducers = "too_many_producers" // 429: the shard's producer limit; no Retry-After
	codeTooLarge         = "too_large"          // 413: too many rows or bytes for one request or one WAL record
	codeStopped          = "stopped"            // 503: the shard stopped taking writes
	codeDiskFull         = "disk_full"          // 503: the shard waits for disk space (it recovers by itself); Retry-After
	codeStoreDown        = "store_down"         // 503: the object WAL's store does not take objects (it recovers by itself); Retry-After
	codeNotApplied       = "not_applied"        // 503: a flush's commit proved not applied (the shard retries it); retry
	codeCorruption       = "corruption"         // 500: stored data is corrupt; not retried, an operator repairs
	codeInflightLimit    = "inflight_limit"     // 429: the in-flight ingest bytes or requests are at their limit; Retry-After
	codeBodyTimeout      = "body_timeout"       // 408: the body did not arrive within the body read timeout
	codeUnknownTable     = "unknown_table"      // 404: the route names a table the server does not serve
)

// AppendResponse answers a successful ingest.
type AppendResponse struct {
	Acked      int    `json:"acked"`
	Stored     int    `json:"stored"`
	Duplicates int    `json:"duplicates"`
	FirstSeq   uint64 `json:"first_seq"`
	LastSeq    uint64 `json:"last_seq"`
	Generation uint64 `json:"generation"`
}

// FlushResponse answers a flush.
type FlushResponse struct {
	Generation uint64 `json:"generation"`
}

// ListResponse answers GET /v1/shards and /v1/tables/{table}/shards.
// Table is the table's name ("" for an unnamed lone table).
type ListResponse struct {
	Table  string          `json:"table,omitempty"`
	Shards []engine.Status `json:"shards"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// failAs answers a refused request of category c, with c's status.
func (s *Server) failAs(w http.ResponseWriter, r *http.Request, c *errs.Category, e apiError) {
	s.fail(w, r, c.HTTPStatus(), e)
}

// fail answers a refused request; a 5xx, which producers take as an
// unknown outcome, is logged at WARN, the rest at DEBUG.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, code int, e apiError) {
	level := slog.LevelDebug
	if code >= 500 {
		level = slog.LevelWarn
	}
	s.failAt(w, r, level, code, e)
}

func (s *Server) failAt(w http.ResponseWriter, r *http.Request, level slog.Level, code int, e apiError) {
	// Retry-After goes with the categories a client retries and that say
	// when: backpressure (a second) and a full disk or a store that is
	// down (the shard's own retry). A producer refused for the shard's
	// producer limit (errs.LimitReached) gets none: a slot frees only when
	// some producer's state expires (days, by default), so a retry a
	// second later would be refused again.
	cat, _ := errs.FromHTTP(code, e.Code)
	switch {
	case cat == errs.Backpressure:
		w.Header().Set("Retry-After", "1")
	case e.Code == codeDiskFull, e.Code == codeStoreDown:
		w.Header().Set("Retry-After", "5")
	}
	s.opts.Logger.Log(r.Context(), level, "request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", e.Error)
	s.http.refusal(code, e.Code)
	writeJSON(w, code, e)
}

// shard resolves the {shard} of a request to t or answers 404 / 503.
func (s *Server) shard(w http.ResponseWriter, r *http.Request, t *table) (*engine.Shard, bool) {
	name := r.PathValue("shard")
	quoted := t.shardName(fmt.Sprintf("%q", name))
	if len(t.hosted) > 0 && !t.hosted[name] {
		s.failAs(w, r, errs.NotFound, apiError{Error: fmt.Sprintf("unknown shard %s: not hosted here", quoted)})
		return nil, false
	}
	sh, ok := t.Host.Shard(name)
	if !ok {
		if len(t.hosted) > 0 {
			s.failAs(w, r, errs.Unavailable, apiError{Error: fmt.Sprintf("shard %s is not open (yet)", quoted)})
		} else {
			s.failAs(w, r, errs.NotFound, apiError{Error: fmt.Sprintf("unknown shard %s", quoted)})
		}
		return nil, false
	}
	return sh, true
}

func (s *Server) notReady(w http.ResponseWriter, r *http.Request) bool {
	if s.ready.Load() {
		return false
	}
	s.failAs(w, r, errs.Unavailable, apiError{Error: "not ready: shards are replaying or the writer is shutting down"})
	return true
}

// handleRows ingests into a shard of t, decoding with t's schema.
func (s *Server) handleRows(w http.ResponseWriter, r *http.Request, t *table) {
	sh, ok := s.shard(w, r, t)
	if !ok || s.notReady(w, r) {
		return
	}
	decode, ok := s.decoder(w, r)
	if !ok {
		return
	}
	opts, perr := appendOptionsOf(r)
	if perr != nil {
		s.failAs(w, r, errs.InvalidInput, *perr)
		return
	}
	adm, ok := s.admit(w, r)
	if !ok {
		return
	}
	defer adm.done()
	d, ok := s.readRows(w, r, adm, decode, sh.Schema())
	if !ok {
		return
	}
	if perr := checkSeqRange(opts.Producer, d.len()); perr != nil {
		s.failAs(w, r, errs.InvalidInput, *perr)
		return
	}
	res, err := d.append(r.Context(), sh, opts)
	if err != nil {
		code, e := s.appendError(err, d.locate)
		s.fail(w, r, code, e)
		return
	}
	writeJSON(w, http.StatusOK, AppendResponse{
		Acked: res.Stored + res.Duplicates, Stored: res.Stored, Duplicates: res.Duplicates,
		FirstSeq: res.FirstSeq, LastSeq: res.LastSeq, Generation: res.Generation,
	})
}

// admit reserves the request's place within the in-flight limits, or
// answers 413 (a declared length over the body limit), 429 or 503; then
// the body and the answer get their deadlines, from now.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (*admission, bool) {
	if r.ContentLength > s.opts.MaxBodyBytes {
		s.failAs(w, r, errs.TooLarge, apiError{Error: fmt.Sprintf("request body is larger than %d bytes", s.opts.MaxBodyBytes), Code: codeTooLarge})
		return nil, false
	}
	adm, err := s.inflight.admit(r.Context(), r.ContentLength)
	var le *limitError
	switch {
	case errors.As(err, &le):
		s.failAs(w, r, errs.Backpressure, apiError{Error: le.Error() + "; retry later", Code: codeInflightLimit})
		return nil, false
	case err != nil: // the client went away while it waited
		s.failAs(w, r, errs.Unavailable, apiError{Error: err.Error()})
		return nil, false
	}
	rc := http.NewResponseController(w)
	now := time.Now()
	// Unsupported only where there is no connection (a test recorder).
	_ = rc.SetReadDeadline(now.Add(s.opts.HTTP.BodyReadTimeout))
	_ = rc.SetWriteDeadline(now.Add(s.opts.HTTP.WriteTimeout))
	return adm, true
}

// readRows reads and decodes the body within its limits, or answers.
func (s *Server) readRows(w http.ResponseWriter, r *http.Request, adm *admission, decode bodyDecoder, sc *schema.Schema) (decoded, bool) {
	in := r.Body
	if r.ContentLength < 0 {
		in = io.NopCloser(&reservingReader{r: r.Body, a: adm, limit: s.opts.MaxBodyBytes})
	}
	body := &bodyReader{r: http.MaxBytesReader(w, in, s.opts.MaxBodyBytes)}
	d, err := decode(body, r.ContentLength, sc)
	if err != nil {
		code, e := s.decodeError(err, body)
		s.fail(w, r, code, e)
		return decoded{}, false
	}
	if d.len() == 0 {
		s.failAs(w, r, errs.InvalidInput, apiError{Error: "no rows in the request body"})
		return decoded{}, false
	}
	return d, true
}

// bodyDecoder decodes a body of size bytes (-1: unknown) for a table of
// schema sc.
type bodyDecoder func(body io.Reader, size int64, sc *schema.Schema) (decoded, error)

// decoded is a request body as rows, or as a batch already built from
// them (invalid: the error of the first row that did not build); locate
// names where a rejected row came from (its line, or its record batch and
// row).
type decoded struct {
	rows    []schema.Row
	batch   *schema.Batch
	n       int
	invalid error
	locate  locator
}

func (d decoded) len() int {
	if d.batch == nil {
		return len(d.rows)
	}
	return d.n
}

// append appends the rows, answering as AppendWith answers the rows a
// batch was built from: their count is checked before their values.
func (d decoded) append(ctx context.Context, sh *engine.Shard, opts engine.AppendOptions) (engine.Result, error) {
	if d.batch == nil {
		return sh.AppendWith(ctx, d.rows, opts)
	}
	if err := sh.CheckBatchRows(d.n); err != nil {
		return engine.Result{}, err
	}
	if d.invalid != nil {
		return engine.Result{}, d.invalid
	}
	return sh.AppendBatchWith(ctx, d.batch, opts)
}

// locator turns a row error into the answer body, or false when the row is
// not one of the request's.
type locator func(*schema.RowError) (apiError, bool)

// decoder picks the body decoder of the request's content type, or answers
// 415.
func (s *Server) decoder(w http.ResponseWriter, r *http.Request) (bodyDecoder, bool) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case err == nil && mt == ContentTypeNDJSON:
		return s.decodeNDJSONBody, true
	case err == nil && mt == ContentTypeArrow:
		return s.decodeArrowBody, true
	}
	s.fail(w, r, http.StatusUnsupportedMediaType, apiError{Error: fmt.Sprintf("unsupported content type %q; send %s or %s",
		r.Header.Get("Content-Type"), ContentTypeNDJSON, ContentTypeArrow)})
	return nil, false
}

func (s *Server) decodeNDJSONBody(body io.Reader, _ int64, sc *schema.Schema) (decoded, error) {
	nb, perr := decodeNDJSONBatch(body, sc, s.opts.MaxRows, s.opts.MaxDecodedBytes)
	if perr != nil {
		return decoded{}, perr
	}
	return decoded{batch: nb.batch, n: len(nb.lines), invalid: nb.invalid, locate: lineLocator(nb.lines)}, nil
}

func (s *Server) decodeArrowBody(body io.Reader, size int64, sc *schema.Schema) (decoded, error) {
	a, err := decodeArrow(body, sc, memory.DefaultAllocator, arrowLimits{body: s.opts.MaxBodyBytes, decoded: s.opts.MaxDecodedBytes, rows: s.opts.MaxRows, size: size})
	if err != nil {
		return decoded{}, err
	}
	return decoded{batch: a.batch, n: a.n, invalid: a.invalid, locate: a.locate}, nil
}

// lineLocator names the NDJSON line of a row; lines[i] is row i's line.
func lineLocator(lines []int) locator {
	return func(re *schema.RowError) (apiError, bool) {
		if re.Row < 0 || re.Row >= len(lines) {
			return apiError{}, false
		}
		line, path := lines[re.Row], innerPath(re)
		return apiError{Error: fmt.Sprintf("line %d, column %q%s: %s", line, re.Column, at(path), re.Reason),
			Line: line, Column: re.Column, Path: path}, true
	}
}

// innerPath is the path of a row error inside its column's value, "" when
// the error is about the value as a whole.
func innerPath(re *schema.RowError) string {
	if re.Path == re.Column {
		return ""
	}
	return re.Path
}

// at names a path in a message.
func at(path string) string {
	if path == "" {
		return ""
	}
	return " at " + path
}

// bodyReader remembers the first read error, so that a body over
// MaxBodyBytes answers 413 however a decoder wrapped or replaced it.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && b.err == nil {
		b.err = err
	}
	return n, err
}

// decodeError maps a body that did not decode to a status and a body:
// too large (the decoders' limits are errs.TooLarge), the in-flight limit
// (errs.Backpressure), a body that came too slowly (408, the HTTP layer's)
// or else invalid input.
func (s *Server) decodeError(err error, body *bodyReader) (int, apiError) {
	var tooBig *http.MaxBytesError
	var le *limitError
	switch {
	case errors.As(body.err, &tooBig):
		return errs.TooLarge.HTTPStatus(), apiError{Error: fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit), Code: codeTooLarge}
	case errors.As(body.err, &le):
		return errs.Backpressure.HTTPStatus(), apiError{Error: "a chunked body outgrew the room left: " + le.Error() + "; retry later, or send a Content-Length",
			Code: codeInflightLimit}
	case errors.Is(body.err, os.ErrDeadlineExceeded):
		return http.StatusRequestTimeout, apiError{Error: fmt.Sprintf("the request body did not arrive within %v", s.opts.HTTP.BodyReadTimeout), Code: codeBodyTimeout}
	}
	if errors.Is(err, errs.TooLarge) {
		return errs.TooLarge.HTTPStatus(), apiError{Error: err.Error(), Code: codeTooLarge}
	}
	var pe *parseError
	var ae *arrowError
	switch {
	case errors.As(err, &pe):
		return errs.InvalidInput.HTTPStatus(), pe.api()
	case errors.As(err, &ae):
		return errs.InvalidInput.HTTPStatus(), ae.api()
	}
	return errs.InvalidInput.HTTPStatus(), apiError{Error: err.Error()}
}

// appendError maps an error of the engine (an append's or a flush's) to a
// status and a body. The status is the error's category's (errs.CategoryOf;
// a context that ended is errs.Unavailable); the code and the message tell
// apart the causes one category covers. An error of no category is a 500.
// locate, when set, names where a rejected row came from.
func (s *Server) appendError(err error, locate locator) (int, apiError) {
	cat, ok := errs.CategoryOf(err)
	if !ok && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		cat, ok = errs.Unavailable, true
	}
	if !ok {
		return http.StatusInternalServerError, apiError{Error: err.Error()}
	}
	return cat.HTTPStatus(), errorBody(err, cat, locate)
}

// errorBody is the answer to err, of category cat.
func errorBody(err error, cat *errs.Category, locate locator) apiError {
	msg := err.Error()
	switch cat {
	case errs.InvalidInput:
		var rowErr *schema.RowError
		switch {
		case errors.As(err, &rowErr):
			if locate != nil {
				if e, ok := locate(rowErr); ok {
					return e
				}
			}
			return apiError{Error: msg, Column: rowErr.Column, Path: innerPath(rowErr)}
		case errors.Is(err, engine.ErrInvalidAppend):
			return apiError{Error: msg, Code: codeInvalidAppend}
		}
		return apiError{Error: msg}
	case errs.NotFound:
		return apiError{Error: msg}
	case errs.Conflict:
		var seqErr *engine.SequenceError
		if errors.As(err, &seqErr) {
			return sequenceAnswer(seqErr)
		}
		return apiError{Error: msg, Code: codeConflict}
	case errs.LimitReached:
		return apiError{Error: "the shard tracks as many producer sessions as it may; append without producer and seq, " +
			"or wait for idle sessions to expire: " + msg, Code: codeTooManyProducers}
	case errs.TooLarge:
		switch {
		case errors.Is(err, wal.ErrPayloadTooLarge):
			msg = "the batch does not fit one WAL record; send fewer or smaller rows: " + msg
		case errors.Is(err, engine.ErrTooLarge):
			msg = "the batch needs more memory than the shard's whole memtable budget; send fewer or smaller rows: " + msg
		}
		return apiError{Error: msg, Code: codeTooLarge}
	case errs.UnknownOutcome:
		// First in errs' precedence: an append queued for the WAL when
		// the disk filled is ErrNoSpace too, but it may yet be stored.
		if errors.Is(err, engine.ErrUnknownOutcome) {
			msg = "outcome unknown: the rows may or may not be stored; retry them (with the same producer and seq; without a session, ids make the retry idempotent while the rows are in a memtable): " + msg
		} else {
			msg = "outcome unknown: " + msg
		}
		return apiError{Error: msg, Code: codeOutcomeUnknown}
	case errs.Unavailable:
		// Before backpressure in errs' precedence: a full disk and a store
		// that is down are kinds of engine.ErrBackpressure too.
		switch {
		case errors.Is(err, engine.ErrNoSpace):
			return apiError{Error: "disk full; the shard takes appends again by itself once space is back: " + msg, Code: codeDiskFull}
		case errors.Is(err, engine.ErrStoreDown):
			return apiError{Error: "the object store does not take the WAL; the shard takes appends again by itself once it does: " + msg, Code: codeStoreDown}
		}
		return apiError{Error: msg}
	case errs.Backpressure:
		if errors.Is(err, engine.ErrMergesBehind) {
			return apiError{Error: msg, Code: codeMergesBehind}
		}
		return apiError{Error: "memtable memory budget exhausted; retry later: " + msg, Code: codeBackpressure}
	case errs.NotOwner:
		return apiError{Error: "shard is fenced / not owned here: " + msg, Code: codeNotOwner}
	case errs.Closed:
		return apiError{Error: "shard is stopped: " + msg, Code: codeStopped}
	case errs.NotApplied:
		return apiError{Error: "not applied; retry: " + msg, Code: codeNotApplied}
	case errs.Corruption:
		return apiError{Error: "stored data is corrupt: " + msg, Code: codeCorruption}
	}
	return apiError{Error: msg}
}

// parseError is a body that could not be read or decoded.
type parseError struct {
	line int
	err  error
}

// api is the error's answer body, with the column and byte offset of a
// refused line where known.
func (e *parseError) api() apiError {
	out := apiError{Error: e.Error(), Line: e.line}
	var le *lineError
	if errors.As(e.err, &le) {
		out.Column, out.Path = le.column, le.path
		if le.offset >= 0 {
			off := le.offset
			out.ByteOffset = &off
		}
	}
	return out
}

func (e *parseError) Unwrap() error { return e.err }

func (e *parseError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("line %d: %v", e.line, e.err)
	}
	return e.err.Error()
}

func (s *Server) handleFlush(w http.ResponseWriter, r *http.Request, t *table) {
	sh, ok := s.shard(w, r, t)
	if !ok || s.notReady(w, r) {
		return
	}
	g, err := sh.Flush(r.Context())
	if err != nil {
		code, e := s.flushError(err)
		s.fail(w, r, code, e)
		return
	}
	writeJSON(w, http.StatusOK, FlushResponse{Generation: g})
}

// flushError maps an error of Flush as appendError does, but that a
// flush carries no input: an error that blames the request (invalid
// input, not found, too large) came from the engine's own calls (a name
// it made, a release out of order) and is a 500, an error the writer did
// not expect.
func (s *Server) flushError(err error) (int, apiError) {
	code, e := s.appendError(err, nil)
	switch cat, _ := errs.CategoryOf(err); cat {
	case errs.InvalidInput, errs.NotFound, errs.TooLarge:
		return http.StatusInternalServerError, apiError{Error: err.Error()}
	}
	return code, e
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request, t *table) {
	sh, ok := s.shard(w, r, t)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, sh.Status())
}

func (s *Server) handleList(w http.ResponseWriter, _ *http.Request, t *table) {
	out := ListResponse{Table: t.Name, Shards: []engine.Status{}}
	for _, sh := range t.Host.Shards() {
		out.Shards = append(out.Shards, sh.Status())
	}
	writeJSON(w, http.StatusOK, out)
}

// handleReady answers a probe. A probe polls (every second or so, from
// every load balancer), so its 503 is logged at DEBUG; what an operator
// needs is each change of the answer, logged once.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	reason := s.unready()
	s.noteReadiness(r, reason)
	if reason != "" {
		s.failAt(w, r, slog.LevelDebug, errs.Unavailable.HTTPStatus(), apiError{Error: reason})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ready\n")
}

func (s *Server) noteReadiness(r *http.Request, reason string) {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	if reason == s.reason {
		return
	}
	s.reason = reason
	if reason == "" {
		s.opts.Logger.InfoContext(r.Context(), "readyz: ready")
		return
	}
	s.opts.Logger.InfoContext(r.Context(), "readyz: unready", "reason", reason)
}

// unready says why the server is not ready, or "": the first shard, of
// the tables in order, that is not open or is stopped.
func (s *Server) unready() string {
	if !s.ready.Load() {
		return "not ready: shards are replaying or the writer is shutting down"
	}
	for _, t := range s.tables {
		if why := s.tableUnready(t); why != "" {
			return why
		}
	}
	return ""
}

// tableUnready says why t is not ready, or "".
func (s *Server) tableUnready(t *table) string {
	var shards []*engine.Shard
	if len(t.Shards) == 0 {
		shards = t.Host.Shards()
	}
	for _, name := range t.Shards {
		sh, ok := t.Host.Shard(name)
		if !ok {
			return fmt.Sprintf("shard %s is not open", t.shardName(name))
		}
		shards = append(shards, sh)
	}
	for _, sh := range shards {
		if why := s.stopped(sh); why != "" {
			return fmt.Sprintf("shard %s is stopped: %s", t.shardName(sh.Name()), why)
		}
	}
	return ""
}

// stopped reports why sh stopped, or "". Status waits for a running flush,
// so it runs aside and past probeWait the last known answer stands.
func (s *Server) stopped(sh *engine.Shard) string {
	s.probeMu.Lock()
	p := s.probing[sh]
	if p == nil {
		p = &probe{done: make(chan struct{})}
		s.probing[sh] = p
		go func() {
			st := sh.Status()
			why := st.Stopped
			if why == "" && st.Degraded != "" {
				why = "degraded: " + st.Degraded
			}
			s.probeMu.Lock()
			p.stopped = why
			s.last[sh] = why
			delete(s.probing, sh)
			s.probeMu.Unlock()
			close(p.done)
		}()
	}
	s.probeMu.Unlock()
	t := time.NewTimer(probeWait)
	defer t.Stop()
	select {
	case <-p.done:
		return p.stopped
	case <-t.C:
		s.probeMu.Lock()
		defer s.probeMu.Unlock()
		return s.last[sh]
	}
}
