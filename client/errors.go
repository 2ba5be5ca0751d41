package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Error categories of a *StatusError, checked with errors.Is.
var (
	// ErrNotOwner (409): the endpoint does not own the shard now (fenced,
	// or the outcome is unknown). Send the same rows to the shard's owner.
	ErrNotOwner = errors.New("rollwal client: the shard is not owned by this writer")
	// ErrTooLarge (413): too many rows or bytes in one request; split it.
	ErrTooLarge = errors.New("rollwal client: request too large")
	// ErrBackpressure (429): the writer's memory budget stayed exhausted
	// through every retry.
	ErrBackpressure = errors.New("rollwal client: the writer is applying backpressure")
	// ErrUnavailable (502, 503, 504): the writer was not ready, shutting
	// down or unreachable behind a proxy through every retry.
	ErrUnavailable = errors.New("rollwal client: the writer is unavailable")
)

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
}

func (e *BadRequestError) Error() string {
	return "rollwal client: bad request: " + e.Message
}

// StatusError is an answer other than 200 and 400 that the client did
// not retry, or the last of those it retried.
type StatusError struct {
	Status     int
	Message    string
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("rollwal client: writer answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Is matches the error categories of the status.
func (e *StatusError) Is(target error) bool {
	switch target {
	case ErrNotOwner:
		return e.Status == http.StatusConflict
	case ErrTooLarge:
		return e.Status == http.StatusRequestEntityTooLarge
	case ErrBackpressure:
		return e.Status == http.StatusTooManyRequests
	case ErrUnavailable:
		return e.Status == http.StatusBadGateway || e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout
	}
	return false
}

// transportError is a request whose answer was lost: the rows may or may
// not be stored, and ids make a retry safe.
type transportError struct{ err error }

func (e *transportError) Error() string { return "rollwal client: " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// answer is the writer's JSON error body.
type answer struct {
	Error  string `json:"error"`
	Line   int    `json:"line"`
	Column string `json:"column"`
}

func statusError(resp *http.Response, body []byte) error {
	var a answer
	if json.Unmarshal(body, &a) != nil || a.Error == "" {
		a.Error = string(body)
	}
	if resp.StatusCode == http.StatusBadRequest {
		// Append writes one row per line, so the line names the row.
		return &BadRequestError{Message: a.Error, Row: a.Line - 1, Column: a.Column}
	}
	return &StatusError{Status: resp.StatusCode, Message: a.Error, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
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

func retryable(err error) bool {
	var te *transportError
	if errors.As(err, &te) {
		return true
	}
	return errors.Is(err, ErrBackpressure) || errors.Is(err, ErrUnavailable)
}

func retryAfter(err error) time.Duration {
	var se *StatusError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}
