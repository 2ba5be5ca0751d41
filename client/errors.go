package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/rollwal/rollwal/errs"
)

// Error categories of a *StatusError, checked with errors.Is. Each carries
// its category of package errs (ErrUnauthorized, of access control, has
// none), and every error of the Client matches the errs category of the
// writer's answer too: errors.Is(err, errs.Backpressure) holds for a 429
// "backpressure", errs.Closed for a 503 "stopped", and so on (see
// errs.FromHTTP and docs/errors.md).
var (
	// ErrNotOwner (409): the endpoint does not own the shard now (fenced,
	// or the outcome is unknown). Send the same rows to the shard's owner.
	ErrNotOwner = errs.New(errs.NotOwner, "rollwal client: the shard is not owned by this writer")
	// ErrTooLarge (413): too many rows or bytes in one request; split it.
	ErrTooLarge = errs.New(errs.TooLarge, "rollwal client: request too large")
	// ErrBackpressure (429): the writer's memory budget stayed exhausted
	// through every retry.
	ErrBackpressure = errs.New(errs.Backpressure, "rollwal client: the writer is applying backpressure")
	// ErrUnavailable (502, 503, 504): the writer was not ready, shutting
	// down or unreachable behind a proxy through every retry.
	ErrUnavailable = errs.New(errs.Unavailable, "rollwal client: the writer is unavailable")
	// ErrTooManyProducers (429, code "too_many_producers"): the shard
	// tracks as many producer sessions as it may and this one is new to
	// it. Not retried: a slot frees only when an idle session expires
	// (after days, by default). Use fewer Clients (one per process), or
	// Options.NoSession.
	ErrTooManyProducers = errs.New(errs.LimitReached, "rollwal client: the shard has no room for another producer session")
	// ErrUnauthorized (401, 403): the writer needs a bearer token
	// (Options.Token) and got none, one it does not accept, or an ingest
	// token where it needs the admin token. Not retried; nothing was stored.
	ErrUnauthorized = errors.New("rollwal client: the writer refused the request's token")
)

// ErrSequence is matched by a *SequenceError.
var ErrSequence = errs.New(errs.Conflict, "rollwal client: producer sequence refused")

// ErrOutcomeUnknown is matched by an error of Append (or an Ack) after
// which the rows may or may not be stored: an answer was lost (network
// error, timeout, cut connection, the context ended mid-request), or the
// writer answered 5xx or 409 "outcome unknown". With a session the Client
// settles such a batch itself: it sends the same rows with the same
// sequence numbers again before the shard's next batch, so they end up
// stored exactly once (see "Producer sessions" in the package
// documentation).
var ErrOutcomeUnknown = errs.New(errs.UnknownOutcome, "rollwal client: outcome unknown: the rows may or may not be stored")

// BadRequestError is a 400: the writer refused the request and stored
// nothing of it. The same rows would be refused again, so it is never
// retried.
type BadRequestError struct {
	// Message is the writer's explanation.
	Message string
	// Row is the index of the refused row in the request, or -1 when the
	// answer names none (for Append, the index in rows).
	Row int
	// Column is the refused column, or "".
	Column string
	// Parameter is the refused query parameter (e.g. "seq"), or "".
	Parameter string
	// Code is the writer's code for the refusal ("bad_parameter",
	// "invalid_append"), or "" for a refused row or body.
	Code string
}

func (e *BadRequestError) Error() string {
	return "rollwal client: bad request: " + e.Message
}

// Is matches errs.InvalidInput, the category of a 400.
func (e *BadRequestError) Is(target error) bool { return target == errs.InvalidInput }

// StatusError is an answer other than 200 and 400 that the client did
// not retry, or the last of those it retried.
type StatusError struct {
	Status int
	// Code is the writer's code for the refusal where one status covers
	// several ("not_owner", "outcome_unknown", "backpressure",
	// "too_many_producers", …), or "".
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("rollwal client: writer answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Category returns the errs category of the answer (errs.FromHTTP of its
// status and code), or false for one of none (401, 403, a 500 other than
// "corruption", a status the writer does not answer with).
func (e *StatusError) Category() (*errs.Category, bool) { return errs.FromHTTP(e.Status, e.Code) }

// Is matches the error categories of the status, and the errs category of
// the answer.
func (e *StatusError) Is(target error) bool {
	if c, ok := target.(*errs.Category); ok {
		cat, ok := e.Category()
		return ok && cat == c
	}
	switch target {
	case ErrNotOwner:
		return e.Status == http.StatusConflict
	case ErrTooLarge:
		return e.Status == http.StatusRequestEntityTooLarge
	case ErrBackpressure:
		return e.Status == http.StatusTooManyRequests && e.Code != codeTooManyProducers
	case ErrTooManyProducers:
		return e.Status == http.StatusTooManyRequests && e.Code == codeTooManyProducers
	case ErrUnavailable:
		return e.Status == http.StatusBadGateway || e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
	}
	return false
}

// transportError is a request whose answer was lost: the rows may or may
// not be stored, and ids make a retry safe.
type transportError struct{ err error }

func (e *transportError) Error() string { return "rollwal client: " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// SequenceError is a 409 with code "sequence": the writer refused a
// batch of the Client's producer session because it was not at the
// producer's next expected sequence; nothing of it was stored. The Client
// handles the cases a session of its own meets (see "Producer sessions");
// Append returns one when the writer holds a sequence the Client cannot
// account for, e.g. another process appends with the same Producer id.
type SequenceError struct {
	Shard    string
	Producer string
	// Seq and Count are the refused batch's first sequence and row count.
	Seq   uint64
	Count int
	// Expected is the writer's next expected sequence of the producer.
	Expected uint64
	// Unknown: the shard holds no state of the producer (never seen, or
	// expired after its idle time), so it expects 0.
	Unknown bool
	// Message is the writer's explanation.
	Message string
}

func (e *SequenceError) Error() string {
	return "rollwal client: sequence refused: " + e.Message
}

// Is matches ErrSequence and errs.Conflict.
func (e *SequenceError) Is(target error) bool {
	return target == ErrSequence || target == errs.Conflict
}

// Codes of the writer's error answers that the client tells apart.
const (
	codeSequence         = "sequence"
	codeTooManyProducers = "too_many_producers"
	codeNotOwner         = "not_owner"
	codeInvalidAppend    = "invalid_append"
)

// answer is the writer's JSON error body.
type answer struct {
	Error           string  `json:"error"`
	Code            string  `json:"code"`
	Parameter       string  `json:"parameter"`
	Line            int     `json:"line"`
	Column          string  `json:"column"`
	Producer        string  `json:"producer"`
	Seq             *uint64 `json:"seq"`
	Count           int     `json:"count"`
	ExpectedSeq     *uint64 `json:"expected_seq"`
	UnknownProducer bool    `json:"unknown_producer"`
}

func statusError(resp *http.Response, body []byte) error {
	var a answer
	if json.Unmarshal(body, &a) != nil || a.Error == "" {
		a.Error = string(body)
	}
	switch {
	case resp.StatusCode == http.StatusBadRequest:
		// Append writes one row per line, so the line names the row.
		return &BadRequestError{Message: a.Error, Row: a.Line - 1, Column: a.Column, Parameter: a.Parameter, Code: a.Code}
	case resp.StatusCode == http.StatusConflict && a.Code == codeSequence && a.Seq != nil && a.ExpectedSeq != nil:
		return &SequenceError{Producer: a.Producer, Seq: *a.Seq, Count: a.Count, Expected: *a.ExpectedSeq,
			Unknown: a.UnknownProducer, Message: a.Error}
	}
	return &StatusError{Status: resp.StatusCode, Code: a.Code, Message: a.Error, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
}

// parseRetryAfter reads seconds or an HTTP date; 0 when absent or bad.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// retryable reports whether the Client sends the same request again: a
// lost answer (the producer session and the ids make the retry safe), or
// an answer of a category that errs says is retried (Backpressure,
// NotApplied, Unavailable — 408, 502, 503 and 504 among them — and
// Closed). Never a 400, a 409, a 413, 429 "too_many_producers", 401, 403
// or a 500.
func retryable(err error) bool {
	var te *transportError
	var se *StatusError
	switch {
	case errors.As(err, &te):
		return true
	case errors.As(err, &se):
		cat, ok := se.Category()
		return ok && cat.Retry()
	}
	return false
}

// refusal reports whether err is the writer's answer that it stored
// nothing of the request, and whether the same request would always be
// refused so (a bad row or parameter, too large), whatever an earlier
// attempt of it met.
func refusal(err error) (refused, always bool) {
	var br *BadRequestError
	var se *StatusError
	var qe *SequenceError
	switch {
	case errors.As(err, &br):
		// invalid_append covers the shard's source limit, which an
		// earlier attempt may have passed.
		return true, br.Code != codeInvalidAppend
	case errors.As(err, &qe):
		return true, false
	case errors.As(err, &se):
		switch se.Status {
		case http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnauthorized, http.StatusForbidden:
			return true, true
		case http.StatusNotFound, http.StatusTooManyRequests, http.StatusRequestTimeout:
			return true, false
		case http.StatusConflict:
			return se.Code == codeNotOwner, false
		}
	}
	return false, false
}

// outcomeError marks an error after which the rows may be stored.
type outcomeError struct{ err error }

func (e *outcomeError) Error() string {
	return e.err.Error() + " (outcome unknown: the rows may or may not be stored)"
}
func (e *outcomeError) Unwrap() []error { return []error{e.err, ErrOutcomeUnknown} }

// outcome marks err with ErrOutcomeUnknown when some attempt ended
// without a definite answer (maybe, as for Client.send), unless the last
// answer is a refusal that every attempt would have met.
func outcome(err error, maybe bool) error {
	if err == nil || !maybe {
		return err
	}
	if refused, always := refusal(err); refused && always {
		return err
	}
	return &outcomeError{err}
}

func retryAfter(err error) time.Duration {
	var se *StatusError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}
