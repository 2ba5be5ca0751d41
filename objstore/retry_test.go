package objstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

func responseErr(status int) error {
	return &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
		Err: fmt.Errorf("status %d", status)}
}

// TestClassify: which failed requests are retried and which may have
// applied. Counting a 5xx as unapplied, or a reset after sending as
// refused, would turn a lost answer into an assumption.
func TestClassify(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	dial := &smithyhttp.RequestSendError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	reset := &smithyhttp.RequestSendError{Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want verdict
	}{
		{"ok", context.Background(), nil, verdict{outcome: outcomeOK}},
		{"412", context.Background(), responseErr(412), verdict{outcome: outcomeExists}},
		{"404", context.Background(), responseErr(404), verdict{outcome: outcomeNotFound}},
		{"403", context.Background(), responseErr(403), verdict{outcome: outcomeClient}},
		{"429", context.Background(), responseErr(429), verdict{outcome: outcomeThrottled, retry: true}},
		{"409", context.Background(), responseErr(409), verdict{outcome: outcomeThrottled, retry: true}},
		{"503", context.Background(), responseErr(503), verdict{outcome: outcomeThrottled, retry: true, lost: true}},
		{"500", context.Background(), responseErr(500), verdict{outcome: outcomeServer, retry: true, lost: true}},
		{"status 0 wraps a send error", context.Background(),
			&smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{}}, Err: reset},
			verdict{outcome: outcomeNetwork, retry: true, lost: true}},
		{"refused", context.Background(), dial, verdict{outcome: outcomeNetwork, retry: true}},
		{"reset", context.Background(), reset, verdict{outcome: outcomeNetwork, retry: true, lost: true}},
		{"attempt timeout", context.Background(), fmt.Errorf("x: %w", context.DeadlineExceeded), verdict{outcome: outcomeNetwork, retry: true, lost: true}},
		{"caller canceled", canceled, reset, verdict{outcome: outcomeCanceled, lost: true}},
		{"caller canceled while dialing", canceled, dial, verdict{outcome: outcomeCanceled}},
		{"unknown", context.Background(), errors.New("signing failed"), verdict{outcome: outcomeClient, lost: true}},
	} {
		if got := classify(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: classify = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestBackoffBounds: waits stay within the doubling ceiling, capped at
// 32×Backoff, and are jittered.
func TestBackoffBounds(t *testing.T) {
	s := &s3Store{o: Options{Backoff: 10 * time.Millisecond}}
	for attempt := 1; attempt <= 10; attempt++ {
		ceil := min(10*time.Millisecond<<(attempt-1), 320*time.Millisecond)
		seen := map[time.Duration]bool{}
		for range 200 {
			d := s.backoff(attempt)
			if d < 0 || d > ceil {
				t.Fatalf("attempt %d: wait %v outside [0, %v]", attempt, d, ceil)
			}
			seen[d] = true
		}
		if len(seen) < 50 {
			t.Errorf("attempt %d: %d distinct waits in 200: not jittered", attempt, len(seen))
		}
	}
}
