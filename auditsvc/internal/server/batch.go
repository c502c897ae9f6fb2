package server

import (
	"context"

	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/batchrpc"
)

// SignAndAppendBatch decides every item as SignAndAppend would, in one
// call (docs/audit.md, "Batched appends"). Items of one chain are appended
// in item order, one after the other (each is signed against the head the
// one before it made); items of different chains run concurrently, so
// their Redis scripts share pipelines and each signature is computed while
// other items' round trips are in flight. Every item keeps SignAndAppend's
// guarantees: its request ID's idempotency, its outcome stored in the same
// step, and the replica acknowledgement wait (chain.Options.ReplicaAcks).
func (s *Server) SignAndAppendBatch(ctx context.Context, req *auditv1.SignAndAppendBatchRequest) (*auditv1.SignAndAppendBatchResponse, error) {
	items := req.GetItems()
	if err := batchrpc.CheckSize(len(items)); err != nil {
		return nil, err
	}
	resps, errs := batchrpc.Serve(ctx, s.log, auditv1.AuditService_SignAndAppendBatch_FullMethodName, items, batchChain, s.SignAndAppend)
	out := &auditv1.SignAndAppendBatchResponse{Results: make([]*auditv1.SignAndAppendBatchResult, len(items))}
	for i := range items {
		if errs[i] != nil {
			out.Results[i] = &auditv1.SignAndAppendBatchResult{Result: &auditv1.SignAndAppendBatchResult_Error{Error: batchrpc.EncodeError(errs[i])}}
			continue
		}
		out.Results[i] = &auditv1.SignAndAppendBatchResult{Result: &auditv1.SignAndAppendBatchResult_Response{Response: resps[i]}}
	}
	return out, nil
}

// batchChain is the ordering key of a batch item: its agent's chain.
// Anonymous and unchained records share no agent chain, and their order
// means nothing (the server chains are spread by request), so each is a
// key of its own.
func batchChain(r *auditv1.SignAndAppendRequest) string {
	if r.GetChainAgentId() == "" || r.GetUnchained() {
		return "\x00" + r.GetRequestId()
	}
	return r.GetChainAgentId()
}
