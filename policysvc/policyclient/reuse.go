package policyclient

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/kit"
)

// Reusing is a PolicyServiceClient whose Authorize answers a request
// identical to an earlier one with that one's response, for as long as
// policysvc said it may (AuthorizeResponse.reusable_for_ms; docs/policy.md,
// "Reused decisions"). Every other call, and every request policysvc did
// not mark, goes to the wrapped client.
//
// Identical means every field of the AuthorizeRequest: the key is the
// request's deterministic protobuf encoding, so a field added to the
// request later is part of the key without anyone remembering to add it.
//
// A reused response is shared by every request it answers: callers must
// not modify it.
type Reusing struct {
	policyv1.PolicyServiceClient
	// Stats count lookups: a hit is a decision answered without a call.
	Stats kit.CacheStats

	maxEntries int
	now        func() time.Time

	mu        sync.Mutex
	entries   map[string]reusedDecision
	nextSweep time.Time
}

type reusedDecision struct {
	resp  *policyv1.AuthorizeResponse
	until time.Time
}

var _ policyv1.PolicyServiceClient = (*Reusing)(nil)

// Bounds on what a Reusing keeps. The keys are requests a peer shapes (its
// Agent-ID, scopes, headers, address), so both the number of entries and
// the size of a key are bounded; a request over the key bound is decided
// by policysvc every time. A response's own reuse time is capped too, so
// that an entry cannot outlive what any policysvc may set.
const (
	DefaultMaxReusedDecisions = 10000
	maxReuseKeyBytes          = 4 << 10
	maxReuse                  = 5 * time.Minute
	// sweepInterval spaces the sweeps of a full table: a full table of
	// live entries makes new requests uncached, not slower.
	sweepInterval = time.Second
)

// NewReusing wraps c, keeping at most maxEntries decisions (0:
// DefaultMaxReusedDecisions).
func NewReusing(c policyv1.PolicyServiceClient, maxEntries int) *Reusing {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxReusedDecisions
	}
	return &Reusing{PolicyServiceClient: c, maxEntries: maxEntries, now: time.Now, entries: map[string]reusedDecision{}}
}

var keyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Authorize answers from a reusable decision when there is one, else asks
// the wrapped client and keeps the answer if policysvc marked it reusable.
func (r *Reusing) Authorize(ctx context.Context, req *policyv1.AuthorizeRequest, opts ...grpc.CallOption) (*policyv1.AuthorizeResponse, error) {
	if len(opts) > 0 || neverReused(req) {
		return r.PolicyServiceClient.Authorize(ctx, req, opts...)
	}
	bp := keyBuffers.Get().(*[]byte)
	defer keyBuffers.Put(bp)
	key, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend((*bp)[:0], req)
	if err != nil || len(key) > maxReuseKeyBytes {
		return r.PolicyServiceClient.Authorize(ctx, req, opts...)
	}
	*bp = key
	now := r.now()
	r.mu.Lock()
	d, ok := r.entries[string(key)]
	r.mu.Unlock()
	if ok && now.Before(d.until) {
		r.Stats.Count(true)
		return d.resp, nil
	}
	r.Stats.Count(false)
	resp, err := r.PolicyServiceClient.Authorize(ctx, req)
	if err != nil || resp.GetReusableForMs() <= 0 || resp.GetDecision() != policyv1.Decision_DECISION_ALLOW {
		return resp, err
	}
	r.keep(string(key), resp, now)
	return resp, nil
}

// neverReused is true of requests policysvc never marks reusable whose
// keys would be large or unique: the lookup would only cost.
func neverReused(req *policyv1.AuthorizeRequest) bool {
	return req.GetIdempotencyKey() != "" || req.GetTaskRun() != nil || len(req.GetInputJson()) > 0
}

func (r *Reusing) keep(key string, resp *policyv1.AuthorizeResponse, now time.Time) {
	until := now.Add(min(time.Duration(resp.GetReusableForMs())*time.Millisecond, maxReuse))
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.entries[key]; !ok && len(r.entries) >= r.maxEntries {
		if now.Before(r.nextSweep) {
			return
		}
		r.nextSweep = now.Add(sweepInterval)
		for k, d := range r.entries {
			if !now.Before(d.until) {
				delete(r.entries, k)
			}
		}
		if len(r.entries) >= r.maxEntries {
			return
		}
	}
	r.entries[key] = reusedDecision{resp: resp, until: until}
}
