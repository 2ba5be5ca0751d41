package etcdclient

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// A fake etcd makes the failures that a real one will not make on demand.

// fakeKV answers every Range after delay with err, or with an empty result.
type fakeKV struct {
	pb.UnimplementedKVServer
	delay time.Duration
	err   error
}

func (k fakeKV) Range(ctx context.Context, _ *pb.RangeRequest) (*pb.RangeResponse, error) {
	select {
	case <-time.After(k.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if k.err != nil {
		return nil, k.err
	}
	return &pb.RangeResponse{Header: &pb.ResponseHeader{}}, nil
}

// stalledAuth never answers Authenticate.
type stalledAuth struct{ pb.UnimplementedAuthServer }

func (stalledAuth) Authenticate(ctx context.Context, _ *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// startFake serves kv and stalledAuth over plain gRPC on loopback and
// returns the endpoint.
func startFake(t *testing.T, kv fakeKV) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterKVServer(srv, kv)
	pb.RegisterAuthServer(srv, stalledAuth{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return "http://" + l.Addr().String()
}

// A cluster that answers a read slowly and then never authenticates.
// clientv3.New would wait another DialTimeout of its own for the token; New
// must still end within its DialTimeout.
func TestNewAuthenticateStalls(t *testing.T) {
	const timeout = 2 * time.Second
	ep := startFake(t, fakeKV{delay: time.Second})
	began := time.Now()
	err := newFails(t, Config{Endpoints: []string{ep}, DialTimeout: timeout,
		Username: "root", Password: "pw"}, "no answer within dial_timeout 2s")
	if took := time.Since(began); took > timeout+700*time.Millisecond {
		t.Errorf("New took %s, want about %s", took, timeout)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
	}
}

// "No leader" is retried until the deadline and then reported.
func TestNewNoLeader(t *testing.T) {
	ep := startFake(t, fakeKV{err: rpctypes.ErrGRPCNoLeader})
	err := newFails(t, Config{Endpoints: []string{ep}, DialTimeout: time.Second},
		"no answer within dial_timeout", "etcdserver: no leader")
	if !errors.Is(err, rpctypes.ErrNoLeader) {
		t.Errorf("error %v does not wrap rpctypes.ErrNoLeader", err)
	}
}
