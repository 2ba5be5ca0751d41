package client

import (
	"context"
	"errors"
	"testing"

	"github.com/rollwal/rollwal/server"
)

// TestTokenIsSent: against a writer that needs an ingest token, a Client
// without Options.Token is refused at its first append with
// ErrUnauthorized, not retried and not an unknown outcome (nothing was
// stored); with it, a resumed session (whose first request reads the
// producer's state) appends.
func TestTokenIsSent(t *testing.T) {
	const token = "ingest-token-0123456789"
	w := newWriterWith(t, nil, func(o *server.Options) { o.IngestTokens = []string{token} })
	ctx := context.Background()
	c, waits := newClient(t, w.ts.URL, Options{})
	_, err := c.Append(ctx, "s0", rows("a"), nil)
	if !errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrOutcomeUnknown) || len(waits.waits) != 0 {
		t.Fatalf("without a token: %v after %d retries, want ErrUnauthorized at once, not an unknown outcome", err, len(waits.waits))
	}
	c, _ = newClient(t, w.ts.URL, Options{Producer: "p1", Token: token})
	if res, err := c.Append(ctx, "s0", rows("a", "b"), nil); err != nil || res.Stored != 2 {
		t.Fatalf("with the token: %+v, %v", res, err)
	}
	if n := w.memtableRows(t, "s0"); n != 2 {
		t.Fatalf("the shard holds %d rows, want the 2 of the append with the token", n)
	}
}
