package s3test_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"go.uber.org/goleak"

	"github.com/rollwal/rollwal/internal/s3test"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func put(ctx context.Context, cli *s3.Client, bucket, key, body string, opt func(*s3.PutObjectInput)) (*s3.PutObjectOutput, error) {
	in := &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)}
	if opt != nil {
		opt(in)
	}
	return cli.PutObject(ctx, in)
}

func get(t *testing.T, ctx context.Context, cli *s3.Client, bucket, key string) string {
	t.Helper()
	out, err := cli.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("GetObject %s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("GetObject %s/%s: read body: %v", bucket, key, err)
	}
	return string(b)
}

func ifNoneMatchAny(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") }

// preconditionFailed reports whether err is S3's 412 PreconditionFailed.
func preconditionFailed(err error) bool {
	var re *awshttp.ResponseError
	var ae smithy.APIError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusPreconditionFailed &&
		errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed"
}

func TestPutGet(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	if got, want := srv.Region(), "us-east-1"; got != want {
		t.Errorf("Region() = %q, want %q", got, want)
	}
	if !strings.HasPrefix(srv.Endpoint(), "http://127.0.0.1:") {
		t.Errorf("Endpoint() = %q, want http://127.0.0.1:PORT", srv.Endpoint())
	}
	bucket := srv.Bucket(t)
	cli := srv.Client(t)
	ctx := ctxT(t)

	if _, err := put(ctx, cli, bucket, "dir/a.parquet", "hello, s3", nil); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	if got := get(t, ctx, cli, bucket, "dir/a.parquet"); got != "hello, s3" {
		t.Fatalf("GetObject = %q, want %q", got, "hello, s3")
	}
	list, err := cli.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("ListObjectsV2: %v", err)
	}
	var keys []string
	for _, o := range list.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	if !slices.Equal(keys, []string{"dir/a.parquet"}) {
		t.Fatalf("ListObjectsV2 keys = %q, want [dir/a.parquet]", keys)
	}

	// Every Bucket call is a new, empty bucket.
	other := srv.Bucket(t)
	if other == bucket {
		t.Fatalf("Bucket returned %q twice", bucket)
	}
	list, err = cli.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(other)})
	if err != nil {
		t.Fatalf("ListObjectsV2 %s: %v", other, err)
	}
	if len(list.Contents) != 0 {
		t.Fatalf("fresh bucket %s holds %d objects", other, len(list.Contents))
	}
}

func TestConditionalPut(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	cli := srv.Client(t, func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	ctx := ctxT(t)

	first, err := put(ctx, cli, bucket, "k", "first", ifNoneMatchAny)
	if err != nil {
		t.Fatalf("PutObject If-None-Match: * on a new key: %v", err)
	}
	_, err = put(ctx, cli, bucket, "k", "second", ifNoneMatchAny)
	if !preconditionFailed(err) {
		t.Fatalf("PutObject If-None-Match: * on an existing key: err = %v, want 412 PreconditionFailed", err)
	}
	if got := get(t, ctx, cli, bucket, "k"); got != "first" {
		t.Fatalf("after the refused PUT the object is %q, want %q", got, "first")
	}

	// If-Match: a stale ETag is refused, the current one replaces.
	_, err = put(ctx, cli, bucket, "k", "third", func(in *s3.PutObjectInput) { in.IfMatch = aws.String(`"0123456789abcdef0123456789abcdef"`) })
	if !preconditionFailed(err) {
		t.Fatalf("PutObject with a wrong If-Match: err = %v, want 412 PreconditionFailed", err)
	}
	if _, err := put(ctx, cli, bucket, "k", "fourth", func(in *s3.PutObjectInput) { in.IfMatch = first.ETag }); err != nil {
		t.Fatalf("PutObject If-Match: %s (the current ETag): %v", aws.ToString(first.ETag), err)
	}
	if got := get(t, ctx, cli, bucket, "k"); got != "fourth" {
		t.Fatalf("after the If-Match PUT the object is %q, want %q", got, "fourth")
	}
}

// TestConditionalPutRace: 16 writers PUT one new key with If-None-Match: *
// at once. Exactly one wins, every other gets 412, and the object holds the
// winner's bytes.
func TestConditionalPutRace(t *testing.T) {
	t.Parallel()
	const writers, rounds = 16, 5
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	cli := srv.Client(t, func(o *s3.Options) { o.RetryMaxAttempts = 1 }) // count raw outcomes
	ctx := ctxT(t)

	for round := range rounds {
		key := fmt.Sprintf("race/%d", round)
		errs := make([]error, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				<-start
				_, errs[w] = put(ctx, cli, bucket, key, fmt.Sprintf("writer %d", w), ifNoneMatchAny)
			})
		}
		close(start)
		wg.Wait()

		winner := -1
		for w, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Errorf("round %d: writers %d and %d both won", round, winner, w)
				}
				winner = w
			case !preconditionFailed(err):
				t.Errorf("round %d: writer %d: %v, want success or 412 PreconditionFailed", round, w, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer won", round)
		}
		if got, want := get(t, ctx, cli, bucket, key), fmt.Sprintf("writer %d", winner); got != want {
			t.Fatalf("round %d: object = %q, want the winner's %q", round, got, want)
		}
	}
}

func TestRestart(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	cli := srv.Client(t, func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	ctx := ctxT(t)
	endpoint, access, secret, pid := srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), srv.PID()

	if _, err := put(ctx, cli, bucket, "k", "before", nil); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	if err := srv.Restart(); err == nil {
		t.Fatal("Restart of a running server succeeded")
	}

	for _, how := range []struct {
		name string
		stop func() error
	}{{"stop", srv.Stop}, {"kill", srv.Kill}} {
		if err := how.stop(); err != nil {
			t.Fatalf("%s: %v", how.name, err)
		}
		if got := srv.PID(); got != 0 {
			t.Fatalf("after %s PID() = %d, want 0", how.name, got)
		}
		if _, err := cli.ListBuckets(ctx, &s3.ListBucketsInput{}); err == nil {
			t.Fatalf("after %s the server still answers", how.name)
		}
		if err := srv.Restart(); err != nil {
			t.Fatalf("restart after %s: %v", how.name, err)
		}
		if srv.Endpoint() != endpoint || srv.AccessKey() != access || srv.SecretKey() != secret {
			t.Fatalf("after %s and restart: endpoint/credentials changed: %s %s, was %s %s",
				how.name, srv.Endpoint(), srv.AccessKey(), endpoint, access)
		}
		if p := srv.PID(); p == 0 || p == pid {
			t.Fatalf("after %s and restart PID() = %d, want a new process (was %d)", how.name, p, pid)
		}
		pid = srv.PID()
		// The client made before the stop, with the same credentials, reads
		// the data written before it.
		if got := get(t, ctx, cli, bucket, "k"); got != "before" {
			t.Fatalf("after %s and restart the object is %q, want %q", how.name, got, "before")
		}
		_, err := put(ctx, cli, bucket, "k", "again", ifNoneMatchAny)
		if !preconditionFailed(err) {
			t.Fatalf("after %s and restart, If-None-Match: * on the old key: err = %v, want 412", how.name, err)
		}
	}
}

// TestParallelStart: two servers started at the same time get their own
// ports, roots, credentials and data, and each refuses the other's
// signature.
func TestParallelStart(t *testing.T) {
	t.Parallel()
	type info struct {
		srv    *s3test.Server
		bucket string
	}
	var (
		mu    sync.Mutex
		infos = map[string]info{}
		ready sync.WaitGroup // both servers are up
		done  sync.WaitGroup // both have checked the other: neither may stop before
	)
	ready.Add(2)
	done.Add(2)
	names := []string{"a", "b"}
	for i, name := range names {
		other := names[1-i]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := s3test.Start(t)
			bucket := srv.Bucket(t)
			mu.Lock()
			infos[name] = info{srv, bucket}
			mu.Unlock()
			// Wait until the other one is up too, so both run at once.
			barrier(t, &ready, "the other server never started")
			defer barrier(t, &done, "the other test never finished its checks")
			mu.Lock()
			o := infos[other]
			mu.Unlock()

			if srv.Endpoint() == o.srv.Endpoint() {
				t.Errorf("both servers at %s", srv.Endpoint())
			}
			if srv.Root() == o.srv.Root() {
				t.Errorf("both servers on root %s", srv.Root())
			}
			if srv.AccessKey() == o.srv.AccessKey() {
				t.Errorf("both servers with access key %s", srv.AccessKey())
			}
			ctx := ctxT(t)
			list, err := srv.Client(t).ListBuckets(ctx, &s3.ListBucketsInput{})
			if err != nil {
				t.Fatalf("ListBuckets: %v", err)
			}
			var got []string
			for _, b := range list.Buckets {
				got = append(got, aws.ToString(b.Name))
			}
			if !slices.Equal(got, []string{bucket}) {
				t.Errorf("ListBuckets = %q, want only [%s] (not the other server's %s)", got, bucket, o.bucket)
			}
			// Our credentials against the other server: refused (versitygw
			// answers 404 XAdminUserNotFound for an unknown key), which is
			// what lets Start tell its own server from a foreign one.
			foreign := srv.Client(t, func(opt *s3.Options) {
				opt.BaseEndpoint = aws.String(o.srv.Endpoint())
				opt.RetryMaxAttempts = 1
			})
			_, err = foreign.ListBuckets(ctx, &s3.ListBucketsInput{})
			var re *awshttp.ResponseError
			var ae smithy.APIError
			if !errors.As(err, &re) || re.HTTPStatusCode() < 400 || re.HTTPStatusCode() >= 500 || !errors.As(err, &ae) {
				t.Errorf("ListBuckets at the other server with our credentials: err = %v, want a 4xx refusal", err)
			}
		})
	}
}

// barrier marks this side of wg done and waits, bounded, for the other.
func barrier(t *testing.T, wg *sync.WaitGroup, msg string) {
	wg.Done()
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(3 * time.Minute):
		t.Error(msg)
	}
}

func TestBuildIsCached(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p1, err := s3test.Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s3test.Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p1 != p2 {
		t.Fatalf("Build returned %s, then %s", p1, p2)
	}
	if !strings.Contains(p1, "rollwal-versitygw-") {
		t.Fatalf("Build path %s is not in the shared cache directory", p1)
	}
}
