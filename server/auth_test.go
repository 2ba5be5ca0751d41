package server

import (
	"net/http"
	"strings"
	"sync"
	"testing"
)

const (
	ingestToken  = "ingest-token-0123456789"
	ingestToken2 = "ingest-token-rotated-0123"
	adminToken   = "admin-token-0123456789"
)

// authCase is one request and the status it must get; challenge is what
// WWW-Authenticate must hold on a refusal.
type authCase struct {
	method, path, token string
	want                int
	challenge           string
}

// TestTokensRestrictOperations: with tokens configured, ingest and the
// reads of /v1/ need an ingest (or the admin) token, flush needs the admin
// token (an ingest token is 403), and with no admin token flush takes the
// ingest token; a missing or unknown token is 401 with a Bearer challenge
// and a JSON error, and stores nothing. Probes and /metrics stay open
// whatever is configured.
func TestTokensRestrictOperations(t *testing.T) {
	rows, flush, status := "/v1/shards/s0/rows", "/v1/shards/s0/flush", "/v1/shards/s0"
	open := []authCase{{"GET", "/livez", "", 200, ""}, {"GET", "/readyz", "", 200, ""}, {"GET", "/metrics", "", 200, ""}}
	for _, tc := range []struct {
		name          string
		ingest, admin []string
		cases         []authCase
	}{
		{"ingest and admin tokens", []string{ingestToken, ingestToken2}, []string{adminToken}, []authCase{
			{"POST", rows, "", 401, `Bearer realm="rollwal"`},
			{"POST", rows, "not-a-token-of-ours-000", 401, `error="invalid_token"`},
			{"POST", rows, ingestToken, 200, ""},
			{"POST", rows, ingestToken2, 200, ""},
			{"POST", rows, adminToken, 200, ""},
			{"POST", flush, "", 401, `Bearer realm="rollwal"`},
			{"POST", flush, ingestToken, 403, `error="insufficient_scope"`},
			{"POST", flush, adminToken, 200, ""},
			{"GET", status, "", 401, "Bearer"},
			{"GET", "/v1/shards", "", 401, "Bearer"},
			{"GET", status + "/producers/p", "", 401, "Bearer"},
			{"GET", status, ingestToken, 200, ""},
		}},
		{"ingest token only", []string{ingestToken}, nil, []authCase{
			{"POST", rows, "", 401, "Bearer"},
			{"POST", flush, "", 401, "Bearer"},
			{"POST", flush, ingestToken, 200, ""},
		}},
		{"admin token only", nil, []string{adminToken}, []authCase{
			{"POST", rows, "", 200, ""},
			{"GET", status, "", 200, ""},
			{"POST", flush, "", 401, "Bearer"},
			{"POST", flush, "wrong-admin-token-0000", 401, `error="invalid_token"`},
			{"POST", flush, adminToken, 200, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newServerFixture(t, nil, func(o *Options) { o.IngestTokens, o.AdminTokens = tc.ingest, tc.admin })
			f.srv.SetReady(true)
			for i, c := range append(tc.cases, open...) {
				f.checkAuth(t, i, c)
			}
		})
	}
}

func (f *fixture) checkAuth(t *testing.T, i int, c authCase) {
	t.Helper()
	body, contentType := "", ""
	if strings.HasSuffix(c.path, "/rows") {
		body, contentType = ndjson("a", "b"), ContentTypeNDJSON
	}
	before := f.walTail(t)
	code, h, b := f.doToken(t, c.method, c.path, contentType, body, c.token)
	if code != c.want {
		t.Fatalf("%d: %s %s with token %q: %d %s, want %d", i, c.method, c.path, c.token, code, b, c.want)
	}
	if c.want < 400 {
		return
	}
	e := decode[apiError](t, b)
	if ch := h.Get("WWW-Authenticate"); !strings.Contains(ch, c.challenge) || !strings.HasPrefix(ch, "Bearer") || e.Code == "" || e.Error == "" {
		t.Fatalf("%d: %s %s refused with WWW-Authenticate %q and %s, want a Bearer challenge holding %q and a JSON error with a code",
			i, c.method, c.path, ch, b, c.challenge)
	}
	if after := f.walTail(t); after != before {
		t.Fatalf("%d: a refused request moved the WAL tail from %d to %d", i, before, after)
	}
}

// TestSetTokensWhileServing: tokens swapped while requests run (the race
// detector watches the swap); each request is judged by the old set or the
// new one, and once SetTokens returned the old token is refused.
func TestSetTokensWhileServing(t *testing.T) {
	f := newServerFixture(t, nil, func(o *Options) { o.IngestTokens = []string{ingestToken} })
	f.srv.SetReady(true)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Not doToken: its t.Fatal must not run on this goroutine.
				req, err := http.NewRequest("GET", f.ts.URL+"/v1/shards/s0", nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Authorization", "Bearer "+ingestToken)
				resp, err := f.ts.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 && resp.StatusCode != 401 {
					t.Errorf("during the swap: %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	for i := range 50 {
		if i%2 == 0 {
			f.srv.SetTokens([]string{ingestToken2}, nil)
		} else {
			f.srv.SetTokens([]string{ingestToken, ingestToken2}, nil)
		}
	}
	close(stop)
	wg.Wait()
	f.srv.SetTokens([]string{ingestToken2}, nil)
	for i, c := range []authCase{{"GET", "/v1/shards/s0", ingestToken, 401, `error="invalid_token"`}, {"GET", "/v1/shards/s0", ingestToken2, 200, ""}} {
		f.checkAuth(t, i, c)
	}
}
