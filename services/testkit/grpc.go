package testkit

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ServeGRPC serves what register adds to a gRPC server on a loopback port,
// without TLS (a package's tests of its own RPCs; the suite's mTLS is
// services/kit's and tested there), and returns a connection to it. The
// connection closes and the server stops at cleanup.
func ServeGRPC(tb testing.TB, register func(grpc.ServiceRegistrar)) *grpc.ClientConn {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go func() { _ = g.Serve(lis) }()
	tb.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}
