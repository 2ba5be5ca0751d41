// Package errs is rollwal's error taxonomy: a dozen categories that say
// what a caller does about an error, whichever package returned it. Every
// package marks its sentinel errors with their category, and errors.Is
// answers across packages:
//
//	if errors.Is(err, errs.Corruption) { ... } // wal, generation, snapshot, shardmeta, catalog alike
//
// A marked error keeps its message and its own chain (errors.Is finds the
// package's sentinel as before); the category only adds a link to it, as
// Pebble's base.MarkCorruptionError does. The HTTP status the writer
// answers with and whether the Go client retries derive from the category
// (see HTTPStatus, Retry and FromHTTP); docs/errors.md has the whole table.
//
// The categories, and what a caller does:
//
//   - InvalidInput: the request (a row, a parameter, a name, a
//     configuration) is refused as it is; nothing was applied, and the same
//     request is refused again. Do not retry: fix or drop it. (400)
//   - NotFound: what the request names does not exist (a shard not hosted
//     here, an object, a snapshot). Do not retry the same. (404)
//   - Conflict: the request contradicts the current state of what it acts
//     on (a producer sequence, a concurrent commit, an object name taken, a
//     base that moved); nothing was applied. Do not retry blindly: read the
//     state again and replan. (409)
//   - NotOwner: the caller is fenced: it does not own the shard (or lock)
//     any more, another writer does. Stop writing there; send to the owner
//     or claim anew. Nothing of the request was applied. (409)
//   - UnknownOutcome: the request was sent and may or may not have applied,
//     now or later. Never assume either: retry only what is idempotent (a
//     producer session, ids, the same prepared commit) or read back. (409)
//   - TooLarge: the request exceeds a size limit (rows or bytes per
//     request, per WAL record, the whole memory budget); nothing was
//     applied and the same request is refused again. Split it. (413)
//   - LimitReached: a limit that does not free up on a retry's timescale
//     (the shard's producer sessions, freed only as idle ones expire);
//     nothing was applied. Do not retry: change what is sent or how many
//     send. (429, without Retry-After)
//   - Backpressure: the writer cannot take the request now (memory budget,
//     merges behind, in-flight limits); nothing was applied. Retry after a
//     backoff. (429)
//   - NotApplied: an ambiguous failure was read back and proved not to
//     have applied; retrying the same operation is safe. (503)
//   - Unavailable: the writer (or a store it needs) cannot serve now and
//     recovers by itself: a full disk, an object store that is down, not
//     ready yet, shutting down. Retry after a backoff. (503)
//   - Closed: the object was closed or stopped for good (a shard after a
//     failed fsync, a closed WAL); it takes nothing more. In process: stop
//     using it, open a new one. Over HTTP: retry, the writer may reopen the
//     shard or another take it over. (503)
//   - Corruption: stored data breaks its format or an invariant (a WAL
//     record, a generation file, a manifest, a snapshot, a catalog record).
//     Do not retry: stop, report it, an operator repairs. (500)
//
// An error may carry several categories: engine.ErrNoSpace is Unavailable
// and, being a kind of engine.ErrBackpressure, Backpressure too; an append
// whose outcome is unknown because the disk filled meanwhile is
// UnknownOutcome and Unavailable. errors.Is answers each; CategoryOf picks
// one by a fixed precedence (the order of Categories), whatever the order
// the errors were wrapped in: first what a caller must not miss (the rows
// may be stored; the data is corrupt; the caller is fenced), last the
// refusals of the request itself.
package errs

import "errors"

// Category is one category of errors. It is an error itself, so that
// errors.Is(err, errs.Corruption) asks whether err carries it.
type Category struct {
	text   string // the error text
	code   string // the wire name; the first of codes
	status int
	retry  bool
	// codes are the writer's answer codes ("code" of its JSON body) of
	// this category, the category's own code first.
	codes []string
}

// Error returns the category's name in words ("invalid input").
func (c *Category) Error() string { return c.text }

// String is Error.
func (c *Category) String() string { return c.text }

// Code returns the category's name on the wire ("invalid_input"; Closed's
// is "stopped", the code the writer has always answered a stopped shard
// with).
func (c *Category) Code() string { return c.code }

// The categories. See the package documentation for what each means.
var (
	InvalidInput = &Category{text: "invalid input", status: 400,
		codes: []string{"invalid_input", "bad_parameter", "invalid_append"}}
	NotFound = &Category{text: "not found", status: 404,
		codes: []string{"not_found", "unknown_table"}}
	Conflict = &Category{text: "conflict", status: 409,
		codes: []string{"conflict", "sequence"}}
	NotOwner = &Category{text: "not owner", status: 409,
		codes: []string{"not_owner"}}
	UnknownOutcome = &Category{text: "outcome unknown", status: 409,
		codes: []string{"outcome_unknown"}}
	TooLarge = &Category{text: "too large", status: 413,
		codes: []string{"too_large"}}
	LimitReached = &Category{text: "limit reached", status: 429,
		codes: []string{"limit_reached", "too_many_producers"}}
	Backpressure = &Category{text: "backpressure", status: 429, retry: true,
		codes: []string{"backpressure", "merges_behind", "inflight_limit"}}
	NotApplied = &Category{text: "not applied", status: 503, retry: true,
		codes: []string{"not_applied"}}
	Unavailable = &Category{text: "unavailable", status: 503, retry: true,
		codes: []string{"unavailable", "disk_full", "store_down"}}
	Closed = &Category{text: "closed", status: 503, retry: true,
		codes: []string{"stopped"}}
	Corruption = &Category{text: "corruption", status: 500,
		codes: []string{"corruption"}}
)

func init() {
	for _, c := range precedence {
		c.code = c.codes[0]
	}
}

// precedence is the order CategoryOf tries the categories in.
var precedence = []*Category{
	UnknownOutcome, Corruption, NotOwner, Closed, NotApplied, Unavailable,
	Backpressure, LimitReached, TooLarge, Conflict, NotFound, InvalidInput,
}

// Categories returns every category, in the precedence of CategoryOf.
func Categories() []*Category { return append([]*Category(nil), precedence...) }

// CategoryOf returns the category err carries, or false if it carries
// none. Of several, it returns the first in the order of Categories.
func CategoryOf(err error) (*Category, bool) {
	if err == nil {
		return nil, false
	}
	for _, c := range precedence {
		if errors.Is(err, c) {
			return c, true
		}
	}
	return nil, false
}

// Mark returns err marked with category c: its message is err's, and
// errors.Is finds both err (and everything err wraps) and c. Mark(nil, c)
// is nil; with a nil c, Mark returns err.
func Mark(err error, c *Category) error {
	if err == nil || c == nil {
		return err
	}
	return &marked{err: err, cat: c}
}

// New returns a new error with the text msg, marked with category c: a
// package's sentinel.
func New(c *Category, msg string) error { return Mark(errors.New(msg), c) }

// marked is an error with a category.
type marked struct {
	err error
	cat *Category
}

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.cat} }
