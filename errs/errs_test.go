package errs_test

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/rollwal/rollwal/errs"
)

// TestErrorCategories is the taxonomy's table, written out: every
// category's HTTP status, whether the Go client retries it, its codes on
// the wire, and that FromHTTP reads each code (and the status alone, where
// the status names the category alone) back to the category. The server's
// and the client's TestErrorCategories check their answers and retries
// against the same categories.
func TestErrorCategories(t *testing.T) {
	want := []struct {
		cat    *errs.Category
		text   string
		status int
		retry  bool
		codes  []string
	}{
		// In the precedence of CategoryOf.
		{errs.UnknownOutcome, "outcome unknown", 409, false, []string{"outcome_unknown"}},
		{errs.Corruption, "corruption", 500, false, []string{"corruption"}},
		{errs.NotOwner, "not owner", 409, false, []string{"not_owner"}},
		{errs.Closed, "closed", 503, true, []string{"stopped"}},
		{errs.NotApplied, "not applied", 503, true, []string{"not_applied"}},
		{errs.Unavailable, "unavailable", 503, true, []string{"unavailable", "disk_full", "store_down"}},
		{errs.Backpressure, "backpressure", 429, true, []string{"backpressure", "merges_behind", "inflight_limit"}},
		{errs.LimitReached, "limit reached", 429, false, []string{"limit_reached", "too_many_producers"}},
		{errs.TooLarge, "too large", 413, false, []string{"too_large"}},
		{errs.Conflict, "conflict", 409, false, []string{"conflict", "sequence"}},
		{errs.NotFound, "not found", 404, false, []string{"not_found", "unknown_table"}},
		{errs.InvalidInput, "invalid input", 400, false, []string{"invalid_input", "bad_parameter", "invalid_append"}},
	}
	cats := errs.Categories()
	if len(cats) != len(want) {
		t.Fatalf("%d categories, the table has %d", len(cats), len(want))
	}
	seen := map[string]*errs.Category{}
	for i, w := range want {
		c := w.cat
		t.Run(w.text, func(t *testing.T) {
			if cats[i] != c {
				t.Errorf("Categories()[%d] = %v, want %v (precedence)", i, cats[i], c)
			}
			if c.Error() != w.text || c.String() != w.text {
				t.Errorf("Error() = %q, want %q", c.Error(), w.text)
			}
			if c.HTTPStatus() != w.status {
				t.Errorf("HTTPStatus() = %d, want %d", c.HTTPStatus(), w.status)
			}
			if c.Retry() != w.retry {
				t.Errorf("Retry() = %t, want %t", c.Retry(), w.retry)
			}
			if !slices.Equal(c.Codes(), w.codes) || c.Code() != w.codes[0] {
				t.Errorf("Codes() = %q, Code() = %q, want %q", c.Codes(), c.Code(), w.codes)
			}
			for _, code := range w.codes {
				if prev, dup := seen[code]; dup {
					t.Errorf("code %q is %v's and %v's", code, prev, c)
				}
				seen[code] = c
				if got, ok := errs.FromHTTP(w.status, code); !ok || got != c {
					t.Errorf("FromHTTP(%d, %q) = %v, %t; want %v", w.status, code, got, ok, c)
				}
			}
			// The same code under another status is not taken for it.
			if got, ok := errs.FromHTTP(599, w.codes[0]); ok {
				t.Errorf("FromHTTP(599, %q) = %v, want none", w.codes[0], got)
			}
		})
	}
}

// TestFromHTTPByStatus reads answers without a code (or with one it does
// not know) by their status alone, and gives no category to the answers
// outside the taxonomy.
func TestFromHTTPByStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		want   *errs.Category // nil: none
	}{
		{400, "", errs.InvalidInput},
		{400, "whatever", errs.InvalidInput},
		{415, "", errs.InvalidInput},
		{404, "", errs.NotFound},
		{409, "", errs.UnknownOutcome}, // a 409 naming no cause: do not assume nothing was applied
		{409, "not_a_code", errs.UnknownOutcome},
		{413, "", errs.TooLarge},
		{429, "", errs.Backpressure},
		{408, "body_timeout", errs.Unavailable},
		{502, "", errs.Unavailable},
		{503, "", errs.Unavailable},
		{503, "disk_full", errs.Unavailable},
		{504, "", errs.Unavailable},
		{200, "", nil},
		{401, "unauthorized", nil},
		{403, "forbidden", nil},
		{500, "", nil},
		{500, "not_owner", nil},
		{418, "", nil},
	} {
		got, ok := errs.FromHTTP(tc.status, tc.code)
		if ok != (tc.want != nil) || got != tc.want {
			t.Errorf("FromHTTP(%d, %q) = %v, %t; want %v", tc.status, tc.code, got, ok, tc.want)
		}
	}
}

// TestMark keeps the marked error's message and chain and adds the
// category, as Pebble's MarkCorruptionError does.
func TestMark(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	inner := fmt.Errorf("reading x: %w", cause)
	m := errs.Mark(inner, errs.Corruption)
	if m.Error() != inner.Error() {
		t.Errorf("message %q, want %q", m.Error(), inner.Error())
	}
	if !errors.Is(m, inner) || !errors.Is(m, cause) || !errors.Is(m, errs.Corruption) {
		t.Errorf("Mark lost its chain or its category: %v", m)
	}
	if errors.Is(m, errs.Closed) {
		t.Error("a Corruption mark matches Closed")
	}
	wrapped := fmt.Errorf("shard s0: %w", m)
	if c, ok := errs.CategoryOf(wrapped); !ok || c != errs.Corruption {
		t.Errorf("CategoryOf(wrapped) = %v, %t", c, ok)
	}
	if errs.Mark(nil, errs.Closed) != nil {
		t.Error("Mark(nil) is not nil")
	}
	if errs.Mark(inner, nil) != inner {
		t.Error("Mark(err, nil) is not err")
	}
	s := errs.New(errs.Backpressure, "pkg: busy")
	if s.Error() != "pkg: busy" || !errors.Is(s, errs.Backpressure) || errors.Is(s, errs.New(errs.Backpressure, "pkg: busy")) {
		t.Errorf("New: %q, or two sentinels of one text and category match each other", s)
	}
	var target *myErr
	if !errors.As(errs.Mark(&myErr{}, errs.Conflict), &target) {
		t.Error("errors.As does not see through a mark")
	}
	if _, ok := errs.CategoryOf(nil); ok {
		t.Error("nil has a category")
	}
	if _, ok := errs.CategoryOf(cause); ok {
		t.Error("an unmarked error has a category")
	}
}

type myErr struct{}

func (*myErr) Error() string { return "mine" }

// TestCategoryOfPrecedence picks by the precedence of Categories, whatever
// the order of wrapping.
func TestCategoryOfPrecedence(t *testing.T) {
	full := errs.New(errs.Unavailable, "disk full")
	busy := errs.New(errs.Backpressure, "busy")
	unknown := errs.New(errs.UnknownOutcome, "outcome unknown")
	fenced := errs.New(errs.NotOwner, "fenced")
	for _, tc := range []struct {
		err  error
		want *errs.Category
	}{
		{fmt.Errorf("%w: %w", unknown, full), errs.UnknownOutcome},
		{fmt.Errorf("%w: %w", full, unknown), errs.UnknownOutcome},
		{errs.Mark(fmt.Errorf("%w: store down", busy), errs.Unavailable), errs.Unavailable},
		{fmt.Errorf("%w: %w", busy, full), errs.Unavailable},
		{errors.Join(errs.New(errs.InvalidInput, "bad"), fenced), errs.NotOwner},
		{fmt.Errorf("%w: %w", unknown, fenced), errs.UnknownOutcome},
	} {
		if got, ok := errs.CategoryOf(tc.err); !ok || got != tc.want {
			t.Errorf("CategoryOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
