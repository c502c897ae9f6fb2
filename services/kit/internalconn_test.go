package kit_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/kit"
)

// echoServer answers UnaryCall with the request's payload and the
// content type the call arrived with.
type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (echoServer) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	return &testgrpc.SimpleResponse{
		Payload:  &testgrpc.Payload{Body: req.GetPayload().GetBody()},
		Username: md.Get("content-type")[0],
	}, nil
}

// TestInternalConnectionsCarryLargeMessages: over real mutual TLS between
// a kit server and a connection from DialService, messages of many
// frames arrive whole both ways, concurrently (so pooled buffers are
// reused across calls), and the content type is protobuf's.
func TestInternalConnectionsCarryLargeMessages(t *testing.T) {
	server := newBase(t, "auditsvc")
	testgrpc.RegisterTestServiceServer(server.Server.GRPC(), echoServer{})
	server.Server.Register("grpc.testing.TestService", nil, access.Table{
		testgrpc.TestService_UnaryCall_FullMethodName: {Services: []string{"frontdoor"}},
	})
	runBase(t, server)
	client, _ := startServer(t, "frontdoor")
	conn, err := kit.DialService(server.Server.GRPCAddr(), "auditsvc", client.MTLS, client.Telemetry)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	echo := testgrpc.NewTestServiceClient(conn)

	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	sizes := []int{10, 20 << 10, 40 << 10, 300 << 10, 3 << 20}
	errs := make(chan error, 4*len(sizes))
	for round := range 4 {
		for i, size := range sizes {
			go func() {
				body := bytes.Repeat([]byte{byte(round), byte(i), 0x7E}, size/3+1)[:size]
				resp, err := echo.UnaryCall(cctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: body}}, grpc.WaitForReady(true))
				switch {
				case err != nil:
					errs <- err
				case !bytes.Equal(resp.GetPayload().GetBody(), body):
					errs <- fmt.Errorf("%d B: the echo differs from what was sent", size)
				case resp.GetUsername() != "application/grpc+proto":
					errs <- fmt.Errorf("content type %q, want application/grpc+proto", resp.GetUsername())
				default:
					errs <- nil
				}
			}()
		}
	}
	for range 4 * len(sizes) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
