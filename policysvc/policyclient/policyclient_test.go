package policyclient_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/policysvc/internal/ratelimit"
	"github.com/agtpsuite/agtp/policysvc/internal/server"
	"github.com/agtpsuite/agtp/policysvc/policyclient"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/batchrpc"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/testkit"
)

// servePolicy runs a real policysvc server on a real redis-server behind a
// gRPC server on loopback; calls counts the calls it received by method.
func servePolicy(t testing.TB, opts server.Options) (c policyv1.PolicyServiceClient, calls func(string) int) {
	t.Helper()
	srv, err := server.New(testkit.StartRedis(t).Client(t), slog.New(slog.DiscardHandler), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var mu sync.Mutex
	seen := map[string]int{}
	count := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		seen[info.FullMethod]++
		mu.Unlock()
		return h(ctx, req)
	})
	conn := testkit.ServeGRPCWith(t, []grpc.ServerOption{count}, func(g grpc.ServiceRegistrar) { policyv1.RegisterPolicyServiceServer(g, srv) })
	return policyv1.NewPolicyServiceClient(conn), func(m string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[m]
	}
}

func query(agent int) *policyv1.AuthorizeRequest {
	return &policyv1.AuthorizeRequest{
		AgentId:      fmt.Sprintf("%064x", agent+1),
		AgentScopes:  []string{"orders:read"},
		Method:       "QUERY",
		PathTemplate: "/orders/{order_id}",
		ClientIp:     "192.0.2.1",
	}
}

const (
	methodUnary = policyv1.PolicyService_Authorize_FullMethodName
	methodBatch = policyv1.PolicyService_AuthorizeBatch_FullMethodName
)

func TestALoneDecisionGoesUnary(t *testing.T) {
	c, calls := servePolicy(t, server.Options{})
	b := policyclient.NewBatching(c, batchrpc.Options{})
	r, err := b.Authorize(context.Background(), query(0))
	if err != nil || r.GetDecision() != policyv1.Decision_DECISION_ALLOW {
		t.Fatalf("Authorize: %+v %v", r, err)
	}
	if st := b.Stats(); st.Unary != 1 || st.Batches != 0 || calls(methodUnary) != 1 || calls(methodBatch) != 0 {
		t.Errorf("stats %+v, server calls %d unary %d batch: want one unary call", st, calls(methodUnary), calls(methodBatch))
	}
}

// Concurrent decisions travel in batches, and each spends its own rate
// limit: of 3n requests by an agent limited to n, exactly n are allowed.
func TestBatchedDecisionsSpendTheirOwnLimits(t *testing.T) {
	const n = 20
	rl := server.RateLimitOptions{Tiers: map[string]ratelimit.Rate{"default": {Limit: n, Period: time.Minute}}}
	c, calls := servePolicy(t, server.Options{RateLimits: rl})
	b := policyclient.NewBatching(c, batchrpc.Options{MaxInFlight: 1})
	var allowed, limited atomic.Int32
	var wg sync.WaitGroup
	for range 3 * n {
		wg.Go(func() {
			r, err := b.Authorize(context.Background(), query(0))
			switch {
			case err != nil:
				t.Errorf("Authorize: %v", err)
			case r.GetDecision() == policyv1.Decision_DECISION_ALLOW:
				allowed.Add(1)
			case r.GetDenial().GetStatus() == 429:
				limited.Add(1)
			}
		})
	}
	wg.Wait()
	if allowed.Load() != n || limited.Load() != 2*n {
		t.Errorf("%d allowed, %d limited; want %d and %d", allowed.Load(), limited.Load(), n, 2*n)
	}
	if st := b.Stats(); st.Batches == 0 || calls(methodBatch) == 0 || st.Unary+st.Batched != 3*n {
		t.Errorf("stats %+v: want %d calls, some in batches", st, 3*n)
	}
}

// A malformed item fails alone, with the status and reason Authorize
// gives it; the others are decided.
func TestABadItemFailsAlone(t *testing.T) {
	c, _ := servePolicy(t, server.Options{})
	bad := query(1)
	bad.TrustTier = 7
	_, wantErr := c.Authorize(context.Background(), bad)
	out, err := c.AuthorizeBatch(context.Background(), &policyv1.AuthorizeBatchRequest{Items: []*policyv1.AuthorizeRequest{query(0), bad, query(2)}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out.GetResults() {
		err := batchrpc.ItemError(r.GetResponse() != nil, r.GetError())
		if i != 1 {
			if err != nil || r.GetResponse().GetDecision() != policyv1.Decision_DECISION_ALLOW {
				t.Errorf("item %d: %+v %v, want ALLOW", i, r.GetResponse(), err)
			}
			continue
		}
		wc, wr, _, _ := grpcerr.Reason(wantErr)
		gc, gr, _, _ := grpcerr.Reason(err)
		if wc != codes.InvalidArgument || gc != wc || gr != wr {
			t.Errorf("bad item: %v %s, want %v %s", gc, gr, wc, wr)
		}
	}
}

// A request with an Idempotency-Key may wait for a duplicate in flight,
// so it never rides in (and holds up) a batch.
func TestKeyedRequestsGoUnary(t *testing.T) {
	c, calls := servePolicy(t, server.Options{})
	b := policyclient.NewBatching(c, batchrpc.Options{MaxInFlight: 1})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			r := query(0)
			r.Method, r.PathTemplate, r.AgentScopes = "EXECUTE", "/orders", []string{"orders:write"}
			r.IdempotencyKey = fmt.Sprintf("key-%d", i)
			r.RequestFingerprint = fmt.Sprintf("%064x", i)
			if out, err := b.Authorize(context.Background(), r); err != nil || out.GetClaim() == nil {
				t.Errorf("Authorize: %+v %v, want a claim", out, err)
			}
		})
	}
	wg.Wait()
	if calls(methodBatch) != 0 || calls(methodUnary) != 16 {
		t.Errorf("server calls %d unary %d batch: want 16 unary", calls(methodUnary), calls(methodBatch))
	}
}
