// Package auditclient is how the suite's services append to auditsvc so
// that a lost answer neither loses nor doubles a record: each append is
// named by a request ID generated once, and sent once more, unchanged,
// when the connection fails (auditsvc answers a repeated request ID with
// the record appended the first time; docs/audit.md, "Retried requests").
package auditclient

import (
	"context"
	"crypto/rand"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
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
