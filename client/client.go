package client

import (
	"bytes"
	"context"
	"crypto/tls"
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
	// TLSConfig, when set, is the TLS configuration of the default
	// HTTPClient's transport, for an https:// writer: RootCAs for a
	// writer whose certificate the system roots do not sign, Certificates
	// (or GetClientCertificate) for one that requires client certificates
	// (http.tls.client_ca_file). The Client uses a clone. Nil (the
	// default) verifies the writer against the system roots and presents
	// no certificate. It cannot be combined with HTTPClient (configure that
	// client's transport instead) nor with an http:// base URL.
	TLSConfig *tls.Config
	// MaxRetries bounds the retries after a request's first attempt;
	// 0 means DefaultMaxRetries, negative means none.
	MaxRetries int
	// MinBackoff is the wait before the first retry, doubled on each next
	// one up to MaxBackoff, with jitter; a Retry-After beyond MaxBackoff is
	// cut to it. Defaults DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives a line per retry; default discards.
	Logger *slog.Logger
	// Producer is the id of the Client's producer session (1–128 bytes of
	// [A-Za-z0-9._:-], not "." or ".."). Empty (the default) makes a random
	// one per Client, "go-" and 16 hex digits from crypto/rand, numbered
	// from 0 in every shard. A caller-chosen id resumes instead: before its
	// first batch to a shard the Client asks the writer for the id's next
	// expected sequence there (GET /v1/shards/{shard}/producers/{id}). See
	// the package documentation, "Producer sessions".
	Producer string
	// NoSession sends rows without a producer session, as clients before
	// sessions did: a retry is then deduplicated by ids only while the
	// first attempt is still in the writer's memtable, and concurrent
	// Appends to one shard are not serialized.
	NoSession bool
	// Token, when set, is sent on every request as a bearer token
	// ("Authorization: Bearer <Token>"): the writer's ingest token (or its
	// admin token). A writer that needs one answers 401 without it, which
	// matches ErrUnauthorized.
	Token string
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
	// SessionSeq is the producer-session sequence number the batch's first
	// row was sent with (its rows took SessionSeq … SessionSeq+rows-1);
	// 0 without a session.
	SessionSeq uint64 `json:"-"`
}

// Client appends rows to the shards of one writer endpoint. It is safe for
// concurrent use.
type Client struct {
	base *url.URL
	opts Options
	// sess numbers the Client's batches per shard; nil with NoSession.
	sess *session
	// sleep waits between attempts; tests replace it to observe the waits.
	sleep func(context.Context, time.Duration) error
}

// New returns a client of the writer at baseURL (e.g. http://host:8080).
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("rollwal client: base URL %q: want http(s)://host[:port]", baseURL)
	}
	if opts.TLSConfig != nil && opts.HTTPClient != nil {
		return nil, errors.New("rollwal client: TLSConfig and HTTPClient are both set: set the TLS configuration on HTTPClient's transport")
	}
	if opts.TLSConfig != nil && u.Scheme != "https" {
		return nil, fmt.Errorf("rollwal client: TLSConfig is set but base URL %q is not https://", baseURL)
	}
	if opts.MaxBackoff > 0 && opts.MinBackoff > opts.MaxBackoff {
		return nil, fmt.Errorf("rollwal client: MinBackoff %v is above MaxBackoff %v", opts.MinBackoff, opts.MaxBackoff)
	}
	sess, err := newSession(opts)
	if err != nil {
		return nil, err
	}
	opts.defaults()
	return &Client{base: u, opts: opts, sess: sess, sleep: sleepCtx}, nil
}

// Producer returns the id of the Client's producer session, "" with
// NoSession.
func (c *Client) Producer() string {
	if c.sess == nil {
		return ""
	}
	return c.sess.id
}

func (o *Options) defaults() {
	if o.HTTPClient == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// The default keeps 2 idle connections per host: concurrent
		// producers would open and close a connection per request.
		t.MaxIdleConnsPerHost = 64
		if o.TLSConfig != nil {
			t.TLSClientConfig = o.TLSConfig.Clone()
		}
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
// may be nil. With a session, Appends to one shard take turns (see
// "Producer sessions"); Appends to different shards run concurrently.
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
	return c.appendBody(ctx, shard, body.Bytes(), len(rows), src)
}

// AppendNDJSON is Append for rows a producer has as NDJSON already: body
// is sent as it is, one JSON object a line (blank lines are skipped, as
// the writer skips them), and the writer validates it as it validates
// Append's. With a session, its rows take session positions by that
// count of lines.
func (c *Client) AppendNDJSON(ctx context.Context, shard string, body []byte, src *Source) (Result, error) {
	n := ndjsonRows(body)
	if n == 0 {
		return Result{}, errors.New("rollwal client: no rows to append")
	}
	return c.appendBody(ctx, shard, body, n, src)
}

// ndjsonRows counts the lines of body that are not blank.
func ndjsonRows(body []byte) int {
	n := 0
	for len(body) > 0 {
		line, rest, _ := bytes.Cut(body, []byte{'\n'})
		if len(bytes.TrimSpace(line)) > 0 {
			n++
		}
		body = rest
	}
	return n
}

// appendBody sends an NDJSON body of n rows, in the Client's session
// unless it has none.
func (c *Client) appendBody(ctx context.Context, shard string, body []byte, n int, src *Source) (Result, error) {
	if c.sess == nil {
		res, maybe, err := c.send(ctx, shard, body, src, nil)
		return res, outcome(err, maybe)
	}
	return c.sendInSession(ctx, shard, &batchSeq{body: body, rows: n, src: cloneSource(src)})
}

// send posts an NDJSON body, retrying what is safe to retry; seq, when
// set, is the session position of its first row, the same on every
// attempt. maybe reports whether some attempt ended without a definite
// answer, so that the rows may be stored even when err is a refusal.
func (c *Client) send(ctx context.Context, shard string, body []byte, src *Source, seq *uint64) (res Result, maybe bool, err error) {
	u := c.rowsURL(shard, src, seq)
	attempts, maybe, err := c.retrying(ctx, "append", shard, func() error {
		res = Result{}
		return c.once(ctx, http.MethodPost, u, body, &res)
	})
	res.Attempts = attempts
	return res, maybe, err
}

// retrying runs attempt until it succeeds, fails for good or runs out of
// retries, waiting the backoff between attempts. maybe is as for send.
func (c *Client) retrying(ctx context.Context, what, shard string, attempt func() error) (attempts int, maybe bool, _ error) {
	for n := 1; ; n++ {
		err := attempt()
		if err == nil {
			return n, maybe, nil
		}
		if refused, _ := refusal(err); !refused {
			maybe = true
		}
		if ctx.Err() != nil {
			return n, maybe, fmt.Errorf("rollwal client: %s to shard %q: %w", what, shard, ctx.Err())
		}
		if !retryable(err) || n > c.opts.MaxRetries {
			return n, maybe, c.giveUp(what, shard, n, err)
		}
		wait := c.backoff(n, retryAfter(err))
		c.opts.Logger.InfoContext(ctx, "retrying "+what, "shard", shard, "attempt", n, "wait", wait, "err", err)
		if err := c.sleep(ctx, wait); err != nil {
			return n, maybe, fmt.Errorf("rollwal client: %s to shard %q: %w", what, shard, err)
		}
	}
}

func (c *Client) giveUp(what, shard string, attempts int, err error) error {
	if attempts == 1 {
		return err
	}
	return fmt.Errorf("rollwal client: %s to shard %q: gave up after %d attempts: %w", what, shard, attempts, err)
}

func (c *Client) rowsURL(shard string, src *Source, seq *uint64) string {
	u := c.base.JoinPath("v1", "shards", shard, "rows")
	q := url.Values{}
	if src != nil {
		q.Set("source", src.Name)
		q.Set("offset", strconv.FormatInt(src.Offset, 10))
	}
	if seq != nil {
		q.Set("producer", c.sess.id)
		q.Set("seq", strconv.FormatUint(*seq, 10))
	}
	u.RawQuery = q.Encode()
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

// once sends one attempt and decodes a 200 answer into out.
func (c *Client) once(ctx context.Context, method, u string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("rollwal client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", ContentTypeNDJSON)
	}
	if c.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return &transportError{err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &transportError{err}
	}
	if resp.StatusCode != http.StatusOK {
		return statusError(resp, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		// A cut answer: the rows may be stored, and a retry is safe.
		return &transportError{fmt.Errorf("unreadable answer %q: %w", b, err)}
	}
	return nil
}
