package etcderr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err                   error
		definitive, transient bool
	}{
		{rpctypes.ErrLeaseNotFound, true, false},
		{fmt.Errorf("wrapped: %w", rpctypes.ErrPermissionDenied), true, false},
		{status.Error(codes.InvalidArgument, "bad"), true, false},
		{status.Error(codes.Unavailable, "down"), false, true},
		{rpctypes.ErrNoLeader, false, true},
		{context.DeadlineExceeded, false, true},
		{context.Canceled, false, false},
		{errors.New("connection reset"), false, false},
	} {
		if got := Definitive(tc.err); got != tc.definitive {
			t.Errorf("Definitive(%v) = %v", tc.err, got)
		}
		if got := Transient(tc.err); got != tc.transient {
			t.Errorf("Transient(%v) = %v", tc.err, got)
		}
	}
}
