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
	"runtime/debug"
	"sync"
	"sync/atomic"

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
// item's response and error in item order. Failed items whose error the
// caller will see masked (Internal, Unknown, DataLoss) are logged here, as
// the logging interceptor logs a failed unary call.
//
// Serve runs the items on the calling goroutine, one after another, until
// one says it is about to wait (Blocking): the items not yet started then
// go on in another goroutine (a long-lived worker when one is idle) while
// it waits, so that the waits of a batch overlap (its Redis calls share
// pipelines) as if every item had its own goroutine. An item that never
// waits costs no goroutine: a goroutine per item would grow a fresh stack
// for each decision and wake an idle P for each start (docs/performance.md,
// "Batch serving"). An item that waits without saying so is still
// answered, but delays the items after it. A panicking item fails alone
// with Internal.
func Serve[Req, Resp any](ctx context.Context, log *slog.Logger, method string, items []Req,
	one func(context.Context, Req) (Resp, error)) ([]Resp, []error) {
	resps := make([]Resp, len(items))
	errs := make([]error, len(items))
	b := &batch{items: len(items)}
	b.do = func(ctx context.Context, i int) {
		defer func() {
			// A panicking item fails alone, as a unary call does behind
			// the recover interceptor, whichever goroutine it ran on.
			if r := recover(); r != nil {
				log.ErrorContext(ctx, "batch item panic", "method", method, "item", i, "panic", r, "stack", string(debug.Stack()))
				errs[i] = grpcerr.Internal(fmt.Errorf("panic in %s item %d: %v", method, i, r))
			}
		}()
		resps[i], errs[i] = one(ctx, items[i])
		LogFailed(ctx, log, method, i, errs[i])
	}
	b.ctx = context.WithValue(ctx, batchKey{}, b)
	b.work()
	b.wg.Wait()
	return resps, errs
}

// batch is the work of one Serve: its items, taken in order by whichever
// of its goroutines is free.
type batch struct {
	ctx   context.Context // the caller's, carrying the batch for Blocking
	items int
	next  atomic.Int64 // the next item to take
	do    func(ctx context.Context, item int)
	wg    sync.WaitGroup // the goroutines Blocking started
}

type batchKey struct{}

func (b *batch) work() {
	for {
		i := int(b.next.Add(1) - 1)
		if i >= b.items {
			return
		}
		b.do(b.ctx, i)
	}
}

// Blocking tells Serve that the item deciding on ctx is about to wait (a
// network round trip, a lock another request holds): the batch's items
// not yet started go on in another goroutine meanwhile. Outside Serve, or
// when no item is left to start, it does nothing.
func Blocking(ctx context.Context) {
	b, _ := ctx.Value(batchKey{}).(*batch)
	if b == nil || b.next.Load() >= int64(b.items) {
		return
	}
	b.wg.Add(1)
	select {
	case idle <- b: // a worker waiting for a batch takes it
		return
	default:
	}
	if workers.Add(1) <= maxWorkers {
		go worker(b)
		return
	}
	workers.Add(-1)
	go func() {
		defer b.wg.Done()
		b.work()
	}()
}

// Workers outlive the batches they help, so that the stacks deciding grew
// stay grown, as grpc-go's stream workers do for whole calls; at most
// maxWorkers wait for work, and beyond them a goroutine serves one batch.
var (
	idle    = make(chan *batch)
	workers atomic.Int32
)

const maxWorkers = 64

func worker(b *batch) {
	for {
		b.work()
		b.wg.Done()
		b = <-idle
	}
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
