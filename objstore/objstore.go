package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/vfs"
)

// Store holds immutable objects by name (see the package doc for names).
type Store interface {
	// Create writes size bytes of r as name unless name exists (ErrExists,
	// nothing changed). The object is durable and whole when Create returns
	// nil. A create whose answer was lost is resolved by reading the object
	// back and comparing it with r: the same bytes are our own write and
	// success, other bytes are ErrExists, and an object that cannot be read
	// back is ErrUnknownOutcome.
	Create(ctx context.Context, name string, r io.ReaderAt, size int64) error
	// Open opens an object for reading; ErrNotFound if it does not exist.
	Open(ctx context.Context, name string) (Object, error)
	// Stat describes an object; ErrNotFound if it does not exist.
	Stat(ctx context.Context, name string) (Info, error)
	// List returns the objects whose names begin with prefix, sorted by
	// name. It pages internally.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes an object; an absent one is not an error.
	Delete(ctx context.Context, name string) error
	// String is the store's URL: file:///dir or s3://bucket/prefix.
	String() string
}

// Object is an open object. ReadAt is safe for concurrent use; on S3 each
// ReadAt is one ranged GET.
type Object interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// Info describes an object. ModTime is zero where the backend keeps none
// (the in-memory test filesystem).
type Info struct {
	Name    string
	Size    int64
	ModTime time.Time
}

// The store's errors, checked with errors.Is. Each carries its category of package errs (see docs/errors.md).
var (
	// ErrExists: Create found the name taken by another object.
	ErrExists = errs.New(errs.Conflict, "objstore: object exists")
	// ErrNotFound: the object does not exist.
	ErrNotFound = errs.New(errs.NotFound, "objstore: object not found")
	// ErrUnknownOutcome: a Create whose answer was lost could not be
	// resolved by reading back; the object may exist now or later.
	ErrUnknownOutcome = errs.New(errs.UnknownOutcome, "objstore: outcome unknown")
	// ErrInvalidName: a name or prefix breaks the naming rules.
	ErrInvalidName = errs.New(errs.InvalidInput, "objstore: invalid name")
)

// Options configure Open. The zero value opens file:// stores on the OS
// filesystem and s3:// stores with the standard credential chain.
type Options struct {
	// FS is the filesystem of file:// stores; default vfs.Default.
	FS vfs.FS

	// Endpoint is the S3 endpoint URL (http://127.0.0.1:7070); empty means
	// AWS's own, from Region. Region defaults to the standard chain's, then
	// us-east-1. PathStyle addresses buckets as endpoint/bucket rather than
	// bucket.endpoint, as most S3-compatible servers need.
	Endpoint  string
	Region    string
	PathStyle bool
	// AccessKey and SecretKey, when set, replace the standard chain
	// (environment, shared config and credentials files, SSO, IMDS).
	AccessKey, SecretKey string

	// MaxAttempts bounds the attempts of each S3 request; default 5.
	MaxAttempts int
	// Backoff is the ceiling of the first retry's jittered wait; each retry
	// doubles it, up to 32×Backoff. Default 100ms.
	Backoff time.Duration
	// AttemptTimeout bounds one S3 request (one part of a multipart upload);
	// a timed-out request is a lost answer and is retried. Default 0: only
	// the caller's context bounds a request.
	AttemptTimeout time.Duration
	// PartSize: objects larger than this are uploaded in parts of this size
	// (raised when the object would need more than 10,000 parts). Default
	// 64 MiB; at least 5 MiB, S3's minimum part.
	PartSize int64
	// ListPageSize is MaxKeys of each ListObjectsV2 page; default 1000.
	ListPageSize int
	// HTTPClient carries S3 requests: TLS settings, proxies, and fault
	// injection in tests. Default: the SDK's.
	HTTPClient *http.Client

	// Registerer receives the metrics (see metrics.go); nil registers none.
	Registerer prometheus.Registerer
	// Logger; default slog.Default().
	Logger *slog.Logger
}

const (
	defaultMaxAttempts = 5
	defaultBackoff     = 100 * time.Millisecond
	defaultPartSize    = 64 << 20
	// MinPartSize is S3's smallest part but the last.
	MinPartSize     = 5 << 20
	maxParts        = 10000
	defaultPageSize = 1000
)

// EnsureDefaults fills the zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = defaultMaxAttempts
	}
	if o.Backoff == 0 {
		o.Backoff = defaultBackoff
	}
	if o.PartSize == 0 {
		o.PartSize = defaultPartSize
	}
	if o.ListPageSize == 0 {
		o.ListPageSize = defaultPageSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports the first option out of range.
func (o *Options) Validate() error {
	switch {
	case o.MaxAttempts < 1:
		return fmt.Errorf("objstore: MaxAttempts %d: must be at least 1", o.MaxAttempts)
	case o.Backoff < 0 || o.AttemptTimeout < 0:
		return fmt.Errorf("objstore: Backoff %v, AttemptTimeout %v: must not be negative", o.Backoff, o.AttemptTimeout)
	case o.PartSize < MinPartSize:
		return fmt.Errorf("objstore: PartSize %d: must be at least %d (S3's minimum part)", o.PartSize, MinPartSize)
	case o.ListPageSize < 1 || o.ListPageSize > 1000:
		return fmt.Errorf("objstore: ListPageSize %d: must be in 1..1000", o.ListPageSize)
	case (o.AccessKey == "") != (o.SecretKey == ""):
		return errors.New("objstore: AccessKey and SecretKey must be set together")
	}
	return nil
}

// Open opens a store by URL: file:///abs/dir or s3://bucket/prefix. A
// file:// directory is created (durably) if missing; an s3:// bucket must
// exist and is not checked until the first request.
func Open(ctx context.Context, rawURL string, o Options) (Store, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("objstore: open %q: %w", rawURL, err)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("objstore: open %q: a store URL has no user, query or fragment", rawURL)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("objstore: open %q: file URLs name a local absolute path (file:///dir)", rawURL)
		}
		return openFile(u.Path, o)
	case "s3":
		prefix := strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
		if u.Host == "" {
			return nil, fmt.Errorf("objstore: open %q: no bucket", rawURL)
		}
		if prefix != "" {
			if err := ValidateName(prefix); err != nil {
				return nil, fmt.Errorf("objstore: open %q: prefix: %w", rawURL, err)
			}
		}
		return openS3(ctx, u.Host, prefix, o)
	}
	return nil, fmt.Errorf("objstore: open %q: scheme %q: want file or s3", rawURL, u.Scheme)
}

// opError names the operation and the object in an error, and keeps its
// chain for errors.Is.
func opError(op, object string, err error) error {
	return &opErr{op: op, object: object, err: err}
}

type opErr struct {
	op, object string
	err        error
}

// Error reads "objstore: create s3://b/p/name: objstore: object exists"
// without the second package prefix.
func (e *opErr) Error() string {
	return "objstore: " + e.op + " " + e.object + ": " + strings.TrimPrefix(e.err.Error(), "objstore: ")
}

func (e *opErr) Unwrap() error { return e.err }

// mark wraps cause in a sentinel: errors.Is finds both.
func mark(sentinel, cause error) error { return fmt.Errorf("%w: %w", sentinel, cause) }

// joinURL is the URL of an object for errors: the store's URL and the name.
func joinURL(store, name string) string {
	if name == "" {
		return store
	}
	return strings.TrimSuffix(store, "/") + "/" + name
}
