// Package etcderr classifies the errors of etcd requests, for the callers
// that must tell a refusal from an outcome they cannot know: a guarded
// commit, a snapshot persist, a lease grant.
package etcderr

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// code returns the gRPC code of an etcd client error, and whether it has one.
func code(err error) (codes.Code, bool) {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code(), true
	}
	if st, ok := status.FromError(err); ok {
		return st.Code(), true
	}
	return codes.Unknown, false
}

// Definitive reports whether a failed request is known not to have reached
// the state machine (the server refused it). Everything else — deadlines,
// cancellations, unavailability, lost connections — may have applied.
func Definitive(err error) bool {
	c, ok := code(err)
	if !ok {
		return false
	}
	switch c {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted, codes.PermissionDenied,
		codes.Unauthenticated, codes.OutOfRange, codes.AlreadyExists, codes.NotFound:
		return true
	}
	return false
}

// Transient reports whether etcd could not answer in time or had no
// leader: worth retrying after a pause (for requests that are safe to
// repeat), since a leader election or a member restart costs latency.
func Transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrNoLeader) ||
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) {
		return true
	}
	c, _ := code(err)
	return c == codes.Unavailable || c == codes.DeadlineExceeded
}
