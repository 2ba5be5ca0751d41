package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ContentTypeNDJSON is what Append sends: one JSON object per line.
const ContentTypeNDJSON = "application/x-ndjson"

// Defaults of Options.
const (
	DefaultMaxRetries = 6
	DefaultMinBackoff = 50 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// Options configure a Client. The zero value is ready to use.
type Options struct {
	// HTTPClient sends the requests; default a client with a 60 s timeout
	// whose transport keeps enough idle connections for concurrent appends.
	HTTPClient *http.Client
	// MaxRetries bounds the retries after a request's first attempt;
	// 0 means DefaultMaxRetries, negative means none.
	MaxRetries int
	// MinBackoff is the wait before the first retry, doubled on each next
	// one up to MaxBackoff, with jitter; a Retry-After beyond MaxBackoff is
	// cut to it. Defaults DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives a line per retry; default discards.
	Logger *slog.Logger
}

// Source names the upstream position that an append covers.
type Source struct {
	Name   string
	Offset int64
}

// Result is the writer's acknowledgement of a request.
type Result struct {
	Acked      int    `json:"acked"`
	Stored     int    `json:"stored"`
	Duplicates int    `json:"duplicates"`
	FirstSeq   uint64 `json:"first_seq"`
	LastSeq    uint64 `json:"last_seq"`
	Generation uint64 `json:"generation"`
	// Attempts is how many times the request was sent.
	Attempts int `json:"-"`
}

// Client appends rows to the shards of one writer endpoint. It is safe for
// concurrent use.
type Client struct {
	base *url.URL
	opts Options
	// sleep waits between attempts; tests replace it to observe the waits.
	sleep func(context.Context, time.Duration) error
}

// New returns a client of the writer at baseURL (e.g. http://host:8080).
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("rollwal client: base URL %q: want http(s)://host[:port]", baseURL)
	}
	if opts.MaxBackoff > 0 && opts.MinBackoff > opts.MaxBackoff {
		return nil, fmt.Errorf("rollwal client: MinBackoff %v is above MaxBackoff %v", opts.MinBackoff, opts.MaxBackoff)
	}
	opts.defaults()
	return &Client{base: u, opts: opts, sleep: sleepCtx}, nil
}

func (o *Options) defaults() {
	if o.HTTPClient == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// The default keeps 2 idle connections per host: concurrent
		// producers would open and close a connection per request.
		t.MaxIdleConnsPerHost = 64
		o.HTTPClient = &http.Client{Transport: t, Timeout: 60 * time.Second}
	}
	switch {
	case o.MaxRetries == 0:
		o.MaxRetries = DefaultMaxRetries
	case o.MaxRetries < 0:
		o.MaxRetries = 0
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
		if o.MaxBackoff > 0 {
			o.MinBackoff = min(o.MinBackoff, o.MaxBackoff)
		}
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Append sends rows to shard as one request and returns once the writer
// acknowledged them, retrying as the package documentation describes. src
// may be nil.
func (c *Client) Append(ctx context.Context, shard string, rows []map[string]any, src *Source) (Result, error) {
	if len(rows) == 0 {
		return Result{}, errors.New("rollwal client: no rows to append")
	}
	var body bytes.Buffer
	for i, r := range rows {
		if err := encodeRow(&body, r); err != nil {
			return Result{}, fmt.Errorf("rollwal client: row %d: %w", i, err)
		}
	}
	return c.send(ctx, shard, body.Bytes(), src)
}

// encodeRow writes r as one NDJSON line.
func encodeRow(w *bytes.Buffer, r map[string]any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// send posts an NDJSON body, retrying what is safe to retry.
func (c *Client) send(ctx context.Context, shard string, body []byte, src *Source) (Result, error) {
	u := c.rowsURL(shard, src)
	for attempt := 1; ; attempt++ {
		res, err := c.once(ctx, u, body)
		if err == nil {
			res.Attempts = attempt
			return res, nil
		}
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("rollwal client: append to shard %q: %w", shard, ctx.Err())
		}
		if !retryable(err) || attempt > c.opts.MaxRetries {
			return Result{}, c.giveUp(shard, attempt, err)
		}
		wait := c.backoff(attempt, retryAfter(err))
		c.opts.Logger.InfoContext(ctx, "retrying append", "shard", shard, "attempt", attempt, "wait", wait, "err", err)
		if err := c.sleep(ctx, wait); err != nil {
			return Result{}, fmt.Errorf("rollwal client: append to shard %q: %w", shard, err)
		}
	}
}

func (c *Client) giveUp(shard string, attempts int, err error) error {
	if attempts == 1 {
		return err
	}
	return fmt.Errorf("rollwal client: append to shard %q: gave up after %d attempts: %w", shard, attempts, err)
}

func (c *Client) rowsURL(shard string, src *Source) string {
	u := c.base.JoinPath("v1", "shards", shard, "rows")
	if src != nil {
		u.RawQuery = url.Values{"source": {src.Name}, "offset": {strconv.FormatInt(src.Offset, 10)}}.Encode()
	}
	return u.String()
}

// backoff is the wait before retry number attempt: exponential, with
// equal jitter (half fixed, half random) so that producers that failed
// together do not retry together, and never shorter than the server's
// Retry-After, all within MaxBackoff.
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := c.opts.MaxBackoff
	if attempt-1 < 32 {
		if exp := c.opts.MinBackoff << (attempt - 1); exp > 0 && exp < d {
			d = exp
		}
	}
	d = d/2 + rand.N(d/2+1)
	return min(max(d, retryAfter), c.opts.MaxBackoff)
}

// once sends one attempt.
func (c *Client) once(ctx context.Context, u string, body []byte) (Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return Result{}, fmt.Errorf("rollwal client: %w", err)
	}
	req.Header.Set("Content-Type", ContentTypeNDJSON)
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return Result{}, &transportError{err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Result{}, &transportError{err}
	}
	if resp.StatusCode != http.StatusOK {
		return Result{}, statusError(resp, b)
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		// A cut answer: the rows may be stored, and a retry is safe.
		return Result{}, &transportError{fmt.Errorf("unreadable acknowledgement %q: %w", b, err)}
	}
	return res, nil
}
