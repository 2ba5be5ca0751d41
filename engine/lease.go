package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollwal/rollwal/internal/etcderr"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lease is the host's etcd lease, kept alive by hand so that its local
// deadline runs from when each successful keepalive was *sent*: a writer
// acknowledges only while now < sent + TTL − margin. The client library's
// own KeepAlive measures from receipt, which is later, and so unsafe for
// this rule. Time is the monotonic clock, never a fake one.
type lease struct {
	cli     *clientv3.Client
	id      clientv3.LeaseID
	margin  time.Duration
	timeout time.Duration
	log     *slog.Logger
	metrics *metrics
	base    time.Time    // monotonic origin of deadline
	dl      atomic.Int64 // deadline as nanoseconds since base

	lostOnce sync.Once
	lost     chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
}

// grantLease grants a lease of ttl and starts keeping it alive.
func grantLease(ctx context.Context, cli *clientv3.Client, ttl, margin, timeout time.Duration, log *slog.Logger, m *metrics) (*lease, error) {
	l := &lease{cli: cli, margin: margin, timeout: timeout, log: log, metrics: m, base: time.Now(), lost: make(chan struct{}), done: make(chan struct{})}
	var sent time.Duration
	var resp *clientv3.LeaseGrantResponse
	err := retryTransient(ctx, log, "grant lease", func() (err error) {
		sent = time.Since(l.base)
		gctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err = cli.Grant(gctx, int64(ttl/time.Second))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("engine: grant lease: %w", err)
	}
	l.id = resp.ID
	l.extend(sent, resp.TTL)
	kctx, stop := context.WithCancel(context.Background())
	l.cancel = stop
	go l.keepAlive(kctx, ttl)
	return l, nil
}

func (l *lease) extend(sent time.Duration, ttlSeconds int64) {
	l.dl.Store(int64(sent + time.Duration(ttlSeconds)*time.Second - l.margin))
}

// valid reports whether acknowledgements are still safe.
func (l *lease) valid() bool {
	return time.Since(l.base) < time.Duration(l.dl.Load()) && !l.isLost()
}

// validFor is how long acknowledgements stay safe without another
// keepalive answer: 0 once the deadline passed or the lease is lost.
func (l *lease) validFor() time.Duration {
	if l.isLost() {
		return 0
	}
	return max(0, time.Duration(l.dl.Load())-time.Since(l.base))
}

func (l *lease) isLost() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

// markLost records that the lease is gone, for reason (leaseExpired or
// leaseDeadline; writer_lease_lost_total's label) and why (the log's words).
func (l *lease) markLost(reason, why string) {
	l.lostOnce.Do(func() {
		l.log.Error("lease lost: the writer no longer owns its shards", "lease", int64(l.id), "why", why)
		l.metrics.leaseLost.WithLabelValues(reason).Inc()
		close(l.lost)
	})
}

// keepAlive renews the lease every third of its TTL until stopped or lost.
// A keepalive that got no answer is retried at once, with a short attempt
// timeout: the client may have sent it to a member that hangs (paused,
// partitioned) while the others answer, and waiting a whole period would
// let the lease lapse for no reason.
func (l *lease) keepAlive(ctx context.Context, ttl time.Duration) {
	defer close(l.done)
	period, attempt := ttl/3, min(l.timeout, ttl/4)
	timer := time.NewTimer(period)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.lost: // marked lost from outside (checkLeaseAlive)
			return
		case <-timer.C:
		}
		answered, err := l.renew(ctx, attempt)
		if err != nil {
			l.markLost(leaseExpired, err.Error())
			return
		}
		if !l.valid() {
			l.markLost(leaseDeadline, "keepalives failed until the local deadline passed")
			return
		}
		if answered {
			timer.Reset(period)
		} else {
			timer.Reset(50 * time.Millisecond)
		}
	}
}

// renew sends one keepalive and reports whether it was answered. Only a
// definite answer that the lease is gone is an error; a failed round trip
// leaves the deadline where it was.
func (l *lease) renew(ctx context.Context, attempt time.Duration) (bool, error) {
	sent := time.Since(l.base)
	rctx, cancel := context.WithTimeout(ctx, min(attempt, time.Duration(l.dl.Load())-sent))
	defer cancel()
	resp, err := l.cli.KeepAliveOnce(rctx, l.id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return false, fmt.Errorf("lease %x expired on the server", int64(l.id))
	case err != nil:
		if ctx.Err() == nil {
			l.metrics.leaseKeepaliveFailures.Inc()
			l.log.Warn("lease keepalive failed; retrying", "err", err, "valid_for", time.Duration(l.dl.Load())-time.Since(l.base))
		}
		return false, nil
	case resp.TTL <= 0:
		return false, fmt.Errorf("lease %x expired on the server", int64(l.id))
	}
	l.extend(sent, resp.TTL)
	return true, nil
}

// stop ends the keepalives and waits for their goroutine; it may be called
// more than once.
func (l *lease) stop() {
	l.cancel()
	<-l.done
}

// close stops the keepalives and revokes the lease, which deletes every
// owner key bound to it so successors claim at once.
func (l *lease) close() error {
	l.stop()
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	_, err := l.cli.Revoke(ctx, l.id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("engine: revoke lease: %w", err)
	}
	return nil
}

// retryTransient runs op until it succeeds, fails for good, or ctx ends.
// Transient means etcd could not answer in time or had no leader: a
// leader election or a member restart costs latency, not an error.
func retryTransient(ctx context.Context, log *slog.Logger, what string, op func() error) error {
	backoff := 50 * time.Millisecond
	for {
		err := op()
		if err == nil || !etcderr.Transient(err) || ctx.Err() != nil {
			return err
		}
		log.Warn("etcd unavailable; retrying", "op", what, "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}
