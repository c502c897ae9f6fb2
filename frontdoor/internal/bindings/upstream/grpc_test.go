package upstream_test

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/services/testkit"
)

// grpcUpstream is a real gRPC server over TLS whose methods are a
// function field: any method, Struct in, Struct out.
func grpcUpstream(t *testing.T, handle func(method string, md metadata.MD, in *structpb.Struct, stream grpc.ServerStream) (*structpb.Struct, error)) string {
	t.Helper()
	return testkit.ServeGRPCAddr(t, []grpc.ServerOption{grpc.Creds(credentials.NewTLS(serverTLS(t, "h2"))),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			method, _ := grpc.MethodFromServerStream(stream)
			in := new(structpb.Struct)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			md, _ := metadata.FromIncomingContext(stream.Context())
			out, err := handle(method, md, in, stream)
			if err != nil {
				return err
			}
			return stream.SendMsg(out)
		})}, func(grpc.ServiceRegistrar) {})
}

// An external_service with Content-Type: application/grpc calls a
// Struct-to-Struct gRPC method; codes map to the same upstream_* errors
// and error_map keys as HTTP statuses.
func TestGRPCUpstream(t *testing.T) {
	var flaky atomic.Int32
	addr := grpcUpstream(t, func(method string, md metadata.MD, in *structpb.Struct, stream grpc.ServerStream) (*structpb.Struct, error) {
		switch method {
		case "/rooms.v1.Rooms/Get":
			return structpb.NewStruct(map[string]any{"roomId": in.GetFields()["room_id"].GetStringValue(),
				"key": strings.Join(md.Get("x-api-key"), ","), "traced": len(md.Get("traceparent")) > 0})
		case "/rooms.v1.Rooms/Missing":
			return nil, status.Error(codes.NotFound, "no such room")
		case "/rooms.v1.Rooms/Denied":
			return nil, status.Error(codes.PermissionDenied, "no")
		case "/rooms.v1.Rooms/Flaky":
			if flaky.Add(1) < 3 {
				return nil, status.Error(codes.Unavailable, "warming up")
			}
			return structpb.NewStruct(map[string]any{"ok": true})
		case "/rooms.v1.Rooms/Down":
			return nil, status.Error(codes.Unavailable, "down")
		case "/rooms.v1.Rooms/Slow":
			<-stream.Context().Done()
			return nil, stream.Context().Err()
		}
		return nil, status.Error(codes.Unimplemented, method)
	})
	tp := sdktrace.NewTracerProvider()
	e := newExecutor(t, func(o *upstream.Options) {
		o.Breaker.FailureThreshold = 100
		o.TracerProvider, o.Propagator = tp, propagation.TraceContext{}
	})
	grpcBinding := func(method string, idempotent bool) binding {
		return binding{url: "https://" + addr + "/rooms.v1.Rooms/" + method, timeout: 0.3, idempotent: idempotent,
			headers:  map[string]string{"Content-Type": "application/grpc", "X-Api-Key": "${TOKEN}"},
			outTr:    map[string]string{"room_id": "roomId"},
			errorMap: map[string]string{"404": "room_not_found"}}
	}
	ctx, span := tp.Tracer("test").Start(testCtx(t), "parent")
	defer span.End()
	res, err := e.Call(ctx, grpcBinding("Get", true).def(), call(`{"room_id":"r-7","n":2}`))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	_ = json.Unmarshal(res.Output, &out)
	if out["room_id"] != "r-7" || out["key"] != "s3cret" || out["traced"] != true {
		t.Fatalf("output %s", res.Output)
	}
	for _, tc := range []struct {
		method     string
		idempotent bool
		want       string
	}{
		{"Missing", true, "room_not_found"},
		{"Denied", true, upstream.ErrAuthentication},
		{"Flaky", true, ""},
		{"Down", false, upstream.ErrConnection},
		{"Slow", true, upstream.ErrTimeout},
		{"Nope", true, upstream.ErrUpstream},
	} {
		t.Run(tc.method, func(t *testing.T) {
			_, err := e.Call(testCtx(t), grpcBinding(tc.method, tc.idempotent).def(), call(`{}`))
			if got := errName(t, err); got != tc.want {
				t.Fatalf("%q, want %q (%v)", got, tc.want, err)
			}
		})
	}
	if flaky.Load() != 3 {
		t.Errorf("Flaky was called %d times, want 3 (two Unavailable retried)", flaky.Load())
	}
}
