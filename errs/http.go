package errs

// The writer's HTTP answers and the Go client's retries, by category. The
// writer (package server) answers an error of category c with status
// c.HTTPStatus() and a JSON body whose "code" is one of the category's
// codes; the client (package client) reads the category back from the
// status and code with FromHTTP and retries iff c.Retry(). Neither keeps a
// table of its own.

// Statuses, as net/http spells them (this package imports nothing).
const (
	statusBadRequest          = 400
	statusNotFound            = 404
	statusRequestTimeout      = 408
	statusConflict            = 409
	statusRequestEntityTooBig = 413
	statusUnsupportedMedia    = 415
	statusTooManyRequests     = 429
	statusBadGateway          = 502
	statusServiceUnavailable  = 503
	statusGatewayTimeout      = 504
)

// HTTPStatus returns the status the writer answers an error of category c
// with.
func (c *Category) HTTPStatus() int { return c.status }

// Retry reports whether a client sends the same request again, to the
// same writer, after a backoff (a bounded number of times): true for
// Backpressure, NotApplied, Unavailable and Closed, whose cause passes by
// itself and after which nothing, or nothing that a retry could store
// twice, was applied. The client retries a request whose answer was lost
// too (no status, no category): the outcome is unknown, but the producer
// session and the rows' ids make the retry safe.
func (c *Category) Retry() bool { return c.retry }

// Codes returns the writer's answer codes of category c, its own Code
// first.
func (c *Category) Codes() []string { return append([]string(nil), c.codes...) }

// FromHTTP returns the category of a writer's answer of status with the
// given code (the "code" of its JSON body, "" if none), or false for an
// answer the taxonomy has no category for (200, 401 and 403 of access
// control, a 500 other than Corruption's: an error the writer did not
// expect).
//
// A code of a category answered with that category's status decides. Else
// the status does: 400 and 415 are InvalidInput, 404 NotFound, 409
// UnknownOutcome (a 409 that names no cause: do not assume nothing was
// applied), 413 TooLarge, 429 Backpressure, and 408 (the body came too
// slowly; nothing was applied), 502, 503 and 504 (a proxy's, or a writer
// not ready) Unavailable.
func FromHTTP(status int, code string) (*Category, bool) {
	if code != "" {
		for _, c := range precedence {
			if c.status != status {
				continue
			}
			for _, k := range c.codes {
				if k == code {
					return c, true
				}
			}
		}
	}
	switch status {
	case statusBadRequest, statusUnsupportedMedia:
		return InvalidInput, true
	case statusNotFound:
		return NotFound, true
	case statusConflict:
		return UnknownOutcome, true
	case statusRequestEntityTooBig:
		return TooLarge, true
	case statusTooManyRequests:
		return Backpressure, true
	case statusRequestTimeout, statusBadGateway, statusServiceUnavailable, statusGatewayTimeout:
		return Unavailable, true
	}
	return nil, false
}
