// Package policyclient is how the front door calls policysvc on its hot
// path: Authorize calls that arrive while others are in flight travel
// together in one AuthorizeBatch call (docs/performance.md, "Batched
// hops"), a lone call stays a unary Authorize, and a decision policysvc
// marked reusable answers identical requests without a call (Reusing).
package policyclient

import (
	"context"

	"google.golang.org/grpc"

	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/batchrpc"
)

// Batching is a PolicyServiceClient whose Authorize coalesces concurrent
// calls; every other method is the wrapped client's.
type Batching struct {
	policyv1.PolicyServiceClient
	authorize *batchrpc.Caller[*policyv1.AuthorizeRequest, *policyv1.AuthorizeResponse]
}

var _ policyv1.PolicyServiceClient = (*Batching)(nil)

// NewBatching wraps c.
func NewBatching(c policyv1.PolicyServiceClient, opts batchrpc.Options) *Batching {
	one := func(ctx context.Context, r *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
		return c.Authorize(ctx, r)
	}
	batch := func(ctx context.Context, rs []*policyv1.AuthorizeRequest) ([]batchrpc.Result[*policyv1.AuthorizeResponse], error) {
		out, err := c.AuthorizeBatch(ctx, &policyv1.AuthorizeBatchRequest{Items: rs})
		if err != nil {
			return nil, err
		}
		res := make([]batchrpc.Result[*policyv1.AuthorizeResponse], len(out.GetResults()))
		for i, r := range out.GetResults() {
			res[i].Resp, res[i].Err = r.GetResponse(), batchrpc.ItemError(r.GetResponse() != nil, r.GetError())
		}
		return res, nil
	}
	return &Batching{PolicyServiceClient: c, authorize: batchrpc.NewCaller(one, batch, opts)}
}

// Authorize decides one request, unary or in a batch. A call with options
// goes unary, and so does a request with an Idempotency-Key: a duplicate
// of a request in flight waits for the original's outcome (policysvc's
// idempotency max_wait), and in a batch it would hold every other item's
// answer for as long.
func (b *Batching) Authorize(ctx context.Context, req *policyv1.AuthorizeRequest, opts ...grpc.CallOption) (*policyv1.AuthorizeResponse, error) {
	if len(opts) > 0 || req.GetIdempotencyKey() != "" {
		return b.PolicyServiceClient.Authorize(ctx, req, opts...)
	}
	return b.authorize.Do(ctx, req)
}

// Stats count the Authorize calls sent unary and in batches.
func (b *Batching) Stats() batchrpc.Stats { return b.authorize.Stats() }
