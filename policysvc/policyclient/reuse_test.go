package policyclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/policysvc/internal/ratelimit"
	"github.com/agtpsuite/agtp/policysvc/internal/server"
	"github.com/agtpsuite/agtp/policysvc/policyclient"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

func reusing(t *testing.T, opts server.Options, maxEntries int) (*policyclient.Reusing, func() int, *testkit.Clock) {
	t.Helper()
	c, calls := servePolicy(t, opts)
	r := policyclient.NewReusing(c, maxEntries)
	clk := testkit.NewClock(time.Unix(1_800_000_000, 0))
	policyclient.SetClock(r, clk.Now)
	return r, func() int { return calls(methodUnary) }, clk
}

func decide(t *testing.T, r *policyclient.Reusing, req *policyv1.AuthorizeRequest) *policyv1.AuthorizeResponse {
	t.Helper()
	resp, err := r.Authorize(context.Background(), req)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	if resp.GetDecision() != policyv1.Decision_DECISION_ALLOW {
		t.Fatalf("decision %v (%v), want ALLOW", resp.GetDecision(), resp.GetDenial())
	}
	return resp
}

// An identical request within the reuse time is answered without a call;
// any field that differs, or the time running out, asks policysvc again.
func TestReusedDecisionsSkipTheCall(t *testing.T) {
	r, calls, clk := reusing(t, server.Options{DecisionReuse: 2 * time.Second}, 0)
	first := decide(t, r, query(0))
	if again := decide(t, r, query(0)); again != first || calls() != 1 {
		t.Fatalf("identical request: %d calls, same response %v; want 1 call and the kept response", calls(), again == first)
	}
	for name, change := range map[string]func(*policyv1.AuthorizeRequest){
		"another agent":       func(q *policyv1.AuthorizeRequest) { q.AgentId = query(1).AgentId },
		"more scopes":         func(q *policyv1.AuthorizeRequest) { q.AgentScopes = append(q.AgentScopes, "orders:write") },
		"another address":     func(q *policyv1.AuthorizeRequest) { q.ClientIp = "192.0.2.2" },
		"another proof":       func(q *policyv1.AuthorizeRequest) { q.ClientCertThumbprint = "thumbprint" },
		"an Authority-Scope":  func(q *policyv1.AuthorizeRequest) { q.AuthorityScope, q.AuthorityScopePresent = "orders:read", true },
		"another trust tier":  func(q *policyv1.AuthorizeRequest) { q.TrustTier = 2 },
		"another path":        func(q *policyv1.AuthorizeRequest) { q.PathTemplate = "/orders" },
		"a zone":              func(q *policyv1.AuthorizeRequest) { q.ZoneId = "zone-1" },
		"another method":      func(q *policyv1.AuthorizeRequest) { q.Method = "DESCRIBE" },
		"a required scope":    func(q *policyv1.AuthorizeRequest) { q.RequiredScopes = []string{"orders:read"} },
		"a principal":         func(q *policyv1.AuthorizeRequest) { q.Principal = "owner-1" },
		"a named rate tier":   func(q *policyv1.AuthorizeRequest) { q.RateTier = "gold" },
		"an idempotent route": func(q *policyv1.AuthorizeRequest) { q.EndpointIdempotent = true },
	} {
		before := calls()
		q := query(0)
		change(q)
		decide(t, r, q)
		if calls() != before+1 {
			t.Errorf("%s: answered from the kept decision of another request", name)
		}
	}
	clk.Advance(2 * time.Second)
	decide(t, r, query(0))
	if st, _ := r.Stats.Load(); calls() != 15 || st != 1 {
		t.Fatalf("after the reuse time: %d calls, %d hits; want 15 and 1", calls(), st)
	}
}

// Decisions policysvc does not mark are asked for every time.
func TestUnmarkedDecisionsAreNotReused(t *testing.T) {
	for name, opts := range map[string]server.Options{
		"reuse off":        {DecisionReuse: -1},
		"a per-agent rate": {RateLimits: server.RateLimitOptions{Tiers: map[string]ratelimit.Rate{"default": {Limit: 100, Period: time.Minute}}}},
	} {
		t.Run(name, func(t *testing.T) {
			r, calls, _ := reusing(t, opts, 0)
			for range 3 {
				decide(t, r, query(0))
			}
			withKey := query(0)
			withKey.IdempotencyKey = "key-1"
			withKey.RequestFingerprint = "0000000000000000000000000000000000000000000000000000000000000000"
			decide(t, r, withKey)
			if calls() != 4 || r.Len() != 0 {
				t.Fatalf("%d calls, %d kept; want 4 and none", calls(), r.Len())
			}
		})
	}
}

// The table is bounded: a full table of live decisions keeps what it has
// and decides newcomers by calling; once entries have expired, a sweep
// makes room.
func TestReusedDecisionsAreBounded(t *testing.T) {
	r, calls, clk := reusing(t, server.Options{DecisionReuse: 10 * time.Second}, 2)
	for agent := range 3 {
		decide(t, r, query(agent))
	}
	if r.Len() != 2 {
		t.Fatalf("%d kept, want the bound 2", r.Len())
	}
	decide(t, r, query(2))
	if calls() != 4 {
		t.Fatalf("%d calls: the request over the bound was answered from memory", calls())
	}
	decide(t, r, query(0))
	if calls() != 4 {
		t.Fatalf("%d calls: a kept decision was lost when the table filled", calls())
	}
	clk.Advance(10 * time.Second)
	decide(t, r, query(2))
	if r.Len() != 1 || calls() != 5 {
		t.Fatalf("after expiry: %d kept, %d calls; want the sweep to keep only the newcomer", r.Len(), calls())
	}
}

// BenchmarkReusedDecision is the front door's cost of a decision it reuses
// (the request's key and the table read) against asking policysvc over
// loopback gRPC, one call at a time, for the throughput scenario's request.
func BenchmarkReusedDecision(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts server.Options
	}{
		{"reused", server.Options{}},
		{"asked", server.Options{DecisionReuse: -1}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, _ := servePolicy(b, tc.opts)
			r := policyclient.NewReusing(c, 0)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if resp, err := r.Authorize(ctx, query(0)); err != nil || resp.GetDecision() != policyv1.Decision_DECISION_ALLOW {
					b.Fatalf("Authorize: %v %v", resp, err)
				}
			}
		})
	}
}
