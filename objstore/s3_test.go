package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rollwal/rollwal/internal/s3test"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/objstore/storetest"
)

// s3Env is a bucket on a versitygw server and the options to reach it.
type s3Env struct {
	srv    *s3test.Server
	bucket string
	reg    *prometheus.Registry
	opts   objstore.Options
}

func newS3Env(t *testing.T, srv *s3test.Server) *s3Env {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	reg := prometheus.NewPedanticRegistry()
	return &s3Env{srv: srv, bucket: srv.Bucket(t), reg: reg, opts: objstore.Options{
		Endpoint: srv.Endpoint(), Region: srv.Region(), PathStyle: true,
		AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(),
		HTTPClient: &http.Client{Transport: tr}, Registerer: reg,
		Backoff: 5 * time.Millisecond, ListPageSize: 7, PartSize: objstore.MinPartSize,
	}}
}

func (e *s3Env) open(t testing.TB, prefix string) objstore.Store {
	t.Helper()
	s, err := objstore.Open(context.Background(), "s3://"+e.bucket+prefix, e.opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// count is the value of writer_objstore_requests_total for an S3 op and
// outcome.
func (e *s3Env) count(t testing.TB, op, outcome string) float64 {
	return counter(t, e.reg, "writer_objstore_requests_total", map[string]string{"backend": "s3", "op": op, "outcome": outcome})
}

func counter(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				sum += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := labels[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

func TestS3Contract(t *testing.T) {
	srv := s3test.Start(t)
	t.Run("BucketRoot", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) objstore.Store { return newS3Env(t, srv).open(t, "") })
	})
	t.Run("Prefix", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) objstore.Store { return newS3Env(t, srv).open(t, "/tables/t1") })
	})
}

// TestS3ListPages: List joins pages; with 7 keys a page, 150 objects take
// 22 ListObjectsV2 requests.
func TestS3ListPages(t *testing.T) {
	env := newS3Env(t, s3test.Start(t))
	s := env.open(t, "/p")
	for i := range 150 {
		storetest.Create(t, s, fmt.Sprintf("k/%03d", i), []byte{byte(i)})
	}
	before := env.count(t, "ListObjectsV2", "ok")
	if got := storetest.Names(t, s, "k/"); len(got) != 150 || got[0] != "k/000" || got[149] != "k/149" {
		t.Fatalf("List = %d names", len(got))
	}
	if pages := env.count(t, "ListObjectsV2", "ok") - before; pages != 22 {
		t.Errorf("List made %v ListObjectsV2 requests, want 22 (150 keys, 7 a page)", pages)
	}
}

// loseAnswers forwards requests and, for the next n that match, throws the
// server's answer away and returns an error instead: the request applied,
// the client never learns it.
type loseAnswers struct {
	next  http.RoundTripper
	match func(*http.Request) bool
	n     atomic.Int32
	lost  atomic.Int32
	// forward false: fail the request without sending it on, as a reset
	// might before the server read it (the client cannot tell the two).
	noForward bool
}

func (l *loseAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	if !l.match(req) || l.n.Add(-1) < 0 {
		return l.next.RoundTrip(req)
	}
	l.lost.Add(1)
	if l.noForward {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errors.New("injected: connection reset, the answer is lost")
	}
	resp, err := l.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, fmt.Errorf("injected: connection reset after the server answered %s", resp.Status)
}

func isPutObject(req *http.Request) bool {
	return req.Method == http.MethodPut && !req.URL.Query().Has("uploadId")
}

func isComplete(req *http.Request) bool {
	return req.Method == http.MethodPost && req.URL.Query().Has("uploadId")
}

// withLoss makes env's HTTP client lose the answers of n matching requests.
func (e *s3Env) withLoss(n int32, match func(*http.Request) bool) *loseAnswers {
	l := &loseAnswers{next: e.opts.HTTPClient.Transport, match: match}
	l.n.Store(n)
	e.opts.HTTPClient = &http.Client{Transport: l}
	return l
}

func createErr(s objstore.Store, name string, b []byte) error {
	return s.Create(context.Background(), name, bytes.NewReader(b), int64(len(b)))
}

func seeded(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 3))
}

// TestS3LostAnswerOwnWrite: the PUT applied but its answer was lost; the
// retry finds the name taken (412), reads back our own bytes: success.
// Without the read-back the 412 would be a false ErrExists.
func TestS3LostAnswerOwnWrite(t *testing.T) {
	for _, attempts := range []int{5, 1} {
		t.Run(fmt.Sprintf("MaxAttempts=%d", attempts), func(t *testing.T) {
			env := newS3Env(t, s3test.Start(t))
			env.opts.MaxAttempts = attempts
			loss := env.withLoss(1, isPutObject)
			s := env.open(t, "/lost")
			want := storetest.Bytes(seeded(t), 300_000)
			if err := createErr(s, "gen/00000001.parquet", want); err != nil {
				t.Fatalf("Create after a lost answer = %v, want nil (our own write)", err)
			}
			if loss.lost.Load() != 1 {
				t.Fatalf("%d answers lost, want 1", loss.lost.Load())
			}
			if got := storetest.ReadAll(t, s, "gen/00000001.parquet"); !bytes.Equal(got, want) {
				t.Error("the object does not hold our bytes")
			}
			if attempts > 1 && env.count(t, "PutObject", "exists") != 1 {
				t.Errorf("PutObject exists = %v: the retry should have met our own object", env.count(t, "PutObject", "exists"))
			}
			if env.count(t, "GetObject", "ok") < 1 {
				t.Error("no read-back GET")
			}
		})
	}
}

// TestS3LostAnswerOtherWriter: another writer's object holds the name; our
// PUT's answer (a 412) is lost, the retry's 412 follows a lost answer, and
// the read-back finds other bytes: ErrExists, their object untouched.
func TestS3LostAnswerOtherWriter(t *testing.T) {
	env := newS3Env(t, s3test.Start(t))
	rng := seeded(t)
	theirs, ours := storetest.Bytes(rng, 5000), storetest.Bytes(rng, 5000)
	storetest.Create(t, env.open(t, "/lost"), "meta/v2.json", theirs)
	loss := env.withLoss(1, isPutObject)
	s := env.open(t, "/lost")
	err := createErr(s, "meta/v2.json", ours)
	if !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("Create = %v, want ErrExists", err)
	}
	storetest.NamesObject(t, err, "create", s, "meta/v2.json")
	if loss.lost.Load() != 1 || env.count(t, "GetObject", "ok") < 1 {
		t.Errorf("lost %d answers, %v read-back GETs: the path under test was not taken", loss.lost.Load(), env.count(t, "GetObject", "ok"))
	}
	if got := storetest.ReadAll(t, s, "meta/v2.json"); !bytes.Equal(got, theirs) {
		t.Error("the other writer's object changed")
	}
}

// TestS3LostAnswerUnresolved: the only attempt failed after it may have
// been sent and the object is not there on read-back: the outcome is
// unknown (a request in flight could land later), never assumed.
func TestS3LostAnswerUnresolved(t *testing.T) {
	env := newS3Env(t, s3test.Start(t))
	env.opts.MaxAttempts = 1
	loss := env.withLoss(1, isPutObject)
	loss.noForward = true
	s := env.open(t, "")
	err := createErr(s, "x", []byte("payload"))
	if !errors.Is(err, objstore.ErrUnknownOutcome) || errors.Is(err, objstore.ErrExists) {
		t.Fatalf("Create = %v, want ErrUnknownOutcome", err)
	}
	storetest.NamesObject(t, err, "create", s, "x")
}

// TestS3LostCompletionOnlyAttempt: the completion's answer was lost and
// no attempt is left: the read-back finds our bytes.
func TestS3LostCompletionOnlyAttempt(t *testing.T) {
	env := newS3Env(t, s3test.Start(t))
	env.opts.MaxAttempts = 1
	env.withLoss(1, isComplete)
	s := env.open(t, "/mp")
	want := storetest.Bytes(seeded(t), objstore.MinPartSize+1)
	if err := createErr(s, "f", want); err != nil {
		t.Fatalf("Create after a lost completion = %v, want nil", err)
	}
	if env.count(t, "GetObject", "ok") < 1 || env.count(t, "AbortMultipartUpload", "ok") != 0 {
		t.Errorf("%v read-back GETs, %v aborts: want a read-back and no abort",
			env.count(t, "GetObject", "ok"), env.count(t, "AbortMultipartUpload", "ok"))
	}
	if got := storetest.ReadAll(t, s, "f"); !bytes.Equal(got, want) {
		t.Error("the object does not hold our bytes")
	}
}

// TestS3FailedPartAborts: a part that cannot be uploaded fails the Create,
// naming the object and the part, and the upload is aborted.
func TestS3FailedPartAborts(t *testing.T) {
	env := newS3Env(t, s3test.Start(t))
	env.opts.MaxAttempts = 2
	loss := env.withLoss(1000, func(r *http.Request) bool {
		return r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == "2"
	})
	loss.noForward = true
	s := env.open(t, "/mp")
	err := createErr(s, "f", storetest.Bytes(seeded(t), objstore.MinPartSize+10))
	if err == nil || !strings.Contains(err.Error(), "uploading part 2") {
		t.Fatalf("Create = %v, want the failed part named", err)
	}
	storetest.NamesObject(t, err, "create", s, "f")
	if env.count(t, "UploadPart", "network_error") != 2 || env.count(t, "AbortMultipartUpload", "ok") != 1 {
		t.Errorf("part attempts %v, aborts %v: want 2, 1", env.count(t, "UploadPart", "network_error"), env.count(t, "AbortMultipartUpload", "ok"))
	}
	ups, lerr := env.srv.Client(t).ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(env.bucket)})
	if lerr != nil || len(ups.Uploads) != 0 {
		t.Errorf("uploads left: %v, %v", ups, lerr)
	}
	if _, err := s.Stat(context.Background(), "f"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat after a failed create = %v, want ErrNotFound", err)
	}
}

// TestS3LostCompletion: a multipart upload whose completion applied but
// whose answer was lost; the retried completion settles it.
func TestS3LostCompletion(t *testing.T) {
	env := newS3Env(t, s3test.Start(t))
	loss := env.withLoss(1, isComplete)
	s := env.open(t, "/mp")
	want := storetest.Bytes(seeded(t), objstore.MinPartSize+1000)
	if err := createErr(s, "base/data/f.parquet", want); err != nil {
		t.Fatalf("Create after a lost completion = %v, want nil", err)
	}
	if loss.lost.Load() != 1 {
		t.Fatalf("%d completion answers lost, want 1", loss.lost.Load())
	}
	if got := storetest.ReadAll(t, s, "base/data/f.parquet"); !bytes.Equal(got, want) {
		t.Error("the object does not hold our bytes")
	}
	// versitygw answers a repeated completion of an upload it completed
	// with 200 (it checks the object came from this upload id), as AWS
	// does; a 404 NoSuchUpload or a 412 would send Create to the read-back.
	retried := env.count(t, "CompleteMultipartUpload", "ok") + env.count(t, "CompleteMultipartUpload", "not_found") +
		env.count(t, "CompleteMultipartUpload", "exists")
	if retried != 1 || env.count(t, "CompleteMultipartUpload", "network_error") != 1 {
		t.Errorf("completions: %v answered after 1 lost, want 1", retried)
	}
}

// waitFor polls cond every few milliseconds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestS3ServerDownMidCreate: the server is down when Create begins and
// comes back while it retries: Create succeeds within its attempts.
func TestS3ServerDownMidCreate(t *testing.T) {
	srv := s3test.Start(t)
	env := newS3Env(t, srv)
	env.opts.MaxAttempts, env.opts.Backoff = 200, 20*time.Millisecond // up to 200 tries, waits ≤ 640 ms: over a minute
	s := env.open(t, "/down")
	want := storetest.Bytes(seeded(t), 10_000)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- createErr(s, "gen/1", want) }()
	waitFor(t, 10*time.Second, "a failed attempt while the server is down", func() bool {
		return env.count(t, "PutObject", "network_error") >= 2
	})
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Create across a restart = %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("Create did not return within 90 s of the restart")
	}
	if got := storetest.ReadAll(t, s, "gen/1"); !bytes.Equal(got, want) {
		t.Error("the object does not hold our bytes")
	}
}

// TestS3ServerDownTooLong: the server stays down past every attempt: the
// error names the operation and the object; refused connections cannot
// have applied, so the outcome is not unknown.
func TestS3ServerDownTooLong(t *testing.T) {
	srv := s3test.Start(t)
	env := newS3Env(t, srv)
	env.opts.MaxAttempts = 3
	s := env.open(t, "/down")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	err := createErr(s, "gen/2", []byte("abc"))
	if err == nil {
		t.Fatal("Create with the server down succeeded")
	}
	storetest.NamesObject(t, err, "create", s, "gen/2")
	if errors.Is(err, objstore.ErrUnknownOutcome) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Create = %v: want a refused connection, not an unknown outcome", err)
	}
	if n := env.count(t, "PutObject", "network_error"); n != 3 {
		t.Errorf("%v attempts, want 3", n)
	}
	_, err = s.Stat(context.Background(), "gen/2")
	storetest.NamesObject(t, err, "stat", s, "gen/2")
}

// TestS3Multipart: an object above PartSize goes up in parts and reads
// back equal.
func TestS3Multipart(t *testing.T) {
	env := newS3Env(t, s3test.Start(t))
	s := env.open(t, "/mp")
	want := storetest.Bytes(seeded(t), 2*objstore.MinPartSize+123)
	storetest.Create(t, s, "big", want)
	if got := storetest.ReadAll(t, s, "big"); !bytes.Equal(got, want) {
		t.Fatal("the multipart object reads back other bytes")
	}
	for op, want := range map[string]float64{"PutObject": 0, "CreateMultipartUpload": 1, "UploadPart": 3, "CompleteMultipartUpload": 1} {
		if got := env.count(t, op, "ok"); got != want {
			t.Errorf("%s ok = %v, want %v", op, got, want)
		}
	}
	if b := counter(t, env.reg, "writer_objstore_bytes_total", map[string]string{"op": "UploadPart"}); b != float64(len(want)) {
		t.Errorf("UploadPart bytes = %v, want %d", b, len(want))
	}
}

// TestS3MultipartOnExistingName: versitygw refuses CompleteMultipartUpload
// with If-None-Match: * when the name is taken (412); Create returns
// ErrExists, the object is untouched and the upload is aborted.
func TestS3MultipartOnExistingName(t *testing.T) {
	env := newS3Env(t, s3test.Start(t))
	s := env.open(t, "/mp")
	storetest.Create(t, s, "taken", []byte("small and first"))
	err := createErr(s, "taken", storetest.Bytes(seeded(t), objstore.MinPartSize+1))
	if !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("multipart Create on a taken name = %v, want ErrExists", err)
	}
	if env.count(t, "CompleteMultipartUpload", "exists") != 1 || env.count(t, "AbortMultipartUpload", "ok") != 1 {
		t.Errorf("completion refused %v times, aborted %v: want 1, 1",
			env.count(t, "CompleteMultipartUpload", "exists"), env.count(t, "AbortMultipartUpload", "ok"))
	}
	if got := storetest.ReadAll(t, s, "taken"); string(got) != "small and first" {
		t.Errorf("the object now holds %d bytes", len(got))
	}
	ups, err := env.srv.Client(t).ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(env.bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Errorf("%d multipart uploads left behind", len(ups.Uploads))
	}
}

// TestS3RacingMultipart: racing multipart creates of one name: one wins.
func TestS3RacingMultipart(t *testing.T) {
	env := newS3Env(t, s3test.Start(t))
	s := env.open(t, "/mp")
	rng := seeded(t)
	const racers = 4
	payloads := make([][]byte, racers)
	for i := range payloads {
		payloads[i] = storetest.Bytes(rng, objstore.MinPartSize+1+i)
	}
	storetest.RaceCreates(t, s, "race", payloads)
}

// TestS3Metrics: requests, bytes and latency are counted by operation.
func TestS3Metrics(t *testing.T) {
	env := newS3Env(t, s3test.Start(t))
	s := env.open(t, "/m")
	b := storetest.Bytes(seeded(t), 4321)
	storetest.Create(t, s, "a", b)
	_ = createErr(s, "a", b) // exists
	_, _ = s.Stat(context.Background(), "missing")
	got := storetest.ReadAll(t, s, "a")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"writer_objstore_requests_total", map[string]string{"op": "PutObject", "outcome": "ok"}, 1},
		{"writer_objstore_requests_total", map[string]string{"op": "PutObject", "outcome": "exists"}, 1},
		{"writer_objstore_requests_total", map[string]string{"op": "HeadObject", "outcome": "not_found"}, 1},
		{"writer_objstore_requests_total", map[string]string{"op": "GetObject", "outcome": "ok"}, 1},
		{"writer_objstore_bytes_total", map[string]string{"op": "PutObject"}, float64(len(b))},
		{"writer_objstore_bytes_total", map[string]string{"op": "GetObject"}, float64(len(got))},
		{"writer_objstore_request_duration_seconds", map[string]string{"op": "PutObject"}, 2},
	} {
		c.labels["backend"] = "s3"
		if v := counter(t, env.reg, c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
}
