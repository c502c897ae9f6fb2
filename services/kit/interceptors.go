package kit

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/agtpsuite/agtp/services/grpcerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recoverUnary turns a handler panic into an internal error, so one bad
// request never takes the service down.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("handler panic", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = grpcerr.Internal(fmt.Errorf("panic in %s: %v", info.FullMethod, r))
			}
		}()
		return handler(ctx, req)
	}
}

func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("stream handler panic", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = grpcerr.Internal(fmt.Errorf("panic in %s: %v", info.FullMethod, r))
			}
		}()
		return handler(srv, ss)
	}
}

// endOnDrain ends open streams when the server starts draining.
// GracefulStop waits for every RPC, and a watch stream (catalog snapshots,
// agents, key changes) never ends by itself, so without this every drain
// of a service with watchers ran into its deadline. The caller gets
// Unavailable and reconnects, to another replica where there is one.
func endOnDrain(draining context.Context) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		stop := context.AfterFunc(draining, cancel)
		defer stop()
		err := handler(srv, &streamWithContext{ServerStream: ss, ctx: ctx})
		if err != nil && draining.Err() != nil && ss.Context().Err() == nil {
			return status.Error(codes.Unavailable, "the service is shutting down; reconnect")
		}
		return err
	}
}

type streamWithContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *streamWithContext) Context() context.Context { return s.ctx }

// logUnary logs failed calls; internal causes are logged in full here and
// masked towards the caller by grpcerr.
func logUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		logResult(ctx, log, info.FullMethod, err)
		return resp, err
	}
}

func logStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		err := handler(srv, ss)
		logResult(ss.Context(), log, info.FullMethod, err)
		return err
	}
}

func logResult(ctx context.Context, log *slog.Logger, method string, err error) {
	if err == nil {
		return
	}
	code := status.Code(err)
	switch code {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		log.ErrorContext(ctx, "call failed", "method", method, "code", code.String(), "error", err.Error())
	case codes.Canceled:
	default:
		log.DebugContext(ctx, "call refused", "method", method, "code", code.String(), "error", err.Error())
	}
}
