// Package batchrpc carries many calls of one unary RPC in one batch RPC,
// the shape of the suite's hot internal calls (policysvc AuthorizeBatch,
// auditsvc SignAndAppendBatch; docs/performance.md, "Batched hops").
//
// A batch pays once what a unary call pays per request: one HTTP/2 stream,
// one set of headers, one frame each way, one pass through the
// interceptors and one write syscall on each side. The server side (Serve)
// decides every item exactly as the unary RPC would, and answers each with
// its own result or its own error; the client side (Caller) sends a lone
// call unary, so that one request in flight pays no batching delay, and
// coalesces the calls that arrive while others are in flight.
package batchrpc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agtpsuite/agtp/services/grpcerr"
)

// MaxItems bounds the items of one batch request. A server refuses more;
// a Caller never sends more.
const MaxItems = 256

// CheckSize refuses an empty or oversized batch with the status and reason
// a caller can act on.
func CheckSize(n int) error {
	switch {
	case n == 0:
		return grpcerr.InvalidArgument("batch-empty", "a batch needs at least one item")
	case n > MaxItems:
		return grpcerr.InvalidArgument("batch-too-large", fmt.Sprintf("a batch carries at most %d items", MaxItems))
	}
	return nil
}

// Serve decides items with one, the unary RPC's handler, and returns each
// item's response and error in item order. Items with the same key run
// one after another in item order (an agent's chain records keep the order
// they were sent in); items with different keys, or with no key func, run
// concurrently. Failed items whose error the caller will see masked
// (Internal, Unknown, DataLoss) are logged here, as the logging interceptor
// logs a failed unary call.
func Serve[Req, Resp any](ctx context.Context, log *slog.Logger, method string, items []Req,
	key func(Req) string, one func(context.Context, Req) (Resp, error)) ([]Resp, []error) {
	resps := make([]Resp, len(items))
	errs := make([]error, len(items))
	run := func(i int) {
		resps[i], errs[i] = one(ctx, items[i])
		LogFailed(ctx, log, method, i, errs[i])
	}
	var wg sync.WaitGroup
	if key == nil {
		for i := range items {
			wg.Go(func() { run(i) })
		}
		wg.Wait()
		return resps, errs
	}
	groups := map[string][]int{}
	var order []string
	for i, it := range items {
		k := key(it)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, k := range order {
		idx := groups[k]
		wg.Go(func() {
			for _, i := range idx {
				run(i)
			}
		})
	}
	wg.Wait()
	return resps, errs
}

// LogFailed logs item i's error if the caller will see it masked
// (Internal, Unknown, DataLoss), as the logging interceptor logs a failed
// unary call; a server that decides items without Serve calls it for each.
func LogFailed(ctx context.Context, log *slog.Logger, method string, i int, err error) {
	if err == nil {
		return
	}
	switch status.Code(err) {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		log.ErrorContext(ctx, "batch item failed", "method", method, "item", i, "error", err.Error())
	}
}

// EncodeError is err as a serialized google.rpc.Status: code, message and
// details, as a unary call would have carried them (an Internal cause
// stays masked, through its GRPCStatus).
func EncodeError(err error) []byte {
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.New(codes.Internal, "internal error").Proto())
	}
	return b
}

// DecodeError is the error EncodeError encoded, as a status error that
// grpcerr.Reason and status.Code read like a unary call's.
func DecodeError(b []byte) error {
	var st spb.Status
	if err := proto.Unmarshal(b, &st); err != nil || st.GetCode() == int32(codes.OK) {
		return status.Error(codes.Internal, "batch result carries an unreadable error")
	}
	return status.FromProto(&st).Err()
}

// ItemError is a batch result's error: nil when it has a response, the
// decoded error when it has one, and Internal when it has neither (a
// result this package's servers never send).
func ItemError(hasResponse bool, encoded []byte) error {
	switch {
	case encoded != nil:
		return DecodeError(encoded)
	case !hasResponse:
		return status.Error(codes.Internal, "batch result carries neither a response nor an error")
	}
	return nil
}
