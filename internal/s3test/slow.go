package s3test

import (
	"net/http"
	"sync/atomic"
	"time"
)

// SlowAnswers is an http.RoundTripper that delays the answer of every PUT
// by the delay set, once the server has applied it: an attempt timeout
// below the delay then loses the answer of a write that landed, the case a
// client must resolve by reading back. An attempt that gives up during the
// delay gets its context's error.
type SlowAnswers struct {
	Next  http.RoundTripper
	delay atomic.Int64
}

// Delay sets the delay of the PUT answers from now on; 0 for none.
func (s *SlowAnswers) Delay(d time.Duration) { s.delay.Store(int64(d)) }

func (s *SlowAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.Next.RoundTrip(r)
	d := time.Duration(s.delay.Load())
	if err != nil || d <= 0 || r.Method != http.MethodPut {
		return resp, err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return resp, nil
	case <-r.Context().Done():
		resp.Body.Close()
		return nil, r.Context().Err()
	}
}
