package testkit

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agtpsuite/agtp/services/access"
)

// ServeGRPC serves what register adds to a gRPC server on a loopback port,
// without TLS (a package's tests of its own RPCs; the suite's mTLS is
// services/kit's and tested there), and returns a connection to it. The
// connection closes and the server stops at cleanup.
func ServeGRPC(tb testing.TB, register func(grpc.ServiceRegistrar)) *grpc.ClientConn {
	tb.Helper()
	return serveGRPC(tb, register)
}

// ServeGRPCAs is ServeGRPC with every call admitted as caller, as the
// access guard would admit a caller whose certificate names it (the guard
// itself is tested in services/access and against the real suite).
func ServeGRPCAs(tb testing.TB, caller access.Identity, register func(grpc.ServiceRegistrar)) *grpc.ClientConn {
	tb.Helper()
	return serveGRPC(tb, register,
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(access.WithCaller(ctx, caller), req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, &callerStream{ServerStream: ss, ctx: access.WithCaller(ss.Context(), caller)})
		}))
}

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerStream) Context() context.Context { return s.ctx }

// ServeGRPCWith is ServeGRPC with server options (interceptors that
// simulate a lost answer, say).
func ServeGRPCWith(tb testing.TB, opts []grpc.ServerOption, register func(grpc.ServiceRegistrar)) *grpc.ClientConn {
	tb.Helper()
	return serveGRPC(tb, register, opts...)
}

// Identities the tests of handlers call as.
var (
	FrontDoor = access.FrontDoor
	Operator  = access.Identity{Kind: access.Operator, Name: "admin"}
)

// ServeGRPCAddr serves what register adds to a gRPC server built with
// opts on a loopback port and returns the port's address, for tests that
// dial it themselves: over TLS (opts carrying grpc.Creds), or as one of
// several replicas behind one name. The server stops at cleanup.
func ServeGRPCAddr(tb testing.TB, opts []grpc.ServerOption, register func(grpc.ServiceRegistrar)) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	register(g)
	go func() { _ = g.Serve(lis) }()
	tb.Cleanup(g.Stop)
	return lis.Addr().String()
}

func serveGRPC(tb testing.TB, register func(grpc.ServiceRegistrar), opts ...grpc.ServerOption) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(ServeGRPCAddr(tb, opts, register), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}
