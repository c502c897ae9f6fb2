package server

import (
	"context"

	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/batchrpc"
)

// AuthorizeBatch decides every item as Authorize would, in one call
// (docs/policy.md, "Batched decisions"): each item spends its own rate
// limits, claims its own idempotency slot and gets its own decision or
// error. Items that need no Redis are decided on the call's goroutine;
// those that wait on Redis overlap (batchrpc.Blocking).
func (s *Server) AuthorizeBatch(ctx context.Context, req *policyv1.AuthorizeBatchRequest) (*policyv1.AuthorizeBatchResponse, error) {
	items := req.GetItems()
	if err := batchrpc.CheckSize(len(items)); err != nil {
		return nil, err
	}
	resps, errs := batchrpc.Serve(ctx, s.log, policyv1.PolicyService_AuthorizeBatch_FullMethodName, items, s.Authorize)
	// The results and their oneof wrappers come from one array each
	// rather than two allocations per item.
	out := &policyv1.AuthorizeBatchResponse{Results: make([]*policyv1.AuthorizeBatchResult, len(items))}
	results := make([]policyv1.AuthorizeBatchResult, len(items))
	answered := make([]policyv1.AuthorizeBatchResult_Response, len(items))
	for i := range items {
		r := &results[i]
		if errs[i] != nil {
			r.Result = &policyv1.AuthorizeBatchResult_Error{Error: batchrpc.EncodeError(errs[i])}
		} else {
			answered[i].Response = resps[i]
			r.Result = &answered[i]
		}
		out.Results[i] = r
	}
	return out, nil
}
