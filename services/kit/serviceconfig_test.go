package kit_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// replica is a real gRPC server over mutual TLS that answers every
// method: Unavailable for the first failFirst calls, then an empty
// message; calls counts what reached it.
type replica struct {
	addr      string
	calls     atomic.Int32
	failFirst int32
}

func startReplica(t *testing.T, failFirst int32) *replica {
	t.Helper()
	pki := testkit.PKI(t)
	m, err := kit.LoadMTLS(pki.CA(), pki.Cert("auditsvc"), pki.Key("auditsvc"))
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{failFirst: failFirst}
	r.addr = testkit.ServeGRPCAddr(t, []grpc.ServerOption{grpc.Creds(credentials.NewTLS(m.ServerConfig())),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			var in emptypb.Empty
			if err := stream.RecvMsg(&in); err != nil {
				return err
			}
			if r.calls.Add(1) <= r.failFirst {
				return status.Error(codes.Unavailable, "replica going away")
			}
			return stream.SendMsg(&emptypb.Empty{})
		})}, func(grpc.ServiceRegistrar) {})
	return r
}

// dialReplicas dials the replicas the way a service dials a peer, with
// the name resolving to all of them, as a headless service's DNS name
// does.
func dialReplicas(t *testing.T, replicas ...*replica) *grpc.ClientConn {
	t.Helper()
	pki := testkit.PKI(t)
	m, err := kit.LoadMTLS(pki.CA(), pki.Cert("frontdoor"), pki.Key("frontdoor"))
	if err != nil {
		t.Fatal(err)
	}
	tel, err := kit.NewTelemetry(context.Background(), "frontdoor", kit.TelemetryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rb := manual.NewBuilderWithScheme("replicas" + strconv.Itoa(int(schemes.Add(1))))
	var endpoints []resolver.Endpoint
	for _, r := range replicas {
		endpoints = append(endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: r.addr}}})
	}
	rb.InitialState(resolver.State{Endpoints: endpoints})
	resolver.Register(rb)
	conn, err := kit.DialService(rb.Scheme()+":///auditsvc", "auditsvc", m, tel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// schemes numbers the resolver schemes the tests register, which must be
// unique and lower case.
var schemes atomic.Int32

func invoke(ctx context.Context, conn *grpc.ClientConn, method string) error {
	return conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{})
}

// TestClientsBalanceOverEveryReplica checks that a client spreads its
// calls over every address the service name resolves to.
func TestClientsBalanceOverEveryReplica(t *testing.T) {
	a, b := startReplica(t, 0), startReplica(t, 0)
	conn := dialReplicas(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Wait until both subchannels are ready, so the count below shows
	// the policy rather than connection timing.
	for a.calls.Load() == 0 || b.calls.Load() == 0 {
		if err := invoke(ctx, conn, "/"+auditv1.AuditService_ServiceDesc.ServiceName+"/GetChainHead"); err != nil {
			t.Fatal(err)
		}
	}
	a.calls.Store(0)
	b.calls.Store(0)
	for range 20 {
		if err := invoke(ctx, conn, "/"+auditv1.AuditService_ServiceDesc.ServiceName+"/GetChainHead"); err != nil {
			t.Fatal(err)
		}
	}
	if a.calls.Load() != 10 || b.calls.Load() != 10 {
		t.Fatalf("calls per replica %d and %d; want 10 and 10 (round_robin)", a.calls.Load(), b.calls.Load())
	}
}

// TestOnlyReadsAreRetried checks the retry policy: a read that meets a
// replica going away is sent again; a call that changes state is not.
func TestOnlyReadsAreRetried(t *testing.T) {
	service := "/" + auditv1.AuditService_ServiceDesc.ServiceName + "/"
	cases := []struct {
		method    string
		wantCalls int32
		wantCode  codes.Code
	}{
		{service + "GetRecord", 2, codes.OK},
		{service + "ListLifecycleEvents", 2, codes.OK},
		{service + "VerifyChain", 2, codes.OK},
		{"/grpc.health.v1.Health/Check", 2, codes.OK},
		{service + "SignAndAppend", 1, codes.Unavailable},
		{service + "AppendLifecycleEvent", 1, codes.Unavailable},
	}
	for _, tc := range cases {
		t.Run(tc.method, func(t *testing.T) {
			r := startReplica(t, 1)
			conn := dialReplicas(t, r)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := invoke(ctx, conn, tc.method)
			if status.Code(err) != tc.wantCode || r.calls.Load() != tc.wantCalls {
				t.Fatalf("%v after %d calls; want %v after %d", err, r.calls.Load(), tc.wantCode, tc.wantCalls)
			}
		})
	}
}
