package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/wal"
)

// TestErrorCategories answers an error of each category with the
// category's status (errs' table, which errs.TestErrorCategories writes
// out) and a code the client reads back to the same category, with
// Retry-After where the client retries after a wait the server knows.
func TestErrorCategories(t *testing.T) {
	s := errorServer()
	for _, c := range errs.Categories() {
		t.Run(c.String(), func(t *testing.T) {
			err := fmt.Errorf("engine: shard s0: %w", errs.Mark(errors.New("cause"), c))
			status, e := s.appendError(err, nil)
			if status != c.HTTPStatus() {
				t.Errorf("status %d, want %d", status, c.HTTPStatus())
			}
			if e.Code != "" && !slices.Contains(c.Codes(), e.Code) {
				t.Errorf("code %q is not one of %v's %q", e.Code, c, c.Codes())
			}
			if got, ok := errs.FromHTTP(status, e.Code); !ok || got != c {
				t.Errorf("the answer %d %q reads back as %v, %t; want %v", status, e.Code, got, ok, c)
			}
			rec := httptest.NewRecorder()
			s.failAt(rec, httptest.NewRequest(http.MethodPost, "/v1/shards/s0/rows", nil), 0, status, e)
			if got := rec.Header().Get("Retry-After") != ""; got != (c == errs.Backpressure) {
				t.Errorf("Retry-After %q, want one only for backpressure", rec.Header().Get("Retry-After"))
			}
			if rec.Code != status {
				t.Errorf("answered %d, want %d", rec.Code, status)
			}
		})
	}
}

// TestEngineErrorAnswers maps each error the engine returns from an append
// or a flush, wrapped as the engine wraps it, to its status and code.
func TestEngineErrorAnswers(t *testing.T) {
	s := errorServer()
	shard := func(err error) error { return fmt.Errorf("engine: shard s0: %w", err) }
	fenced := fmt.Errorf("%w: shard s0 epoch 3: the writer's lease is not known valid: not the owner", engine.ErrFenced)
	noSpace := fmt.Errorf("%w: shard s0: %w", engine.ErrNoSpace, fmt.Errorf("%w: write: no space left on device", wal.ErrNoSpace))
	storeDown := fmt.Errorf("%w: shard s0: %w", engine.ErrStoreDown, wal.ErrStoreDown)
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"row", shard(&schema.RowError{Row: 0, Column: "reward", Reason: "not a number"}), 400, ""},
		{"sequence", &engine.SequenceError{Shard: "s0", Producer: "p", Seq: 5, Expected: 3}, 409, codeSequence},
		{"invalid append", fmt.Errorf("%w: source name too long", engine.ErrInvalidAppend), 400, codeInvalidAppend},
		{"too many producers", fmt.Errorf("%w: shard s0 tracks 10000", engine.ErrTooManyProducers), 429, codeTooManyProducers},
		{"batch too large", fmt.Errorf("%w: 20000 rows, the limit is 10000", engine.ErrBatchTooLarge), 413, codeTooLarge},
		{"WAL record too large", shard(fmt.Errorf("%w: 70 MiB", wal.ErrPayloadTooLarge)), 413, codeTooLarge},
		// Was a 500: it never succeeds, so it is the producer's to split.
		{"larger than the memory budget", fmt.Errorf("%w: wanted 300 bytes, the limit is 200", engine.ErrTooLarge), 413, codeTooLarge},
		{"unknown outcome: disk full", fmt.Errorf("%w: %w", engine.ErrUnknownOutcome, noSpace), 409, codeOutcomeUnknown},
		{"unknown outcome: store down", fmt.Errorf("%w: %w", engine.ErrUnknownOutcome, storeDown), 409, codeOutcomeUnknown},
		{"unknown outcome: lease", fmt.Errorf("%w: %w", engine.ErrUnknownOutcome, fenced), 409, codeOutcomeUnknown},
		{"disk full", noSpace, 503, codeDiskFull},
		{"disk full for a flush", fmt.Errorf("%w: shard s0 takes appends again once a flush succeeds: %w", engine.ErrNoSpace, errors.New("ENOSPC")), 503, codeDiskFull},
		{"store down", storeDown, 503, codeStoreDown},
		{"merges behind", fmt.Errorf("%w: shard s0 holds 1000 generations", engine.ErrMergesBehind), 429, codeMergesBehind},
		{"backpressure", fmt.Errorf("%w: wanted 300 bytes", engine.ErrBackpressure), 429, codeBackpressure},
		{"fenced", fenced, 409, codeNotOwner},
		{"stopped for fencing", shard(fmt.Errorf("shardmeta: commit shard %q: %w", "s0", shardmeta.ErrFenced)), 409, codeNotOwner},
		{"owned", shard(&shardmeta.OwnedError{Shard: "s0", Raw: "w2"}), 409, codeNotOwner},
		{"stopped", shard(fmt.Errorf("%w: %w", engine.ErrStopped, errors.New("fsync: input/output error"))), 503, codeStopped},
		{"closed", engine.ErrClosed, 503, codeStopped},
		{"context canceled", context.Canceled, 503, ""},
		{"deadline", fmt.Errorf("engine: wait for budget: %w", context.DeadlineExceeded), 503, ""},
		// Flush's commit: were 500s.
		{"flush not applied", fmt.Errorf("engine: shard s0: commit generation 3: %w", fmt.Errorf("%w: shardmeta: commit shard %q", engine.ErrNotApplied, "s0")), 503, codeNotApplied},
		{"flush unknown outcome", fmt.Errorf("engine: shard s0: commit generation 3: %w", shardmeta.ErrUnknownOutcome), 409, codeOutcomeUnknown},
		// A 500 with its code now.
		{"corrupt generation", fmt.Errorf("engine: shard s0: flush generation 3: %w", &generation.CorruptError{Path: "g3", Reason: "no footer"}), 500, codeCorruption},
		{"unexpected", errors.New("something else"), 500, ""},
	} {
		status, e := s.appendError(tc.err, nil)
		if status != tc.status || e.Code != tc.code {
			t.Errorf("%s: %v answered %d %q, want %d %q", tc.name, tc.err, status, e.Code, tc.status, tc.code)
		}
	}
}

// TestFlushErrorAnswers: a flush carries no input, so an error of its that
// blames the request is the engine's own and a 500; the rest are answered
// as for an append.
func TestFlushErrorAnswers(t *testing.T) {
	s := errorServer()
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("engine: shard s0: release: %w", errs.New(errs.InvalidInput, "memtable: generations are released strictly in order")), 500, ""},
		{fmt.Errorf("engine: shard s0: upload: %w", errs.New(errs.NotFound, "objstore: object not found")), 500, ""},
		{fmt.Errorf("engine: shard s0: %w", engine.ErrTooLarge), 500, ""},
		{fmt.Errorf("engine: shard s0: commit generation 3: %w", engine.ErrNotApplied), 503, codeNotApplied},
		{fmt.Errorf("engine: shard s0: commit generation 3: %w", shardmeta.ErrUnknownOutcome), 409, codeOutcomeUnknown},
		{fmt.Errorf("engine: shard s0: %w", engine.ErrFenced), 409, codeNotOwner},
		{fmt.Errorf("%w: shard s0: %w", engine.ErrNoSpace, errors.New("ENOSPC")), 503, codeDiskFull},
		{engine.ErrClosed, 503, codeStopped},
	} {
		if status, e := s.flushError(tc.err); status != tc.status || e.Code != tc.code {
			t.Errorf("flush: %v answered %d %q, want %d %q", tc.err, status, e.Code, tc.status, tc.code)
		}
	}
}

// TestAnswerCodes reads every code the server answers with back to its
// category (errs.FromHTTP, as the client does) under the status the
// server sends it with: a code is never read as another category's.
func TestAnswerCodes(t *testing.T) {
	for _, tc := range []struct {
		code   string
		status int
		want   *errs.Category // nil: outside the taxonomy
	}{
		{codeBadParameter, 400, errs.InvalidInput},
		{codeInvalidAppend, 400, errs.InvalidInput},
		{codeSequence, 409, errs.Conflict},
		{codeConflict, 409, errs.Conflict},
		{codeNotOwner, 409, errs.NotOwner},
		{codeOutcomeUnknown, 409, errs.UnknownOutcome},
		{codeBackpressure, 429, errs.Backpressure},
		{codeMergesBehind, 429, errs.Backpressure},
		{codeTooManyProducers, 429, errs.LimitReached},
		{codeTooLarge, 413, errs.TooLarge},
		{codeStopped, 503, errs.Closed},
		{codeDiskFull, 503, errs.Unavailable},
		{codeStoreDown, 503, errs.Unavailable},
		{codeNotApplied, 503, errs.NotApplied},
		{codeCorruption, 500, errs.Corruption},
		{codeInflightLimit, 429, errs.Backpressure},
		{codeUnknownTable, 404, errs.NotFound},
		// The HTTP layer's answers.
		{codeBodyTimeout, http.StatusRequestTimeout, errs.Unavailable},
		{codeUnauthorized, http.StatusUnauthorized, nil},
		{codeForbidden, http.StatusForbidden, nil},
	} {
		got, ok := errs.FromHTTP(tc.status, tc.code)
		if ok != (tc.want != nil) || got != tc.want {
			t.Errorf("%d %q reads back as %v, %t; want %v", tc.status, tc.code, got, ok, tc.want)
		}
		if tc.want != nil && tc.want.HTTPStatus() != tc.status && tc.status != http.StatusRequestTimeout {
			t.Errorf("%q is sent with %d, its category %v with %d", tc.code, tc.status, tc.want, tc.want.HTTPStatus())
		}
	}
}
