package pipeline_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/agentcache"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/testkit"
)

// spendPolicy is policysvc with one bucket of the caller's: each decision
// spends from it, and once it is empty the decision is a 429.
type spendPolicy struct {
	mu    sync.Mutex
	left  int
	down  bool
	calls []*policyv1.AuthorizeRequest
}

const spendLimit = 3

func (s *spendPolicy) Authorize(_ context.Context, req *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, req)
	if s.down {
		return nil, grpcerr.Unavailable("policy-unavailable", "redis is down")
	}
	if s.left == 0 {
		return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_DENY, Denial: &policyv1.Denial{
			Status: agtp.StatusRateLimited, Reason: "rate-limited", Explanation: "the agent's rate limit is spent",
			RetryAfterSeconds: 30, Details: map[string]string{"limit": "agent"}}}, nil
	}
	s.left--
	return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW, EffectiveScopes: req.GetAgentScopes(),
		RateLimitLimit: spendLimit, RateLimitRemaining: int64(s.left), RateLimitResetSeconds: 60}, nil
}

// since is the decisions asked for after the first n.
func (s *spendPolicy) since(n int) []*policyv1.AuthorizeRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*policyv1.AuthorizeRequest(nil), s.calls[n:]...)
}

const spendEndpoints = `
endpoints:
  - method: EXECUTE
    path: /things
    description: Creates a thing.
    semantic: {intent: Create a thing., actor: agent, outcome: A thing exists., capability: creation, confidence: 0.9, impact: reversible, is_idempotent: false}
    input_schema: {type: object, properties: {mode: {type: string}}, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.things.create}
`

func newSpendPipeline(t *testing.T, policy *spendPolicy) *pipeline.Pipeline {
	t.Helper()
	store := compiledStore(t, spendEndpoints)
	identity := &bndIdentity{agents: map[string]*identityv1.AgentRecord{
		agentFull: {AgentId: agentFull, Status: identityv1.AgentStatus_AGENT_STATUS_ACTIVE, Owner: "owner", Scopes: []string{"things:write"}},
	}}
	identityClient := (&testkit.IdentityStub{ResolveAgentF: identity.ResolveAgent}).Serve(t)
	policyClient := (&testkit.PolicyStub{AuthorizeF: policy.Authorize}).Serve(t)
	auditClient := (&testkit.AuditStub{SignAndAppendF: (&bndAudit{}).SignAndAppend}).Serve(t)
	log := slog.New(slog.DiscardHandler)
	reg := handler.NewRegistry()
	reg.Register("test.things.create", func(context.Context, *handler.Call) (*handler.Result, error) {
		return &handler.Result{Output: json.RawMessage(`{"created":true}`)}, nil
	})
	p, err := pipeline.New(pipeline.Options{ServerID: "agtp.test", RequestTimeout: 3 * time.Second, CallerProof: callerproof.Off}, pipeline.Deps{
		Catalog: store, Agents: agentcache.New(identityClient, log), Policy: policyClient, Audit: auditClient, Identity: identityClient,
		Handlers: reg, Log: log, Tracer: tracenoop.NewTracerProvider().Tracer(""), Meter: metricnoop.NewMeterProvider().Meter(""),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBoundRefusalsSpendRateLimits: a bound request refused before the
// policy stage (the binding's own refusal, input the schema refuses)
// spends its caller's rate limits through Authorize, claiming nothing, and
// once they are spent the answer is policysvc's 429; an anonymous
// refusal spends nothing, a policysvc that does not answer leaves the
// refusal standing, and a request read off the wire is unchanged.
func TestBoundRefusalsSpendRateLimits(t *testing.T) {
	policy := &spendPolicy{left: spendLimit}
	p := newSpendPipeline(t, policy)
	conn := &transport.ConnInfo{Transport: "https", RemoteAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}, Requests: 1}
	request := func(agent bool, method, path, key, body string) *agtp.Request {
		req := &agtp.Request{Method: method, Target: path, Path: path, Body: []byte(body)}
		if agent {
			req.Header.Set(agtp.HeaderAgentID, agentFull)
		}
		if key != "" {
			req.Header.Set(agtp.HeaderIdempotencyKey, pipeline.BoundKeyPrefix+key)
		}
		if body != "" {
			req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
			req.Header.Set(agtp.HeaderContentLength, strconv.Itoa(len(body)))
		}
		return req
	}
	notFound := &pipeline.Refusal{Status: agtp.StatusBadRequest, Reason: "business-not-found", Explanation: "no such business"}
	refusal := func(agent bool) *pipeline.Bound {
		return &pipeline.Bound{Request: request(agent, agtp.MethodQuery, "/agp/query", "", ""), Conn: conn, Refusal: notFound}
	}
	reason := func(out *pipeline.BoundOutcome) string {
		var eb agtp.ErrorBody
		_ = json.Unmarshal(out.Response.Body, &eb)
		return eb.Reason
	}

	// The binding's own refusal: answered as decided, one spent.
	out := p.ServeBound(context.Background(), refusal(true))
	if out.Response.Status != 400 || reason(out) != "business-not-found" || out.AgentID != agentFull {
		t.Fatalf("refusal = %d %s", out.Response.Status, out.Response.Body)
	}
	if out.RateLimit == nil || out.RateLimit.Limit != spendLimit || out.RateLimit.Remaining != spendLimit-1 {
		t.Fatalf("refusal's rate limit %+v, want %d of %d left", out.RateLimit, spendLimit-1, spendLimit)
	}
	calls := policy.since(0)
	if len(calls) != 1 || calls[0].GetAgentId() != agentFull || calls[0].GetMethod() != agtp.MethodQuery || calls[0].GetPathTemplate() != "/agp/query" ||
		calls[0].GetClientIp() != "127.0.0.1" || calls[0].GetPrincipal() != "owner" || len(calls[0].GetAgentScopes()) != 1 {
		t.Fatalf("decisions %v, want one for the refused caller", calls)
	}

	// Input the schema refuses, with an Idempotency-Key: spent under the
	// endpoint, nothing claimed.
	out = p.ServeBound(context.Background(), &pipeline.Bound{Request: request(true, agtp.MethodExecute, "/things", "k-1", `{"mode":5}`), Conn: conn})
	if out.Response.Status != agtp.StatusUnprocessable || out.RateLimit == nil || out.RateLimit.Remaining != spendLimit-2 {
		t.Fatalf("invalid input = %d %s, rate limit %+v", out.Response.Status, out.Response.Body, out.RateLimit)
	}
	calls = policy.since(1)
	if len(calls) != 1 || calls[0].GetMethod() != agtp.MethodExecute || calls[0].GetPathTemplate() != "/things" ||
		calls[0].GetIdempotencyKey() != "" || calls[0].GetTaskRun() != nil || len(calls[0].GetRequiredScopes()) != 0 {
		t.Fatalf("decisions %v, want one for the endpoint that claims nothing", calls)
	}

	// An allowed request spends once, as always.
	if out = p.ServeBound(context.Background(), &pipeline.Bound{Request: request(true, agtp.MethodExecute, "/things", "", `{}`), Conn: conn}); out.Response.Status != 200 {
		t.Fatalf("allowed = %d %s", out.Response.Status, out.Response.Body)
	}
	if n := len(policy.since(2)); n != 1 {
		t.Fatalf("an allowed request was decided %d times, want once", n)
	}

	// Spent: the refusal is a 429.
	out = p.ServeBound(context.Background(), refusal(true))
	var eb agtp.ErrorBody
	_ = json.Unmarshal(out.Response.Body, &eb)
	if out.Response.Status != agtp.StatusRateLimited || eb.Reason != "rate-limited" || eb.Extra["limit"] != "agent" || eb.Extra["retry_after_seconds"] != float64(30) {
		t.Fatalf("refusal past the limit = %d %s, want policysvc's 429", out.Response.Status, out.Response.Body)
	}
	out = p.ServeBound(context.Background(), &pipeline.Bound{Request: request(true, agtp.MethodExecute, "/things", "", `{"mode":5}`), Conn: conn})
	if out.Response.Status != agtp.StatusRateLimited {
		t.Fatalf("invalid input past the limit = %d %s, want 429", out.Response.Status, out.Response.Body)
	}

	// Anonymous: nothing of a caller's to spend.
	n := len(policy.since(0))
	if out = p.ServeBound(context.Background(), refusal(false)); out.Response.Status != 400 || len(policy.since(n)) != 0 {
		t.Fatalf("anonymous refusal = %d, %d decisions", out.Response.Status, len(policy.since(n)))
	}
	// A request read off the wire: refused by its input before policy,
	// as ever.
	if resp := p.ServeAGTP(context.Background(), conn, request(true, agtp.MethodExecute, "/things", "", `{"mode":5}`)); resp.Status != agtp.StatusUnprocessable || len(policy.since(n)) != 0 {
		t.Fatalf("AGTP invalid input = %d, %d decisions", resp.Status, len(policy.since(n)))
	}

	// policysvc down: the refusal stands.
	policy.mu.Lock()
	policy.down = true
	policy.mu.Unlock()
	if out = p.ServeBound(context.Background(), refusal(true)); out.Response.Status != 400 || reason(out) != "business-not-found" {
		t.Fatalf("refusal with policysvc down = %d %s", out.Response.Status, out.Response.Body)
	}
}
