package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/policysvc/internal/ratelimit"
	"github.com/agtpsuite/agtp/policysvc/internal/server"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// serve runs a Server behind a real gRPC server on loopback and returns a
// client for it.
func serve(t testing.TB, rdb redis.UniversalClient, opts server.Options, log *slog.Logger) policyv1.PolicyServiceClient {
	t.Helper()
	if log == nil {
		log = discard
	}
	srv, err := server.New(rdb, log, opts)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, "Run", srv.Run)
	conn := testkit.ServeGRPC(t, func(g grpc.ServiceRegistrar) { policyv1.RegisterPolicyServiceServer(g, srv) })
	return policyv1.NewPolicyServiceClient(conn)
}

func newRedis(t testing.TB) *redis.Client { return testkit.StartRedis(t).Client(t) }

const agentA = "1111111111111111111111111111111111111111111111111111111111111111"
const agentB = "2222222222222222222222222222222222222222222222222222222222222222"

func fingerprint(body string) string {
	sum := sha256.Sum256([]byte("EXECUTE\n/orders\n" + body))
	return hex.EncodeToString(sum[:])
}

func request(agent string) *policyv1.AuthorizeRequest {
	return &policyv1.AuthorizeRequest{
		AgentId:      agent,
		AgentScopes:  []string{"orders:write", "orders:read"},
		Method:       "EXECUTE",
		PathTemplate: "/orders",
		ClientIp:     "192.0.2.1",
	}
}

func withKey(r *policyv1.AuthorizeRequest, key, body string) *policyv1.AuthorizeRequest {
	r.IdempotencyKey = key
	r.RequestFingerprint = fingerprint(body)
	return r
}

func authorize(t testing.TB, c policyv1.PolicyServiceClient, r *policyv1.AuthorizeRequest) *policyv1.AuthorizeResponse {
	t.Helper()
	resp, err := c.Authorize(context.Background(), r)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	return resp
}

func wantDenial(t testing.TB, resp *policyv1.AuthorizeResponse, status int32, reason string) {
	t.Helper()
	if resp.GetDecision() != policyv1.Decision_DECISION_DENY {
		t.Fatalf("decision = %v, want DENY %d %s", resp.GetDecision(), status, reason)
	}
	if d := resp.GetDenial(); d.GetStatus() != status || d.GetReason() != reason {
		t.Fatalf("denial = %d %s (%s), want %d %s", d.GetStatus(), d.GetReason(), d.GetExplanation(), status, reason)
	}
	if resp.GetClaim() != nil {
		t.Fatal("a denial carries an idempotency claim")
	}
}

func wantAllow(t testing.TB, resp *policyv1.AuthorizeResponse) {
	t.Helper()
	if resp.GetDecision() != policyv1.Decision_DECISION_ALLOW {
		t.Fatalf("decision = %v (%d %s: %s), want ALLOW", resp.GetDecision(),
			resp.GetDenial().GetStatus(), resp.GetDenial().GetReason(), resp.GetDenial().GetExplanation())
	}
}

func wantCode(t testing.TB, err error, code codes.Code, reason string) {
	t.Helper()
	got, gotReason, _, _ := grpcerr.Reason(err)
	if got != code || gotReason != reason {
		t.Fatalf("error = %v (%s), want %v %s", got, gotReason, code, reason)
	}
}

func TestAuthorityScope(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{}, nil)
	for _, tc := range []struct {
		name          string
		declared      []string
		claim         string
		claimPresent  bool
		required      []string
		anonymous     bool
		wantStatus    int32
		wantReason    string
		wantEffective []string
	}{
		{name: "absent claim inherits the declared scopes", declared: []string{"orders:write", "orders:read"}, required: []string{"orders:write"},
			wantEffective: []string{"orders:write", "orders:read"}},
		{name: "claim within the declared scopes narrows them", declared: []string{"orders:write", "orders:read"}, claim: "orders:read", claimPresent: true,
			wantEffective: []string{"orders:read"}},
		{name: "claim outside the declared scopes is 262 scope-claim-invalid", declared: []string{"orders:read"}, claim: "orders:read, payments:purchase", claimPresent: true,
			wantStatus: 262, wantReason: "scope-claim-invalid"},
		{name: "required scope outside the claim is 262 scope-required", declared: []string{"orders:write", "orders:read"}, claim: "orders:read", claimPresent: true, required: []string{"orders:write"},
			wantStatus: 262, wantReason: "scope-required"},
		{name: "required scope outside the inherited set is 262 scope-required", declared: []string{"orders:read"}, required: []string{"orders:write"},
			wantStatus: 262, wantReason: "scope-required"},
		{name: "declared domain wildcard covers a claim", declared: []string{"booking:*"}, claim: "booking:hotel", claimPresent: true, required: []string{"booking:hotel"},
			wantEffective: []string{"booking:hotel"}},
		{name: "a wildcard claim needs a wildcard declaration", declared: []string{"booking:hotel"}, claim: "booking:*", claimPresent: true,
			wantStatus: 262, wantReason: "scope-claim-invalid"},
		{name: "inherited wildcard covers a required scope", declared: []string{"*:query"}, required: []string{"documents:query"},
			wantEffective: []string{"*:query"}},
		{name: "whitespace around commas is accepted", declared: []string{"a:b", "c:d"}, claim: "a:b ,\tc:d", claimPresent: true,
			wantEffective: []string{"a:b", "c:d"}},
		{name: "malformed claim is 400", declared: []string{"orders:read"}, claim: "Orders", claimPresent: true,
			wantStatus: 400, wantReason: "invalid-authority-scope"},
		{name: "empty claim header is 400", declared: []string{"orders:read"}, claim: "", claimPresent: true,
			wantStatus: 400, wantReason: "invalid-authority-scope"},
		{name: "anonymous caller lacks required scopes", anonymous: true, required: []string{"orders:read"},
			wantStatus: 262, wantReason: "scope-required"},
		{name: "anonymous caller with no required scope passes", anonymous: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := request(agentA)
			if tc.anonymous {
				r.AgentId = ""
			}
			r.AgentScopes, r.AuthorityScope, r.AuthorityScopePresent, r.RequiredScopes = tc.declared, tc.claim, tc.claimPresent, tc.required
			resp := authorize(t, c, r)
			if tc.wantStatus != 0 {
				wantDenial(t, resp, tc.wantStatus, tc.wantReason)
				if tc.wantStatus == 262 && resp.GetDenial().GetDetails()["scope"] == "" {
					t.Fatal("a 262 must name the scope")
				}
				return
			}
			wantAllow(t, resp)
			if strings.Join(resp.GetEffectiveScopes(), ",") != strings.Join(tc.wantEffective, ",") {
				t.Fatalf("effective scopes = %v, want %v", resp.GetEffectiveScopes(), tc.wantEffective)
			}
		})
	}
}

// TestConcurrentDuplicatesRunOnce pins
// docs/decisions.md#D-idempotency-in-flight: N concurrent requests with one
// (Agent-ID, Idempotency-Key) lead to exactly one execution; the rest replay
// its stored response byte for byte once it completes.
func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	rdb := newRedis(t)
	c := serve(t, rdb, server.Options{Idempotency: server.IdempotencyOptions{MaxWait: 5 * time.Second}}, nil)
	const n = 32
	stored := []byte("AGTP/1.0 200 OK\r\nContent-Type: application/vnd.agtp+json\r\nContent-Length: 13\r\n\r\n{\"order\":42}\n")

	var wg sync.WaitGroup
	results := make([]*policyv1.AuthorizeResponse, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			resp, err := c.Authorize(context.Background(), withKey(request(agentA), "order-abc-123", `{"qty":1}`))
			if err != nil {
				t.Errorf("Authorize: %v", err)
				return
			}
			results[i] = resp
			if resp.GetDecision() == policyv1.Decision_DECISION_ALLOW {
				// The one execution: take a while, then complete.
				time.Sleep(100 * time.Millisecond)
				if _, err := c.CompleteIdempotency(context.Background(), &policyv1.CompleteIdempotencyRequest{Claim: resp.GetClaim(), Response: stored}); err != nil {
					t.Errorf("CompleteIdempotency: %v", err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	var allowed, replayed int
	for _, r := range results {
		switch r.GetDecision() {
		case policyv1.Decision_DECISION_ALLOW:
			allowed++
			if r.GetClaim().GetToken() == "" || r.GetClaim().GetTtlSeconds() != 86400 || r.GetClaim().GetLeaseSeconds() != 30 {
				t.Fatalf("claim = %+v; want a token, the 24h TTL and the 30s lease", r.GetClaim())
			}
		case policyv1.Decision_DECISION_REPLAY:
			replayed++
			if !bytes.Equal(r.GetReplayResponse(), stored) {
				t.Fatalf("replay = %q, want the stored bytes", r.GetReplayResponse())
			}
		default:
			t.Fatalf("unexpected decision %v %v", r.GetDecision(), r.GetDenial())
		}
	}
	if allowed != 1 || replayed != n-1 {
		t.Fatalf("%d allowed and %d replayed of %d duplicates, want 1 and %d", allowed, replayed, n, n-1)
	}

	// Later duplicates replay at once; another agent's identical key is
	// independent; the same key with another body is a conflict.
	if r := authorize(t, c, withKey(request(agentA), "order-abc-123", `{"qty":1}`)); r.GetDecision() != policyv1.Decision_DECISION_REPLAY {
		t.Fatalf("later duplicate: %v, want REPLAY", r.GetDecision())
	}
	other := authorize(t, c, withKey(request(agentB), "order-abc-123", `{"qty":1}`))
	wantAllow(t, other)
	if other.GetClaim() == nil {
		t.Fatal("another agent's request with the same key got no claim of its own")
	}
	wantDenial(t, authorize(t, c, withKey(request(agentA), "order-abc-123", `{"qty":2}`)), 409, "idempotency-key-reused")
}

func TestInFlightDuplicateGets409WhenWaitingIsOff(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{Idempotency: server.IdempotencyOptions{MaxWait: -1}}, nil)
	const n = 16
	var wg sync.WaitGroup
	decisions := make([]*policyv1.AuthorizeResponse, n)
	for i := range n {
		wg.Go(func() {
			decisions[i], _ = c.Authorize(context.Background(), withKey(request(agentA), "k", "{}"))
		})
	}
	wg.Wait()
	var allowed, inFlight int
	for _, r := range decisions {
		switch {
		case r.GetDecision() == policyv1.Decision_DECISION_ALLOW:
			allowed++
		case r.GetDenial().GetStatus() == 409 && r.GetDenial().GetReason() == "idempotency-in-flight":
			inFlight++
		default:
			t.Fatalf("unexpected %v", r)
		}
	}
	if allowed != 1 || inFlight != n-1 {
		t.Fatalf("%d allowed, %d in-flight; want 1 and %d", allowed, inFlight, n-1)
	}
}

func TestWaitingDuplicateGives409AfterMaxWait(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{Idempotency: server.IdempotencyOptions{MaxWait: 150 * time.Millisecond}}, nil)
	wantAllow(t, authorize(t, c, withKey(request(agentA), "k", "{}")))
	start := time.Now()
	wantDenial(t, authorize(t, c, withKey(request(agentA), "k", "{}")), 409, "idempotency-in-flight")
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Fatalf("duplicate answered after %v, want about max_wait", d)
	}
}

func TestReleasedClaimLetsTheRetryRun(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{}, nil)
	first := authorize(t, c, withKey(request(agentA), "k", "{}"))
	wantAllow(t, first)
	if _, err := c.ReleaseIdempotency(context.Background(), &policyv1.ReleaseIdempotencyRequest{Claim: first.GetClaim()}); err != nil {
		t.Fatal(err)
	}
	// Releasing twice is fine.
	if _, err := c.ReleaseIdempotency(context.Background(), &policyv1.ReleaseIdempotencyRequest{Claim: first.GetClaim()}); err != nil {
		t.Fatalf("second release: %v", err)
	}
	retry := authorize(t, c, withKey(request(agentA), "k", "{}"))
	wantAllow(t, retry)
	if retry.GetClaim().GetToken() == first.GetClaim().GetToken() {
		t.Fatal("the retry reused the released token")
	}
	// The released claim can no longer complete the slot.
	_, err := c.CompleteIdempotency(context.Background(), &policyv1.CompleteIdempotencyRequest{Claim: first.GetClaim(), Response: []byte("x")})
	wantCode(t, err, codes.Aborted, "idempotency-claim-lost")
}

func TestIdempotencyKeyRules(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{Idempotency: server.IdempotencyOptions{RequireForNonIdempotent: true}}, nil)
	t.Run("non-idempotent endpoint without a key is 400 idempotency-key-required", func(t *testing.T) {
		wantDenial(t, authorize(t, c, request(agentA)), 400, "idempotency-key-required")
	})
	t.Run("endpoint flag requires a key even on idempotent endpoints", func(t *testing.T) {
		r := request(agentA)
		r.EndpointIdempotent, r.IdempotencyKeyRequired = true, true
		wantDenial(t, authorize(t, c, r), 400, "idempotency-key-required")
	})
	t.Run("idempotent endpoint needs no key", func(t *testing.T) {
		r := request(agentA)
		r.EndpointIdempotent = true
		wantAllow(t, authorize(t, c, r))
	})
	t.Run("a key of 256 characters is 400", func(t *testing.T) {
		wantDenial(t, authorize(t, c, withKey(request(agentA), strings.Repeat("k", 256), "{}")), 400, "invalid-idempotency-key")
	})
	t.Run("a key with control characters is 400", func(t *testing.T) {
		wantDenial(t, authorize(t, c, withKey(request(agentA), "a\x01b", "{}")), 400, "invalid-idempotency-key")
	})
	t.Run("anonymous requests ignore the key", func(t *testing.T) {
		r := withKey(request(""), "k", "{}")
		resp := authorize(t, c, r)
		wantAllow(t, resp)
		if resp.GetClaim() != nil {
			t.Fatal("an anonymous request got a claim")
		}
	})
	t.Run("a key without a valid fingerprint is a bad call", func(t *testing.T) {
		r := request(agentA)
		r.IdempotencyKey, r.RequestFingerprint = "k", "not-hex"
		_, err := c.Authorize(context.Background(), r)
		wantCode(t, err, codes.InvalidArgument, "invalid-policy-request")
	})
	t.Run("a policy denial does not claim the key", func(t *testing.T) {
		r := withKey(request(agentA), "denied-key", "{}")
		r.RequiredScopes = []string{"payments:purchase"}
		wantDenial(t, authorize(t, c, r), 262, "scope-required")
		wantAllow(t, authorize(t, c, withKey(request(agentA), "denied-key", "{}")))
	})
}

func TestCompleteAndReleaseRefuseForeignSlots(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{Idempotency: server.IdempotencyOptions{MaxResponseBytes: 1024}}, nil)
	for _, claim := range []*policyv1.IdempotencyClaim{
		nil,
		{Slot: rediskeys.Agent(agentA), Token: strings.Repeat("a", 32)},
		{Slot: "other:" + rediskeys.IdempotencySlot(agentA, "k"), Token: strings.Repeat("a", 32)},
		{Slot: rediskeys.IdempotencySlot(agentA, "k"), Token: "short"},
	} {
		_, err := c.CompleteIdempotency(context.Background(), &policyv1.CompleteIdempotencyRequest{Claim: claim, Response: []byte("x")})
		wantCode(t, err, codes.InvalidArgument, "invalid-policy-request")
		_, err = c.ReleaseIdempotency(context.Background(), &policyv1.ReleaseIdempotencyRequest{Claim: claim})
		wantCode(t, err, codes.InvalidArgument, "invalid-policy-request")
	}
	resp := authorize(t, c, withKey(request(agentA), "k", "{}"))
	_, err := c.CompleteIdempotency(context.Background(), &policyv1.CompleteIdempotencyRequest{Claim: resp.GetClaim(), Response: make([]byte, 1025)})
	wantCode(t, err, codes.InvalidArgument, "idempotency-response-too-large")
}

func TestRateLimits(t *testing.T) {
	perMinute := func(n int64) server.RateLimitOptions {
		return server.RateLimitOptions{Tiers: map[string]rateT{"default": {Limit: n, Period: time.Minute}}}
	}
	t.Run("per-agent tier refuses with 429 and says when to retry", func(t *testing.T) {
		c := serve(t, newRedis(t), server.Options{RateLimits: perMinute(3)}, nil)
		for i := range 3 {
			resp := authorize(t, c, request(agentA))
			wantAllow(t, resp)
			if resp.GetRateLimitRemaining() != int64(2-i) || resp.GetRateLimitLimit() != 3 || resp.GetRateLimitResetSeconds() < 1 {
				t.Fatalf("request %d: remaining %d limit %d reset %d", i, resp.GetRateLimitRemaining(), resp.GetRateLimitLimit(), resp.GetRateLimitResetSeconds())
			}
		}
		resp := authorize(t, c, request(agentA))
		wantDenial(t, resp, 429, "rate-limited")
		d := resp.GetDenial()
		if d.GetRetryAfterSeconds() < 19 || d.GetRetryAfterSeconds() > 21 {
			t.Fatalf("retry after %d s, want about 20 (one emission interval)", d.GetRetryAfterSeconds())
		}
		if d.GetDetails()["limit"] != "agent" || d.GetDetails()["retry_after_seconds"] != strconv.FormatInt(d.GetRetryAfterSeconds(), 10) || d.GetDetails()["retry_at"] == "" {
			t.Fatalf("details = %v; want the limit, retry_after_seconds and retry_at", d.GetDetails())
		}
		// Another agent has its own budget.
		wantAllow(t, authorize(t, c, request(agentB)))
	})
	t.Run("tier chosen by rate_tier, then trust tier, then default", func(t *testing.T) {
		rl := server.RateLimitOptions{Tiers: map[string]rateT{
			"default":      {Limit: 1, Period: time.Minute},
			"trust-tier-1": {Limit: 2, Period: time.Minute},
			"gold":         {Limit: 3, Period: time.Minute},
		}}
		c := serve(t, newRedis(t), server.Options{RateLimits: rl}, nil)
		for _, tc := range []struct {
			agent, rateTier string
			trust           int32
			want            int64
		}{
			{agentA, "", 0, 1}, {agentB, "", 1, 2}, {strings.Repeat("3", 64), "gold", 1, 3},
		} {
			r := request(tc.agent)
			r.RateTier, r.TrustTier = tc.rateTier, tc.trust
			if got := authorize(t, c, r).GetRateLimitLimit(); got != tc.want {
				t.Fatalf("rate_tier %q trust %d: limit %d, want %d", tc.rateTier, tc.trust, got, tc.want)
			}
		}
	})
	t.Run("anonymous tier counts per client address", func(t *testing.T) {
		rl := server.RateLimitOptions{Tiers: map[string]rateT{"anonymous": {Limit: 1, Period: time.Minute}}}
		c := serve(t, newRedis(t), server.Options{RateLimits: rl}, nil)
		wantAllow(t, authorize(t, c, request("")))
		wantDenial(t, authorize(t, c, request("")), 429, "rate-limited")
		r := request("")
		r.ClientIp = "192.0.2.99"
		wantAllow(t, authorize(t, c, r))
	})
	t.Run("shared endpoint limit spans agents; refusals consume nothing", func(t *testing.T) {
		rdb := newRedis(t)
		rl := server.RateLimitOptions{
			Tiers:     map[string]rateT{"default": {Limit: 2, Period: time.Minute}},
			Endpoints: []server.EndpointLimit{{Method: "EXECUTE", Path: "/orders", Rate: rateT{Limit: 1, Period: time.Minute}}},
		}
		c := serve(t, rdb, server.Options{RateLimits: rl}, nil)
		wantAllow(t, authorize(t, c, request(agentA)))
		resp := authorize(t, c, withKey(request(agentB), "kb", "{}"))
		wantDenial(t, resp, 429, "rate-limited")
		if resp.GetDenial().GetDetails()["limit"] != "endpoint" {
			t.Fatalf("refused by %q, want endpoint", resp.GetDenial().GetDetails()["limit"])
		}
		if rdb.Exists(context.Background(), rediskeys.IdempotencySlot(agentB, "kb")).Val() != 0 {
			t.Fatal("a rate-limited request kept its idempotency claim")
		}
		// Agent B's tier budget was refunded: two requests elsewhere pass.
		other := request(agentB)
		other.PathTemplate = "/elsewhere"
		wantAllow(t, authorize(t, c, other))
		wantAllow(t, authorize(t, c, other))
		wantDenial(t, authorize(t, c, other), 429, "rate-limited")
	})
	t.Run("per-agent endpoint limit", func(t *testing.T) {
		rl := server.RateLimitOptions{Endpoints: []server.EndpointLimit{{Method: "EXECUTE", Rate: rateT{Limit: 1, Period: time.Minute}, PerAgent: true}}}
		c := serve(t, newRedis(t), server.Options{RateLimits: rl}, nil)
		wantAllow(t, authorize(t, c, request(agentA)))
		wantDenial(t, authorize(t, c, request(agentA)), 429, "rate-limited")
		wantAllow(t, authorize(t, c, request(agentB)))
		q := request(agentA)
		q.Method = "QUERY"
		wantAllow(t, authorize(t, c, q))
	})
	t.Run("per-IP and per-principal limits", func(t *testing.T) {
		rl := server.RateLimitOptions{PerIP: rateT{Limit: 2, Period: time.Minute}, PerPrincipal: rateT{Limit: 1, Period: time.Minute}}
		c := serve(t, newRedis(t), server.Options{RateLimits: rl}, nil)
		a := request(agentA)
		a.Principal = "owner-1"
		wantAllow(t, authorize(t, c, a))
		b := request(agentB)
		b.Principal = "owner-1"
		resp := authorize(t, c, b)
		wantDenial(t, resp, 429, "rate-limited")
		if resp.GetDenial().GetDetails()["limit"] != "principal" {
			t.Fatalf("refused by %q, want principal", resp.GetDenial().GetDetails()["limit"])
		}
		b.Principal = "owner-2"
		wantAllow(t, authorize(t, c, b))
		b.Principal = "owner-3"
		resp = authorize(t, c, b)
		if resp.GetDenial().GetDetails()["limit"] != "ip" {
			t.Fatalf("third request from one address: %v, want refused by the ip limit", resp.GetDenial())
		}
	})
	t.Run("requests refused by policy still count", func(t *testing.T) {
		c := serve(t, newRedis(t), server.Options{RateLimits: perMinute(1)}, nil)
		r := request(agentA)
		r.RequiredScopes = []string{"payments:purchase"}
		wantDenial(t, authorize(t, c, r), 262, "scope-required")
		wantDenial(t, authorize(t, c, request(agentA)), 429, "rate-limited")
	})
}

type rateT = ratelimit.Rate

func TestRCNSNegotiationLimit(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{}, nil)
	ctx := context.Background()
	for i := range 10 {
		r, err := c.CheckRateLimit(ctx, &policyv1.CheckRateLimitRequest{Scope: "rcns", Key: agentA})
		if err != nil || !r.GetAllowed() || r.GetRemaining() != int64(9-i) {
			t.Fatalf("evaluation %d: %v, %v; want allowed with %d remaining", i, r, err, 9-i)
		}
	}
	r, err := c.CheckRateLimit(ctx, &policyv1.CheckRateLimitRequest{Scope: "rcns", Key: agentA})
	if err != nil || r.GetAllowed() || r.GetRetryAfterSeconds() < 5 || r.GetRetryAfterSeconds() > 7 {
		t.Fatalf("11th evaluation in a minute: %v, %v; want refused, retry after about 6 s", r, err)
	}
	if r, _ := c.CheckRateLimit(ctx, &policyv1.CheckRateLimitRequest{Scope: "rcns", Key: agentB}); !r.GetAllowed() {
		t.Fatal("another agent's negotiation limit was spent")
	}
	_, err = c.CheckRateLimit(ctx, &policyv1.CheckRateLimitRequest{Scope: "nope", Key: agentA})
	wantCode(t, err, codes.InvalidArgument, "unknown-rate-limit-scope")
	_, err = c.CheckRateLimit(ctx, &policyv1.CheckRateLimitRequest{Scope: "rcns", Key: agentA, Cost: 11})
	wantCode(t, err, codes.InvalidArgument, "invalid-policy-request")
}

// TestRateLimitHoldsAcrossTwoInstances runs two policy servers on one Redis
// and drives both past the limit (200/s) for three seconds: the total allowed stays
// within 5% of burst + rate × elapsed. The burst of half a second's worth
// keeps a scheduling stall of the test's clients on this shared 2-core
// machine from showing up as unused capacity.
func TestRateLimitHoldsAcrossTwoInstances(t *testing.T) {
	addr := testkit.StartRedis(t).Addr
	const rate, burst = 200, 100
	opts := server.Options{RateLimits: server.RateLimitOptions{Tiers: map[string]rateT{"default": {Limit: rate, Period: time.Second, Burst: burst}}}}
	var clients []policyv1.PolicyServiceClient
	for range 2 {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		clients = append(clients, serve(t, rdb, opts, nil))
	}
	// Warm up both connections (gRPC and Redis dial lazily) with another
	// agent, so the measured window is all traffic.
	for _, c := range clients {
		wantAllow(t, authorize(t, c, request(agentB)))
	}
	const dur = 3 * time.Second
	var mu sync.Mutex
	var allowed, total int
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 8 {
		c := clients[i%2]
		wg.Go(func() {
			var a, n int
			for time.Since(start) < dur {
				resp, err := c.Authorize(context.Background(), request(agentA))
				if err != nil {
					t.Errorf("Authorize: %v", err)
					return
				}
				n++
				if resp.GetDecision() == policyv1.Decision_DECISION_ALLOW {
					a++
				}
			}
			mu.Lock()
			allowed += a
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	want := burst + rate*elapsed
	t.Logf("%d of %d requests allowed in %.2fs; expected %.0f", allowed, total, elapsed, want)
	if total < int(want*1.5) {
		t.Fatalf("only %d requests sent; the limit was not saturated", total)
	}
	// Over-admission is what a limiter must never do: always within 5%.
	// Under-admission measures the clients as much as the limiter: when a
	// starved machine sends under 3x the limit, stalls longer than the
	// burst leave capacity unused, so the lower bound widens then.
	low := 0.95
	if float64(total) < 3*want {
		low = 0.85
	}
	if float64(allowed) < want*low || float64(allowed) > want*1.05 {
		t.Fatalf("allowed %d, want %.0f (-%.0f%%, +5%%)", allowed, want, (1-low)*100)
	}
}

func TestGates(t *testing.T) {
	const fp = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	opts := server.Options{
		TrustTiers: server.TrustTierOptions{Methods: map[string]int32{"TRANSFER": 2}},
		Budget: server.BudgetOptions{
			Costs:             []server.EndpointCost{{Method: "EXECUTE", Path: "/orders", Cost: "tokens=500, USD=0.10"}},
			RequiredOnMethods: []string{"PURCHASE"},
		},
		Zone:     server.ZoneOptions{Zones: []string{"zone:acme-internal"}},
		Merchant: server.MerchantOptions{MerchantID: agentB, ManifestFingerprint: fp},
	}
	c := serve(t, newRedis(t), opts, nil)
	purchase := func(id, fingerprint string) *policyv1.AuthorizeRequest {
		r := request(agentA)
		r.Method, r.BudgetLimit, r.MerchantId, r.MerchantManifestFingerprint = "PURCHASE", "USD=50.00", id, fingerprint
		return r
	}
	for _, tc := range []struct {
		name       string
		mod        func(*policyv1.AuthorizeRequest)
		req        *policyv1.AuthorizeRequest
		wantStatus int32
		wantReason string
	}{
		{name: "trust tier below the method minimum is 403", mod: func(r *policyv1.AuthorizeRequest) { r.Method, r.TrustTier = "TRANSFER", 3 },
			wantStatus: 403, wantReason: "trust-tier-insufficient"},
		{name: "unknown trust tier fails a minimum", mod: func(r *policyv1.AuthorizeRequest) { r.Method = "TRANSFER" },
			wantStatus: 403, wantReason: "trust-tier-insufficient"},
		{name: "trust tier at the minimum passes", mod: func(r *policyv1.AuthorizeRequest) { r.Method, r.TrustTier = "TRANSFER", 2 }},
		{name: "more trusted tier passes", mod: func(r *policyv1.AuthorizeRequest) { r.Method, r.TrustTier = "TRANSFER", 1 }},
		{name: "budget below the endpoint's cost is 456", mod: func(r *policyv1.AuthorizeRequest) { r.BudgetLimit = "tokens=100" },
			wantStatus: 456, wantReason: "budget-exceeded"},
		{name: "money budget below the cost is 456", mod: func(r *policyv1.AuthorizeRequest) { r.BudgetLimit = "financial=0.05USD" },
			wantStatus: 456, wantReason: "budget-exceeded"},
		{name: "budget covering the cost passes", mod: func(r *policyv1.AuthorizeRequest) { r.BudgetLimit = "tokens=5000, compute-seconds=120" }},
		{name: "no budget means no limit", mod: func(r *policyv1.AuthorizeRequest) {}},
		{name: "malformed budget is 400", mod: func(r *policyv1.AuthorizeRequest) { r.BudgetLimit = "tokens=lots" },
			wantStatus: 400, wantReason: "invalid-budget"},
		{name: "request from another zone is 457", mod: func(r *policyv1.AuthorizeRequest) { r.ZoneId = "zone:elsewhere" },
			wantStatus: 457, wantReason: "zone-violation"},
		{name: "request from this zone passes", mod: func(r *policyv1.AuthorizeRequest) { r.ZoneId = "zone:acme-internal" }},
		{name: "PURCHASE with matching merchant headers passes", req: purchase(agentB, strings.ToUpper(fp))},
		{name: "PURCHASE without merchant headers is 458", req: purchase("", ""),
			wantStatus: 458, wantReason: "counterparty-unverified"},
		{name: "PURCHASE to another merchant is 458", req: purchase(agentA, fp),
			wantStatus: 458, wantReason: "counterparty-unverified"},
		{name: "PURCHASE with a stale manifest fingerprint is 458", req: purchase(agentB, strings.Repeat("0", 64)),
			wantStatus: 458, wantReason: "counterparty-unverified"},
		{name: "PURCHASE without a Budget-Limit is 456", req: func() *policyv1.AuthorizeRequest { r := purchase(agentB, fp); r.BudgetLimit = ""; return r }(),
			wantStatus: 456, wantReason: "budget-limit-required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.req
			if r == nil {
				r = request(agentA)
				tc.mod(r)
			}
			resp := authorize(t, c, r)
			if tc.wantStatus == 0 {
				wantAllow(t, resp)
				return
			}
			wantDenial(t, resp, tc.wantStatus, tc.wantReason)
		})
	}
}

func TestMerchantNotActiveIs458(t *testing.T) {
	fp := strings.Repeat("a", 64)
	c := serve(t, newRedis(t), server.Options{Merchant: server.MerchantOptions{MerchantID: agentB, ManifestFingerprint: fp, Status: "suspended"}}, nil)
	r := request(agentA)
	r.Method, r.MerchantId, r.MerchantManifestFingerprint = "PURCHASE", agentB, fp
	wantDenial(t, authorize(t, c, r), 458, "counterparty-unverified")
}

func TestZoneRequired(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{Zone: server.ZoneOptions{Zones: []string{"zone:a"}, Required: true}}, nil)
	wantDenial(t, authorize(t, c, request(agentA)), 457, "zone-required")
}

func TestAnonymousDiscoveryDisabled(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{DisableAnonymousDiscovery: true}, nil)
	r := request("")
	r.Method, r.PathTemplate = "DISCOVER", "/"
	wantDenial(t, authorize(t, c, r), 262, "anonymous-discovery-disabled")
	wantAllow(t, authorize(t, c, request(agentA)))
}

func TestRedisDownIsUnavailable(t *testing.T) {
	r := testkit.StartRedis(t)
	rdb := r.Client(t)
	c := serve(t, rdb, server.Options{RateLimits: server.RateLimitOptions{PerIP: rateT{Limit: 10, Period: time.Second}}}, nil)
	r.Stop()
	_, err := c.Authorize(context.Background(), withKey(request(agentA), "k", "{}"))
	wantCode(t, err, codes.Unavailable, "policy-unavailable")
	// A request refused by policy gets its refusal, not a 503.
	denied := request(agentA)
	denied.RequiredScopes = []string{"payments:purchase"}
	wantDenial(t, authorize(t, c, denied), 262, "scope-required")
	// Fail closed: without Redis no request runs.
	_, err = c.Authorize(context.Background(), request(agentA))
	wantCode(t, err, codes.Unavailable, "policy-unavailable")
}

func TestMalformedCallsAreInvalidArgument(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{}, nil)
	for name, mod := range map[string]func(*policyv1.AuthorizeRequest){
		"no method":       func(r *policyv1.AuthorizeRequest) { r.Method = "" },
		"trust tier 4":    func(r *policyv1.AuthorizeRequest) { r.TrustTier = 4 },
		"huge agent id":   func(r *policyv1.AuthorizeRequest) { r.AgentId = strings.Repeat("a", 300) },
		"too many scopes": func(r *policyv1.AuthorizeRequest) { r.AgentScopes = make([]string, 300) },
		"uppercase hex fp": func(r *policyv1.AuthorizeRequest) {
			r.IdempotencyKey, r.RequestFingerprint = "k", strings.ToUpper(fingerprint("{}"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := request(agentA)
			mod(r)
			_, err := c.Authorize(context.Background(), r)
			wantCode(t, err, codes.InvalidArgument, "invalid-policy-request")
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, o := range map[string]server.Options{
		"bad tier":               {TrustTiers: server.TrustTierOptions{Minimum: 4}},
		"bad rate":               {RateLimits: server.RateLimitOptions{PerIP: rateT{Limit: 10}}},
		"lease over ttl":         {Idempotency: server.IdempotencyOptions{TTL: time.Minute, Lease: time.Hour}},
		"unknown under lease":    {Idempotency: server.IdempotencyOptions{Lease: time.Minute, UnknownLease: time.Second}},
		"bad cost":               {Budget: server.BudgetOptions{Costs: []server.EndpointCost{{Cost: "tokens=x"}}}},
		"fingerprint without id": {Merchant: server.MerchantOptions{ManifestFingerprint: strings.Repeat("a", 64)}},
		"short fingerprint":      {Merchant: server.MerchantOptions{MerchantID: "m", ManifestFingerprint: "abc"}},
		"disabled named limit":   {RateLimits: server.RateLimitOptions{Named: map[string]rateT{"rcns": {}}}},
		"reuse over 5m":          {DecisionReuse: 6 * time.Minute},
	} {
		if err := o.WithDefaults().Validate(); err == nil {
			t.Errorf("%s: Validate() accepted it", name)
		}
	}
	if err := (server.Options{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("zero options: %v", err)
	}
}

// A decision is marked reusable only when it read nothing but the request
// and the options; anything counted, claimed, recorded or checked against
// a credential per request makes it that request's alone.
func TestReusableDecisions(t *testing.T) {
	rdb := newRedis(t)
	otherEndpoint := server.RateLimitOptions{Endpoints: []server.EndpointLimit{{Method: "QUERY", Path: "/orders/{order_id}", Rate: rateT{Limit: 100, Period: time.Minute}}}}
	perAgent := server.RateLimitOptions{Tiers: map[string]rateT{"default": {Limit: 100, Period: time.Minute}}}
	noScope := request(agentA)
	noScope.AgentScopes = []string{"catalog:read"}
	noScope.RequiredScopes = []string{"orders:write"}
	withTask := request(agentA)
	withTask.TaskRun = &policyv1.TaskRun{TaskId: "task-1", Method: "EXECUTE", Target: "/orders"}
	withBudget := request(agentA)
	withBudget.InputJson = []byte(`{"amount":"1.00"}`)
	withToken := request(agentA)
	withToken.Authorization = "Bearer token"
	for _, tc := range []struct {
		name string
		opts server.Options
		req  *policyv1.AuthorizeRequest
		want int64
	}{
		{"an allow that read only the request", server.Options{}, request(agentA), 10000},
		{"the operator's reuse time", server.Options{DecisionReuse: 2 * time.Second}, request(agentA), 2000},
		{"reuse turned off", server.Options{DecisionReuse: -1}, request(agentA), 0},
		{"a limit on another endpoint", server.Options{RateLimits: otherEndpoint}, request(agentA), 10000},
		{"a per-agent limit counted it", server.Options{RateLimits: perAgent}, request(agentA), 0},
		{"an Idempotency-Key claimed a slot", server.Options{}, withKey(request(agentA), "key-1", "{}"), 0},
		{"a refusal", server.Options{}, noScope, 0},
		{"a task run was indexed", server.Options{}, withTask, 0},
		{"the body was read for a cost", server.Options{}, withBudget, 0},
		{"a bearer token came with it", server.Options{}, withToken, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := authorize(t, serve(t, rdb, tc.opts, nil), tc.req)
			if got := resp.GetReusableForMs(); got != tc.want {
				t.Fatalf("reusable_for_ms = %d, want %d (decision %v)", got, tc.want, resp.GetDecision())
			}
		})
	}
}
