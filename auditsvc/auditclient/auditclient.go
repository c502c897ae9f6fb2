// Package auditclient is how the suite's services append to auditsvc so
// that a lost answer neither loses nor doubles a record: each append is
// named by a request ID generated once, and sent once more, unchanged,
// when the connection fails (auditsvc answers a repeated request ID with
// the record appended the first time; docs/audit.md, "Retried requests").
package auditclient

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/batchrpc"
)

// NewRequestID is a fresh request ID: 26 base32 characters, 130 random
// bits, within the charset auditsvc accepts.
func NewRequestID() string { return rand.Text() }

// once calls send, and once more when the first attempt could not reach
// auditsvc or lost its answer (Unavailable) and ctx still has time.
func once[Req, Resp any](ctx context.Context, send func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	out, err := send(ctx, req)
	if status.Code(err) == codes.Unavailable && ctx.Err() == nil {
		out, err = send(ctx, req)
	}
	return out, err
}

// SignAndAppend appends an Attribution-Record; req.RequestId is set when
// empty.
func SignAndAppend(ctx context.Context, c auditv1.AuditServiceClient, req *auditv1.SignAndAppendRequest) (*auditv1.SignAndAppendResponse, error) {
	if req.RequestId == "" {
		req.RequestId = NewRequestID()
	}
	return once(ctx, c.SignAndAppend, req)
}

// AppendLifecycleEvent appends a lifecycle event; req.RequestId is set
// when empty.
func AppendLifecycleEvent(ctx context.Context, c auditv1.AuditServiceClient, req *auditv1.AppendLifecycleEventRequest) (*auditv1.AppendLifecycleEventResponse, error) {
	if req.RequestId == "" {
		req.RequestId = NewRequestID()
	}
	return once(ctx, c.AppendLifecycleEvent, req)
}

// AppendSignedRecord appends to a named signed stream; req.RequestId is
// set when empty.
func AppendSignedRecord(ctx context.Context, c auditv1.AuditServiceClient, req *auditv1.AppendSignedRecordRequest) (*auditv1.AppendSignedRecordResponse, error) {
	if req.RequestId == "" {
		req.RequestId = NewRequestID()
	}
	return once(ctx, c.AppendSignedRecord, req)
}

// Batching is an AuditServiceClient whose SignAndAppend coalesces
// concurrent calls: a lone call stays a unary SignAndAppend, and calls
// that arrive while others are in flight travel together in one
// SignAndAppendBatch call (docs/performance.md, "Batched hops"). Every
// other method is the wrapped client's. A record keeps every guarantee of
// a unary append (docs/audit.md, "Batched appends"), so SignAndAppend
// above (request ID, one resend) works the same through it.
type Batching struct {
	auditv1.AuditServiceClient
	appends *batchrpc.Caller[*auditv1.SignAndAppendRequest, *auditv1.SignAndAppendResponse]
}

var _ auditv1.AuditServiceClient = (*Batching)(nil)

// NewBatching wraps c.
func NewBatching(c auditv1.AuditServiceClient, opts batchrpc.Options) *Batching {
	one := func(ctx context.Context, r *auditv1.SignAndAppendRequest) (*auditv1.SignAndAppendResponse, error) {
		return c.SignAndAppend(ctx, r)
	}
	batch := func(ctx context.Context, rs []*auditv1.SignAndAppendRequest) ([]batchrpc.Result[*auditv1.SignAndAppendResponse], error) {
		out, err := c.SignAndAppendBatch(ctx, &auditv1.SignAndAppendBatchRequest{Items: rs})
		if err != nil {
			return nil, err
		}
		res := make([]batchrpc.Result[*auditv1.SignAndAppendResponse], len(out.GetResults()))
		for i, r := range out.GetResults() {
			res[i].Resp, res[i].Err = r.GetResponse(), batchrpc.ItemError(r.GetResponse() != nil, r.GetError())
		}
		return res, nil
	}
	return &Batching{AuditServiceClient: c, appends: batchrpc.NewCaller(one, batch, opts)}
}

// SignAndAppend appends one record, unary or in a batch; a call with
// options goes unary.
func (b *Batching) SignAndAppend(ctx context.Context, req *auditv1.SignAndAppendRequest, opts ...grpc.CallOption) (*auditv1.SignAndAppendResponse, error) {
	if len(opts) > 0 {
		return b.AuditServiceClient.SignAndAppend(ctx, req, opts...)
	}
	return b.appends.Do(ctx, req)
}

// Stats count the SignAndAppend calls sent unary and in batches.
func (b *Batching) Stats() batchrpc.Stats { return b.appends.Stats() }

// Payload is a record's payload as a JSON object: the Struct a current
// auditsvc sends, else the JSON bytes of the first release's field (pass
// both; a reader of either release gets the document).
func Payload(s *structpb.Struct, payloadJSON []byte) (map[string]any, error) {
	if s != nil {
		return s.AsMap(), nil
	}
	var m map[string]any
	if err := json.Unmarshal(payloadJSON, &m); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	return m, nil
}
