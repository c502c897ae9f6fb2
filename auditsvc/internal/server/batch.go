package server

import (
	"context"

	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/batchrpc"
)

// SignAndAppendBatch decides every item as SignAndAppend would, in one
// call (docs/audit.md, "Batched appends"). Items of one chain are appended
// in item order, each signed against the head the one before it made, and
// go to Redis together in one script call (chain.Batch); the script calls of
// different chains go out in one pipeline once each chain's records are
// signed (in a goroutine per chain; a chain busy with an earlier call sends
// with its next one). Every item keeps
// SignAndAppend's guarantees: its request ID's idempotency, its outcome
// stored in the same step, and the replica acknowledgement wait
// (chain.Options.ReplicaAcks).
func (s *Server) SignAndAppendBatch(ctx context.Context, req *auditv1.SignAndAppendBatchRequest) (*auditv1.SignAndAppendBatchResponse, error) {
	items := req.GetItems()
	if err := batchrpc.CheckSize(len(items)); err != nil {
		return nil, err
	}
	pend := make([]*pendingAppend, len(items))
	errs := make([]error, len(items))
	batch := s.store.NewBatch()
	defer batch.Send()
	for i, it := range items {
		pend[i], errs[i] = s.startAppend(ctx, it, batch)
	}
	batch.Send()
	out := &auditv1.SignAndAppendBatchResponse{Results: make([]*auditv1.SignAndAppendBatchResult, len(items))}
	// The results and their oneof wrappers come from one array each rather
	// than two allocations an item.
	results := make([]auditv1.SignAndAppendBatchResult, len(items))
	oks := make([]auditv1.SignAndAppendBatchResult_Response, len(items))
	for i := range items {
		out.Results[i] = &results[i]
		var resp *auditv1.SignAndAppendResponse
		if errs[i] == nil {
			resp, errs[i] = pend[i].wait(ctx)
		}
		if errs[i] != nil {
			batchrpc.LogFailed(ctx, s.log, auditv1.AuditService_SignAndAppendBatch_FullMethodName, i, errs[i])
			results[i].Result = &auditv1.SignAndAppendBatchResult_Error{Error: batchrpc.EncodeError(errs[i])}
			continue
		}
		oks[i].Response = resp
		results[i].Result = &oks[i]
	}
	return out, nil
}
