package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Bearer tokens (RFC 6750) restrict what a client may do. Ingest tokens
// admit ingest and the reads of /v1/ (they name producers and sources);
// admin tokens admit flush, and everything an ingest token admits. Flush
// needs an admin token when any is configured, else an ingest token when
// any is, else nothing. Probes and /metrics need none: a load balancer and
// a scraper must reach them. Several tokens of one kind may be accepted
// at once, so that producers can move to a new token before the old one
// is withdrawn.

// scope is what an endpoint needs.
type scope int

const (
	scopeIngest scope = iota // ingest and reads
	scopeAdmin               // flush
)

// Codes of refusals for a token.
const (
	codeUnauthorized = "unauthorized" // 401: no token, or one the server does not know
	codeForbidden    = "forbidden"    // 403: an ingest token where an admin token is needed
)

// tokens are the SHA-256 digests of the accepted tokens of each kind:
// comparing digests takes the same time whatever the length of what a
// client sent.
type tokens struct {
	ingest, admin [][sha256.Size]byte
}

// SetTokens replaces the accepted tokens of both kinds at once, for
// rotation without a restart: a request is checked against the old set or
// the new, never a mix. Whether a kind is required is the caller's to
// keep: a kind set to none admits everyone from then on.
func (s *Server) SetTokens(ingest, admin []string) {
	t := newTokens(ingest, admin)
	s.tokens.Store(&t)
}

func newTokens(ingest, admin []string) tokens {
	digest := func(ts []string) [][sha256.Size]byte {
		var out [][sha256.Size]byte
		for _, t := range ts {
			out = append(out, sha256.Sum256([]byte(t)))
		}
		return out
	}
	return tokens{ingest: digest(ingest), admin: digest(admin)}
}

// matches compares d with every digest, in constant time, and without
// stopping at a match: the time taken says nothing of which matched.
func matches(d [sha256.Size]byte, set [][sha256.Size]byte) bool {
	found := 0
	for i := range set {
		found |= subtle.ConstantTimeCompare(d[:], set[i][:])
	}
	return found == 1
}

// bearer returns the token of an "Authorization: Bearer" header.
func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// authorize wraps h with the check of what scope needs.
func (s *Server) authorize(need scope, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.allowed(w, r, need) {
			h(w, r)
		}
	}
}

// allowed checks the request's token, or answers 401 or 403.
func (s *Server) allowed(w http.ResponseWriter, r *http.Request, need scope) bool {
	t := s.tokens.Load()
	if len(t.ingest) == 0 && len(t.admin) == 0 {
		return true
	}
	if need == scopeIngest && len(t.ingest) == 0 {
		return true // only flush is restricted
	}
	tok, ok := bearer(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="rollwal"`)
		s.fail(w, r, http.StatusUnauthorized, apiError{Error: "this endpoint needs a bearer token: send the header Authorization: Bearer TOKEN", Code: codeUnauthorized})
		return false
	}
	d := sha256.Sum256([]byte(tok))
	admin, ingest := matches(d, t.admin), matches(d, t.ingest)
	switch {
	case admin:
		return true
	case need == scopeIngest && ingest:
		return true
	case need == scopeAdmin && ingest && len(t.admin) == 0:
		return true
	case ingest:
		w.Header().Set("WWW-Authenticate", `Bearer realm="rollwal", error="insufficient_scope"`)
		s.fail(w, r, http.StatusForbidden, apiError{Error: "this endpoint needs the admin token; an ingest token admits ingest and reads only", Code: codeForbidden})
		return false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="rollwal", error="invalid_token"`)
	s.fail(w, r, http.StatusUnauthorized, apiError{Error: "the bearer token is not one this writer accepts", Code: codeUnauthorized})
	return false
}
