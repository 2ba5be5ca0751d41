package rest

import (
	"encoding/base64"
	"net/url"
	"strconv"
)

// pager is how a list request pages (see the package documentation):
// not at all without pageToken; else size entries after the key after.
type pager struct {
	paged bool
	size  int
	after string // "" with the empty token: from the start (keys are never empty)
}

// pager reads pageToken and pageSize. pageSize is checked even when the
// list is not paged (iceberg-go sends it alone), but only bounds a paged
// one.
func (h *handler) pager(q url.Values) (pager, *apiError) {
	p := pager{size: h.opts.MaxPageSize}
	if s := q.Get("pageSize"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return p, badRequest("pageSize %q: want a positive integer", s)
		}
		p.size = min(n, h.opts.MaxPageSize)
	}
	if !q.Has("pageToken") {
		return p, nil
	}
	p.paged = true
	if tok := q.Get("pageToken"); tok != "" {
		after, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(after) == 0 {
			return p, badRequest("pageToken %q is not one this catalog hands out: start a listing with an empty pageToken", tok)
		}
		p.after = string(after)
	}
	return p, nil
}

// page returns the page of items (sorted by key, keys unique) and the
// token of the next page, nil at the end (JSON null).
func page[T any](items []T, key func(T) string, p pager) ([]T, *string) {
	if !p.paged {
		return items, nil
	}
	start := 0
	if p.after != "" {
		for start < len(items) && key(items[start]) <= p.after {
			start++
		}
	}
	end := min(start+p.size, len(items))
	out := items[start:end]
	if end == len(items) {
		return out, nil
	}
	next := base64.RawURLEncoding.EncodeToString([]byte(key(items[end-1])))
	return out, &next
}
