package client

import (
	"errors"
	"net/http"
	"testing"

	"github.com/rollwal/rollwal/errs"
)

// TestErrorCategories derives the Client's retry decision from the
// category of the writer's answer: for every category (errs'
// TestErrorCategories writes the table out) and every code of it, an
// answer of its status is retried iff the category is, and matches the
// category with errors.Is.
func TestErrorCategories(t *testing.T) {
	for _, c := range errs.Categories() {
		for _, code := range append(c.Codes(), "") {
			se := &StatusError{Status: c.HTTPStatus(), Code: code}
			if code == "" {
				// Without a code the status alone decides; where several
				// categories share it, it is the status's fallback.
				if fb, _ := errs.FromHTTP(c.HTTPStatus(), ""); fb != c {
					continue
				}
			}
			if got := retryable(se); got != c.Retry() {
				t.Errorf("%v: %d %q retried %t, want %t", c, se.Status, code, got, c.Retry())
			}
			if !errors.Is(se, c) {
				t.Errorf("%v: %d %q does not match it", c, se.Status, code)
			}
			for _, other := range errs.Categories() {
				if other != c && errors.Is(se, other) {
					t.Errorf("%v: %d %q matches %v too", c, se.Status, code, other)
				}
			}
		}
	}
	var br error = &BadRequestError{Message: "bad row", Row: 2}
	if retryable(br) || !errors.Is(br, errs.InvalidInput) {
		t.Errorf("a 400 retried, or not invalid input")
	}
	var qe error = &SequenceError{Message: "expected 3"}
	if retryable(qe) || !errors.Is(qe, errs.Conflict) || !errors.Is(qe, ErrSequence) {
		t.Errorf("a 409 sequence retried, or not a conflict")
	}
	if !retryable(&transportError{errors.New("connection reset")}) {
		t.Error("a lost answer not retried")
	}
	if out := outcome(&transportError{errors.New("reset")}, true); !errors.Is(out, errs.UnknownOutcome) || !errors.Is(out, ErrOutcomeUnknown) {
		t.Errorf("%v: an unknown outcome that is not errs.UnknownOutcome", out)
	}
}

// TestRetriesUnchanged compares the retry decision derived from the
// categories with the status list the Client retried by before
// (transport errors, 408, 429 but "too_many_producers", 502, 503, 504),
// over every status and every code the writer answers with. (The one
// difference is an answer no writer sends: 429 "limit_reached", the
// category's own code, is not retried, as "too_many_producers" is not.)
func TestRetriesUnchanged(t *testing.T) {
	before := func(err error) bool {
		var se *StatusError
		if errors.As(err, &se) && se.Status == http.StatusRequestTimeout {
			return true
		}
		return errors.Is(err, ErrBackpressure) || errors.Is(err, ErrUnavailable)
	}
	codes := []string{"", "bad_parameter", "invalid_append", "sequence", "conflict", "not_owner", "outcome_unknown",
		"backpressure", "merges_behind", "too_many_producers", "too_large", "stopped", "disk_full", "store_down",
		"not_applied", "corruption", "inflight_limit", "body_timeout", "unknown_table", "unauthorized", "forbidden"}
	for status := 100; status < 600; status++ {
		for _, code := range codes {
			se := &StatusError{Status: status, Code: code}
			if got, want := retryable(se), before(se); got != want {
				t.Errorf("%d %q: retried %t, before %t", status, code, got, want)
			}
		}
	}
}
