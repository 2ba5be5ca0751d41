package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	icecat "github.com/apache/iceberg-go/catalog"

	"github.com/rollwal/rollwal/catalog"
)

// Error types of the ErrorModel, as the specification's examples and the
// Java client name them.
const (
	typeBadRequest      = "BadRequestException"
	typeNoSuchNamespace = "NoSuchNamespaceException"
	typeNoSuchTable     = "NoSuchTableException"
	typeNoSuchView      = "NoSuchViewException"
	typeUnsupported     = "UnsupportedOperationException"
	typeUnavailable     = "ServiceUnavailableException"
	typeInternal        = "InternalServerError"
)

// apiError is a refusal: its status and what the ErrorModel says.
type apiError struct {
	status int
	typ    string
	msg    string
}

// errorModel is the specification's ErrorModel inside its wrapper:
// {"error":{"message":…,"type":…,"code":…}}. It never has a stack.
type errorModel struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typeBadRequest, msg: fmt.Sprintf(format, args...)}
}

func noSuchNamespace(ns string, why string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: typeNoSuchNamespace, msg: fmt.Sprintf("namespace %s does not exist%s", ns, why)}
}

func noSuchTable(name string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: typeNoSuchTable, msg: fmt.Sprintf("table %s does not exist", name)}
}

// fail answers e: its ErrorModel, or for HEAD its status alone.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, e *apiError) {
	if e.status < 500 {
		h.log.Debug("iceberg REST: refused", "method", r.Method, "path", r.URL.Path, "status", e.status, "type", e.typ, "msg", e.msg)
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(e.status)
		return
	}
	writeJSON(w, e.status, errorModel{Error: errorBody{Message: e.msg, Type: e.typ, Code: e.status}})
}

// fromCatalog turns a catalog error into its answer: a missing table or
// namespace is 404, a name the catalog refuses 400, a deadline 503, and
// anything else 500 whose message is only a reference to the log line
// that has the error.
func (h *handler) fromCatalog(r *http.Request, err error, what string) *apiError {
	switch {
	case errors.Is(err, icecat.ErrNoSuchTable):
		return noSuchTable(what)
	case errors.Is(err, icecat.ErrNoSuchNamespace):
		return noSuchNamespace(what, "")
	case errors.Is(err, catalog.ErrInvalidName):
		return badRequest("%v", err) // it says what is wrong with the name, nothing else
	case r.Context().Err() != nil:
		h.log.Debug("iceberg REST: client gone", "method", r.Method, "path", r.URL.Path, "err", err)
		return &apiError{status: http.StatusServiceUnavailable, typ: typeUnavailable, msg: "the request was canceled"}
	}
	ref := h.refs.Add(1)
	if errors.Is(err, context.DeadlineExceeded) {
		h.log.Warn("iceberg REST: the catalog did not answer in time", "ref", ref, "method", r.Method, "path", r.URL.Path,
			"timeout", h.opts.RequestTimeout.String(), "err", err)
		return &apiError{status: http.StatusServiceUnavailable, typ: typeUnavailable,
			msg: fmt.Sprintf("the catalog did not answer in time; retry (ref %d)", ref)}
	}
	h.log.Error("iceberg REST: internal error", "ref", ref, "method", r.Method, "path", r.URL.Path, "err", err)
	return &apiError{status: http.StatusInternalServerError, typ: typeInternal,
		msg: fmt.Sprintf("internal error (ref %d; the server's log has it)", ref)}
}

// ok answers v with 200; a value that does not encode is a 500 (logged).
func (h *handler) ok(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		h.fail(w, r, h.fromCatalog(r, fmt.Errorf("encode the answer: %w", err), ""))
		return
	}
	writeBytes(w, http.StatusOK, b)
}

// writeJSON answers v as JSON, for values that always encode.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // an errorModel or a list of strings always encodes
	}
	writeBytes(w, status, b)
}

func writeBytes(w http.ResponseWriter, status int, b []byte) {
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b) //nolint:errcheck // the client went away: nothing to do
}
