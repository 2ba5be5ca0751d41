package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

const s3Backend = "s3"

// s3Store keeps each object under prefix/name in bucket.
type s3Store struct {
	c      *s3.Client
	bucket string
	prefix string // no slashes at either end; "" for the bucket's root
	o      Options
	m      *metrics
}

func openS3(ctx context.Context, bucket, prefix string, o Options) (Store, error) {
	var load []func(*config.LoadOptions) error
	if o.Region != "" {
		load = append(load, config.WithRegion(o.Region))
	}
	if o.AccessKey != "" {
		load = append(load, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKey, o.SecretKey, "")))
	}
	s := &s3Store{bucket: bucket, prefix: prefix, o: o, m: newMetrics(o.Registerer)}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("objstore: open %s: loading AWS configuration: %w", s, err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	s.c = s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
		if o.HTTPClient != nil {
			// Set on the client, not the shared config, which would try to
			// add AWS_CA_BUNDLE to it: a caller's client brings its own TLS.
			so.HTTPClient = o.HTTPClient
		}
		// Retries are ours (retry.go): the lost-answer rule needs to see
		// every attempt.
		so.Retryer = aws.NopRetryer{}
	})
	return s, nil
}

func (s *s3Store) String() string {
	if s.prefix == "" {
		return "s3://" + s.bucket
	}
	return "s3://" + s.bucket + "/" + s.prefix
}

func (s *s3Store) key(name string) string {
	if s.prefix == "" {
		return name
	}
	return s.prefix + "/" + name
}

// fail names the operation and the object in err, or the store when the
// name itself is invalid.
func (s *s3Store) fail(op, name string, err error) error {
	if errors.Is(err, ErrInvalidName) {
		return opError(op, s.String(), err)
	}
	return opError(op, joinURL(s.String(), name), err)
}

func (s *s3Store) Create(ctx context.Context, name string, r io.ReaderAt, size int64) error {
	if err := s.create(ctx, name, r, size); err != nil {
		return s.fail("create", name, err)
	}
	return nil
}

func (s *s3Store) create(ctx context.Context, name string, r io.ReaderAt, size int64) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if err := checkReader(r, size); err != nil {
		return err
	}
	if size > s.o.PartSize {
		return s.createMultipart(ctx, name, r, size)
	}
	lost, err := s.do(ctx, "PutObject", func(actx context.Context) (int64, error) {
		_, err := s.c.PutObject(actx, &s3.PutObjectInput{
			Bucket:        &s.bucket,
			Key:           aws.String(s.key(name)),
			Body:          io.NewSectionReader(r, 0, size),
			ContentLength: aws.Int64(size),
			IfNoneMatch:   aws.String("*"),
		})
		if err != nil {
			return 0, err
		}
		return size, nil
	})
	return s.settle(ctx, name, r, size, lost, err)
}

// checkReader makes sure r holds size bytes, before a request announces
// them.
func checkReader(r io.ReaderAt, size int64) error {
	if size < 0 {
		return fmt.Errorf("negative size %d", size)
	}
	if size == 0 {
		return nil
	}
	var b [1]byte
	if n, err := r.ReadAt(b[:], size-1); n != 1 {
		return fmt.Errorf("the reader does not hold the %d bytes announced: %w", size, err)
	}
	return nil
}

// settle turns the result of a conditional write into Create's answer by
// the lost-answer rule: a refusal (412) is ErrExists only if no earlier
// attempt may have applied; otherwise, and when the attempts ran out
// after a lost answer, the object is read back and compared with r.
func (s *s3Store) settle(ctx context.Context, name string, r io.ReaderAt, size int64, lost bool, err error) error {
	switch {
	case err == nil:
		return nil
	case !lost && isStatus(err, 412):
		return ErrExists
	case !lost:
		return err
	}
	same, rerr := s.sameBytes(ctx, name, r, size)
	switch {
	case rerr == nil && same:
		s.o.Logger.Info("objstore: a lost answer resolved by read-back: our own write",
			"object", joinURL(s.String(), name), "lost", err)
		return nil
	case rerr == nil:
		return ErrExists
	case errors.Is(rerr, ErrNotFound):
		return fmt.Errorf("%w: an answer was lost and the object is not there on read-back"+
			" (a request still in flight may yet land): %w", ErrUnknownOutcome, err)
	}
	return fmt.Errorf("%w: an answer was lost (%w) and reading back failed: %w", ErrUnknownOutcome, err, rerr)
}

// sameBytes reads name back and reports whether it holds exactly the size
// bytes of r; ErrNotFound if it is absent.
func (s *s3Store) sameBytes(ctx context.Context, name string, r io.ReaderAt, size int64) (bool, error) {
	obj, err := s.open(ctx, name)
	if err != nil {
		return false, err
	}
	if obj.Size() != size {
		return false, nil
	}
	const chunk = 8 << 20
	got, want := make([]byte, min(chunk, size)), make([]byte, min(chunk, size))
	for off := int64(0); off < size; off += chunk {
		n := min(chunk, size-off)
		if _, err := obj.readAt(ctx, got[:n], off); err != nil && err != io.EOF {
			return false, err
		}
		if _, err := r.ReadAt(want[:n], off); err != nil && err != io.EOF {
			return false, err
		}
		if !bytes.Equal(got[:n], want[:n]) {
			return false, nil
		}
	}
	return true, nil
}

func (s *s3Store) Open(ctx context.Context, name string) (Object, error) {
	o, err := s.open(ctx, name)
	if err != nil {
		return nil, s.fail("open", name, err)
	}
	return o, nil
}

func (s *s3Store) open(ctx context.Context, name string) (*s3Object, error) {
	out, err := s.head(ctx, name)
	if err != nil {
		return nil, err
	}
	return &s3Object{s: s, ctx: context.WithoutCancel(ctx), name: name,
		size: aws.ToInt64(out.ContentLength), etag: aws.ToString(out.ETag)}, nil
}

func (s *s3Store) head(ctx context.Context, name string) (*s3.HeadObjectOutput, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	var out *s3.HeadObjectOutput
	_, err := s.do(ctx, "HeadObject", func(actx context.Context) (int64, error) {
		var err error
		out, err = s.c.HeadObject(actx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name))})
		return 0, err
	})
	if isStatus(err, 404) {
		return nil, mark(ErrNotFound, err)
	}
	return out, err
}

func (s *s3Store) Stat(ctx context.Context, name string) (Info, error) {
	out, err := s.head(ctx, name)
	if err != nil {
		return Info{}, s.fail("stat", name, err)
	}
	return Info{Name: name, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

func (s *s3Store) List(ctx context.Context, prefix string) ([]Info, error) {
	infos, err := s.list(ctx, prefix)
	if err != nil {
		return nil, s.fail("list", prefix, err)
	}
	return infos, nil
}

func (s *s3Store) list(ctx context.Context, prefix string) ([]Info, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	keyPrefix := s.key(prefix)
	if prefix == "" && s.prefix != "" {
		keyPrefix = s.prefix + "/"
	}
	var infos []Info
	var token *string
	for {
		var out *s3.ListObjectsV2Output
		_, err := s.do(ctx, "ListObjectsV2", func(actx context.Context) (int64, error) {
			var err error
			out, err = s.c.ListObjectsV2(actx, &s3.ListObjectsV2Input{
				Bucket: &s.bucket, Prefix: &keyPrefix, ContinuationToken: token,
				MaxKeys: aws.Int32(int32(s.o.ListPageSize)),
			})
			return 0, err
		})
		if err != nil {
			return nil, err
		}
		for _, obj := range out.Contents {
			name := strings.TrimPrefix(aws.ToString(obj.Key), keyPrefix[:len(keyPrefix)-len(prefix)])
			if checkName(name) != nil {
				s.o.Logger.Debug("objstore: list skips a key that is no object name", "key", aws.ToString(obj.Key))
				continue
			}
			infos = append(infos, Info{Name: name, Size: aws.ToInt64(obj.Size), ModTime: aws.ToTime(obj.LastModified)})
		}
		if !aws.ToBool(out.IsTruncated) || aws.ToString(out.NextContinuationToken) == "" {
			break
		}
		token = out.NextContinuationToken
	}
	slices.SortFunc(infos, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return infos, nil
}

func (s *s3Store) Delete(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return s.fail("delete", name, err)
	}
	_, err := s.do(ctx, "DeleteObject", func(actx context.Context) (int64, error) {
		_, err := s.c.DeleteObject(actx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name))})
		return 0, err
	})
	if err != nil && !isStatus(err, 404) {
		return s.fail("delete", name, err)
	}
	return nil
}

// s3Object reads an object by ranged GETs, each conditional on the ETag
// seen when it was opened, so a deleted and recreated name can never mix
// two objects' bytes. ReadAt has no context of its own: it runs under the
// values (not the cancellation) of Open's context.
type s3Object struct {
	s    *s3Store
	ctx  context.Context
	name string
	size int64
	etag string
}

func (o *s3Object) Size() int64  { return o.size }
func (o *s3Object) Close() error { return nil }

func (o *s3Object) ReadAt(p []byte, off int64) (int, error) {
	n, err := o.readAt(o.ctx, p, off)
	if err != nil && err != io.EOF {
		return n, o.s.fail("read", o.name, err)
	}
	return n, err
}

func (o *s3Object) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset %d", off)
	}
	if off >= o.size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), o.size-off)
	if want == 0 {
		return 0, nil
	}
	var n int
	_, err := o.s.do(ctx, "GetObject", func(actx context.Context) (int64, error) {
		out, err := o.s.c.GetObject(actx, &s3.GetObjectInput{
			Bucket: &o.s.bucket, Key: aws.String(o.s.key(o.name)),
			Range:   aws.String(fmt.Sprintf("bytes=%d-%d", off, off+want-1)),
			IfMatch: nonEmpty(o.etag),
		})
		if err != nil {
			return 0, err
		}
		defer out.Body.Close()
		n, err = io.ReadFull(out.Body, p[:want])
		if err != nil {
			return int64(n), fmt.Errorf("reading bytes %d..%d: %w", off, off+want, errors.Join(err, io.ErrUnexpectedEOF))
		}
		return int64(n), nil
	})
	switch {
	case isStatus(err, 412):
		return 0, fmt.Errorf("the object changed since it was opened (ETag %s): %w", o.etag, err)
	case isStatus(err, 404):
		return 0, mark(ErrNotFound, err)
	case err != nil:
		return 0, err
	case int64(n) < int64(len(p)):
		return n, io.EOF
	}
	return n, nil
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// abortTimeout bounds the clean-up of a failed multipart upload, which
// runs even when the caller's context has ended.
const abortTimeout = 30 * time.Second
