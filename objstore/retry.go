package objstore

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// verdict is what one failed S3 request tells: how to count it, whether
// to try again, and whether it may have applied although no success came
// back (a lost answer).
type verdict struct {
	outcome string
	retry   bool
	lost    bool
}

// classify judges the error of one attempt; ctx is the caller's context
// (an attempt's own timeout is a lost answer worth retrying, the caller's
// end is not).
func classify(ctx context.Context, err error) verdict {
	if err == nil {
		return verdict{outcome: outcomeOK}
	}
	if ctx.Err() != nil {
		return verdict{outcome: outcomeCanceled, lost: !notSent(err)}
	}
	if status, ok := httpStatus(err); ok {
		return classifyStatus(status, errorCode(err))
	}
	var send *smithyhttp.RequestSendError
	var ne net.Error
	var de *smithy.DeserializationError
	switch {
	case notSent(err):
		return verdict{outcome: outcomeNetwork, retry: true}
	case errors.As(err, &send), errors.As(err, &ne), errors.As(err, &de),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return verdict{outcome: outcomeNetwork, retry: true, lost: true}
	}
	// Unrecognised (a signing or parameter error, most likely never sent):
	// not worth repeating, and not assumed unsent either.
	return verdict{outcome: outcomeClient, lost: true}
}

func classifyStatus(status int, code string) verdict {
	switch {
	case status == 412:
		return verdict{outcome: outcomeExists}
	case status == 404:
		return verdict{outcome: outcomeNotFound}
	case status == 429, status == 409: // 409: ConditionalRequestConflict, a racing conditional write
		return verdict{outcome: outcomeThrottled, retry: true}
	case status == 400 && code == "RequestTimeout": // the body came too slowly; refused
		return verdict{outcome: outcomeNetwork, retry: true}
	case status == 503: // SlowDown; like every 5xx it may have applied
		return verdict{outcome: outcomeThrottled, retry: true, lost: true}
	case status >= 500:
		return verdict{outcome: outcomeServer, retry: true, lost: true}
	}
	return verdict{outcome: outcomeClient}
}

// notSent reports a connection that was never made (refused, no route,
// DNS): the request cannot have applied.
func notSent(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

func httpStatus(err error) (int, bool) {
	var re *smithyhttp.ResponseError
	// A request that got no answer is a ResponseError too, of status 0.
	if errors.As(err, &re) && re.Response != nil && re.HTTPStatusCode() != 0 {
		return re.HTTPStatusCode(), true
	}
	return 0, false
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func isStatus(err error, status int) bool {
	s, ok := httpStatus(err)
	return ok && s == status
}

// do runs one S3 request under the retry policy: at most MaxAttempts
// attempts, each bounded by AttemptTimeout, retried after a jittered
// exponential backoff while the verdict allows. call returns the bytes it
// moved, for the metrics. lost reports whether any attempt's answer was
// lost: the request may have applied even if err is not nil, or before
// the attempt that returned err.
func (s *s3Store) do(ctx context.Context, op string, call func(context.Context) (int64, error)) (lost bool, err error) {
	for attempt := 1; ; attempt++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if s.o.AttemptTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, s.o.AttemptTimeout)
		}
		start := time.Now()
		n, err := call(actx)
		cancel()
		v := classify(ctx, err)
		s.m.observe(s3Backend, op, v.outcome, start, n)
		lost = lost || v.lost
		if !v.retry || attempt >= s.o.MaxAttempts {
			return lost, err
		}
		wait := s.backoff(attempt)
		s.o.Logger.Debug("objstore: retrying", "op", op, "attempt", attempt, "wait", wait, "err", err)
		if werr := sleep(ctx, wait); werr != nil {
			return lost, errors.Join(werr, err)
		}
	}
}

// backoff is the wait after the attempt-th attempt: uniform in
// [0, min(Backoff·2^(attempt-1), 32·Backoff)] ("full jitter").
func (s *s3Store) backoff(attempt int) time.Duration {
	ceil := s.o.Backoff << min(attempt-1, 5)
	if ceil <= 0 {
		return 0
	}
	return rand.N(ceil + 1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
