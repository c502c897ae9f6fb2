package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// gRPC upstreams. An external_service binding reaches a gRPC method when
// its headers set Content-Type: application/grpc and its URL is
// https://host:port/package.Service/Method (gRPC is HTTP/2 over TLS, so
// the draft's https-only rule holds). The method must take and return
// google.protobuf.Struct: the input object goes as a Struct, the Struct
// that comes back is the output. The binding's other headers become
// request metadata. gRPC status codes are mapped to the HTTP statuses
// grpc-gateway uses (NotFound 404, AlreadyExists 409, PermissionDenied
// 403, Unauthenticated 401, ...), so error_map is written the same way for
// both transports; DeadlineExceeded is upstream_timeout and an unmapped
// Unavailable is upstream_connection_error.

func (e *Executor) callGRPC(ctx context.Context, b *binding, in map[string]any, hdr callHeader) (attempt, error) {
	conn, err := e.grpcConn(b.target)
	if err != nil {
		return attempt{}, fmt.Errorf("%w: %s: %v", ErrBinding, b.endpoint, err)
	}
	msg, err := structpb.NewStruct(plain(in).(map[string]any))
	if err != nil {
		return attempt{}, fmt.Errorf("external_service input: %w", err)
	}
	md := metadata.MD{}
	for k, vs := range b.header {
		md[strings.ToLower(k)] = vs
	}
	if hdr.idemKey != "" {
		md.Set(b.idemHeader, hdr.idemKey)
	}
	if hdr.core != "" {
		md.Set(CoreParametersHeader, hdr.core)
	}
	return e.run(ctx, b, "upstream "+b.grpcMethod, func(ctx context.Context) attempt {
		out := new(structpb.Struct)
		err := conn.Invoke(metadata.NewOutgoingContext(ctx, md), b.grpcMethod, msg, out,
			grpc.MaxCallRecvMsgSize(int(e.opts.MaxResponseBytes)))
		if err == nil {
			body, err := protojson.Marshal(out)
			if err != nil {
				return attempt{status: http.StatusOK, fail: failMalformed, err: err}
			}
			return attempt{status: http.StatusOK, body: body}
		}
		st := status.Convert(err)
		switch st.Code() {
		case codes.DeadlineExceeded:
			return attempt{fail: failTimeout, err: err}
		case codes.Canceled:
			return connFailure(ctx, err)
		case codes.ResourceExhausted:
			if strings.Contains(st.Message(), "larger than max") {
				return attempt{fail: failTooLarge, err: err}
			}
		case codes.Unavailable:
			// Unavailable is how gRPC reports both a refused connection and
			// a server that says so; either is worth a retry.
			return attempt{status: http.StatusServiceUnavailable, err: err}
		}
		return attempt{status: runtime.HTTPStatusFromCode(st.Code()), err: err}
	})
}

// grpcConn returns the shared connection to target, dialing lazily.
func (e *Executor) grpcConn(target string) (*grpc.ClientConn, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.conns[target]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(credentials.NewTLS(e.tlsConfig.Clone())),
		grpc.WithUserAgent(e.opts.UserAgent),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(e.opts.TracerProvider),
			otelgrpc.WithPropagators(e.opts.Propagator))),
	)
	if err != nil {
		return nil, err
	}
	e.conns[target] = c
	return c, nil
}

// plain turns json.Numbers into float64s, which is what a Struct holds.
func plain(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, sub := range x {
			out[k] = plain(sub)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, sub := range x {
			out[i] = plain(sub)
		}
		return out
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return v
}
