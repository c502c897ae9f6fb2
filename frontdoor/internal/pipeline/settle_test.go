package pipeline_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/agentcache"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/composition"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/testkit"
)

// claimPolicy allows every request and claims its Idempotency-Key, like
// policysvc on a fresh key, and records what became of each claim.
type claimPolicy struct {
	mu      sync.Mutex
	fate    map[string]string // slot -> released | unknown
	claimed []string          // keys, in order
}

func (s *claimPolicy) Authorize(_ context.Context, req *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
	out := &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW, EffectiveScopes: req.GetAgentScopes()}
	if k := req.GetIdempotencyKey(); k != "" {
		s.mu.Lock()
		s.claimed = append(s.claimed, k)
		s.mu.Unlock()
		out.Claim = &policyv1.IdempotencyClaim{Slot: "slot:" + k, Token: strings.Repeat("a", 32), TtlSeconds: 60, LeaseSeconds: 30}
	}
	return out, nil
}

func (s *claimPolicy) ReleaseIdempotency(_ context.Context, req *policyv1.ReleaseIdempotencyRequest) (*policyv1.ReleaseIdempotencyResponse, error) {
	s.settle(req.GetClaim().GetSlot(), "released")
	return &policyv1.ReleaseIdempotencyResponse{}, nil
}

func (s *claimPolicy) MarkIdempotencyUnknown(_ context.Context, req *policyv1.MarkIdempotencyUnknownRequest) (*policyv1.MarkIdempotencyUnknownResponse, error) {
	s.settle(req.GetClaim().GetSlot(), "unknown")
	return &policyv1.MarkIdempotencyUnknownResponse{Marked: true}, nil
}

func (s *claimPolicy) settle(slot, fate string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.fate[slot]; ok {
		fate = prev + "," + fate
	}
	s.fate[slot] = fate
}

func (s *claimPolicy) fateOf(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fate["slot:"+key]
}

// flakyAudit appends like bndAudit unless told to fail, and records
// whether an append carried an outcome to store.
type flakyAudit struct {
	bndAudit
	mu     sync.Mutex
	fail   bool
	stored map[string]bool // slot -> an outcome was stored with a record
	// lostClaim appends the record but reports the outcome not stored,
	// as auditsvc does when the claim no longer holds the slot.
	lostClaim bool
}

func (s *flakyAudit) SignAndAppend(ctx context.Context, req *auditv1.SignAndAppendRequest) (*auditv1.SignAndAppendResponse, error) {
	s.mu.Lock()
	fail, lost := s.fail, s.lostClaim
	if o := req.GetIdempotentOutcome(); o != nil && !fail && !lost {
		s.stored[o.GetSlot()] = true
	}
	s.mu.Unlock()
	if fail {
		return nil, grpcerr.Unavailable("audit-unavailable", "the chain store is down")
	}
	out, err := s.bndAudit.SignAndAppend(ctx, req)
	if err == nil && lost {
		out.OutcomeStored = false
	}
	return out, err
}

const settleEndpoints = `
endpoints:
  - method: EXECUTE
    path: /things
    description: Creates a thing.
    semantic: {intent: Create a thing., actor: agent, outcome: A thing exists., capability: creation, confidence: 0.9, impact: reversible, is_idempotent: false}
    input_schema: {type: object, properties: {mode: {type: string}}, additionalProperties: false}
    output_schema: {type: object}
    errors: [thing_refused, thing_exists]
    handler: {type: registered_function, function: test.things.create}
  - method: QUERY
    path: /things
    description: Reads things.
    semantic: {intent: Read things., actor: agent, outcome: The caller holds things., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {mode: {type: string}}, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.things.create}
  - method: EXECUTE
    path: /unbound-things
    description: Bound to nothing.
    semantic: {intent: Nothing., actor: agent, outcome: Nothing., capability: creation, confidence: 0.5, impact: reversible, is_idempotent: false}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.nobody}
  - method: EXECUTE
    path: /remote-things
    description: Creates a thing upstream.
    semantic: {intent: Create a thing upstream., actor: agent, outcome: A thing exists upstream., capability: creation, confidence: 0.9, impact: reversible, is_idempotent: false}
    input_schema: {type: object, properties: {mode: {type: string}}, additionalProperties: false}
    output_schema: {type: object}
    errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
    handler: {type: external_service, url: "https://127.0.0.1:UPSTREAM_PORT/things", method: POST, timeout_seconds: 10}
  - method: EXECUTE
    path: /slow-remote-things
    description: Creates a thing upstream, waiting one second at most.
    semantic: {intent: Create a thing upstream., actor: agent, outcome: A thing exists upstream., capability: creation, confidence: 0.9, impact: reversible, is_idempotent: false}
    input_schema: {type: object, properties: {mode: {type: string}}, additionalProperties: false}
    output_schema: {type: object}
    errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
    handler: {type: external_service, url: "https://127.0.0.1:UPSTREAM_PORT/things", method: POST, timeout_seconds: 1}
  - method: EXECUTE
    path: /misbound-things
    description: Creates a thing upstream with a header nobody set.
    semantic: {intent: Create a thing upstream., actor: agent, outcome: A thing exists upstream., capability: creation, confidence: 0.9, impact: reversible, is_idempotent: false}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: object}
    errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
    handler: {type: external_service, url: "https://127.0.0.1:UPSTREAM_PORT/things", method: POST, headers: {X-Key: "${NOT_SET}"}, timeout_seconds: 1}
  - method: EXECUTE
    path: /thing-pairs
    description: Creates a thing upstream through a recipe.
    semantic: {intent: Create a thing upstream., actor: agent, outcome: A thing exists upstream., capability: creation, confidence: 0.9, impact: reversible, is_idempotent: false}
    input_schema: {type: object, properties: {mode: {type: string}}, additionalProperties: false}
    output_schema: {type: object}
    errors: [composition_failed]
    handler: {type: composition, recipe: remote-thing}
`

const settleRecipe = `
recipe_name: remote-thing
recipe_version: "1"
steps:
  - method: EXECUTE
    path: /remote-things
    input: {mode: {$from: input.mode}}
`

type settleFixture struct {
	p        *pipeline.Pipeline
	policy   *claimPolicy
	audit    *flakyAudit
	mu       sync.Mutex
	upstream []string // Idempotency-Key headers the upstream saw
	keys     []string // call.IdempotencyKey the function saw
}

func newSettleFixture(t *testing.T) *settleFixture {
	t.Helper()
	f := &settleFixture{policy: &claimPolicy{fate: map[string]string{}}, audit: &flakyAudit{stored: map[string]bool{}}}
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("frontdoor"), pki.Key("frontdoor"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Mode string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		f.mu.Lock()
		f.upstream = append(f.upstream, r.Header.Get("Idempotency-Key"))
		f.mu.Unlock()
		switch in.Mode {
		case "slow":
			<-r.Context().Done()
		case "fail":
			w.WriteHeader(500)
		default:
			_, _ = w.Write([]byte(`{"created":true}`))
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	store := compiledStore(t, strings.ReplaceAll(settleEndpoints, "UPSTREAM_PORT", port))
	identity := &bndIdentity{agents: map[string]*identityv1.AgentRecord{
		agentFull: {AgentId: agentFull, Status: identityv1.AgentStatus_AGENT_STATUS_ACTIVE, OwnerId: "owner"},
	}}
	identityClient := (&testkit.IdentityStub{ResolveAgentF: identity.ResolveAgent}).Serve(t)
	policyClient := (&testkit.PolicyStub{AuthorizeF: f.policy.Authorize, ReleaseIdempotencyF: f.policy.ReleaseIdempotency,
		MarkIdempotencyUnknownF: f.policy.MarkIdempotencyUnknown}).Serve(t)
	auditClient := (&testkit.AuditStub{SignAndAppendF: f.audit.SignAndAppend}).Serve(t)
	log := slog.New(slog.DiscardHandler)

	reg := handler.NewRegistry()
	reg.Register("test.things.create", func(ctx context.Context, call *handler.Call) (*handler.Result, error) {
		var in struct{ Mode string }
		_ = json.Unmarshal(call.Input, &in)
		f.mu.Lock()
		f.keys = append(f.keys, call.IdempotencyKey)
		f.mu.Unlock()
		switch in.Mode {
		case "refused":
			return nil, handler.Errorf("thing_refused", "no")
		case "exists":
			return nil, &handler.Error{Name: "thing_exists", Message: "already there", Status: 409}
		case "boom":
			return nil, errors.New("the thing store broke half way")
		case "slow":
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return &handler.Result{Output: json.RawMessage(`{"created":true}`)}, nil
	})
	recipes, err := composition.LoadFS(fstest.MapFS{"r.yaml": {Data: []byte(settleRecipe)}})
	if err != nil {
		t.Fatal(err)
	}
	up, err := upstream.New(upstream.Options{CAFile: pki.CA(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Close() })
	f.p, err = pipeline.New(pipeline.Options{ServerID: "agtp.test", RequestTimeout: 3 * time.Second, CallerProof: callerproof.Off}, pipeline.Deps{
		Catalog:  store,
		Agents:   agentcache.New(identityClient, log),
		Policy:   policyClient,
		Audit:    auditClient,
		Identity: identityClient,
		Handlers: reg,
		Bindings: &pipeline.Bindings{Upstream: up, Compositions: composition.New(composition.Options{Recipes: recipes, Log: log})},
		Log:      log,
		Tracer:   tracenoop.NewTracerProvider().Tracer(""),
		Meter:    metricnoop.NewMeterProvider().Meter(""),
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *settleFixture) request(method, path, key, body string) *agtp.Request {
	req := &agtp.Request{Method: method, Target: path, Path: path, Body: []byte(body)}
	req.Header.Set(agtp.HeaderAgentID, agentFull)
	req.Header.Set(agtp.HeaderIdempotencyKey, key)
	req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	req.Header.Set(agtp.HeaderContentLength, strconv.Itoa(len(body)))
	return req
}

func (f *settleFixture) serve(t *testing.T, req *agtp.Request) (int, map[string]any) {
	t.Helper()
	conn := &transport.ConnInfo{Transport: transport.TransportTCP, RemoteAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}, ID: 1, Requests: 3}
	resp := f.p.ServeAGTP(context.Background(), conn, req)
	var body map[string]any
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatalf("%d body %q: %v", resp.Status, resp.Body, err)
	}
	return resp.Status, body
}

// TestClaimSettlement: what becomes of an idempotency claim whose outcome
// the front door could not store. Nothing ran (a refusal before the
// handler), the endpoint is idempotent, or a binding failed in a way a
// retry may cure: released, so the retry runs. The handler ran, or may
// have run, and its outcome is not known (a 5xx after dispatch, a record
// that could not be stored): marked unknown, so the retry is refused
// rather than doing it twice. A settled answer is stored with its record.
func TestClaimSettlement(t *testing.T) {
	for _, tc := range []struct {
		name        string
		method      string
		path        string
		mode        string
		auditDown   bool
		lostClaim   bool
		wantStatus  int
		wantReason  string
		wantFate    string // released, unknown, or "" when stored
		wantOutcome string // the body's outcome member
	}{
		{name: "a success is stored", path: "/things", wantStatus: 200},
		{name: "a declared refusal is stored", path: "/things", mode: "refused", wantStatus: 422, wantReason: "thing_refused"},
		{name: "the handler's own 409 is released", path: "/things", mode: "exists", wantStatus: 409, wantReason: "thing_exists", wantFate: "released"},
		{name: "a handler failure after dispatch is unknown", path: "/things", mode: "boom", wantStatus: 500, wantReason: "internal", wantFate: "unknown"},
		{name: "a handler timeout is unknown", path: "/things", mode: "slow", wantStatus: 503, wantReason: "handler-timeout", wantFate: "unknown"},
		{name: "a record that could not be stored is unknown", path: "/things", auditDown: true, wantStatus: 503, wantReason: "audit-unavailable", wantFate: "unknown", wantOutcome: "unknown"},
		{name: "a declared refusal whose record could not be stored is unknown", path: "/things", mode: "refused", auditDown: true, wantStatus: 503, wantReason: "audit-unavailable", wantFate: "unknown", wantOutcome: "unknown"},
		{name: "an idempotent endpoint is released", method: "QUERY", path: "/things", mode: "boom", wantStatus: 500, wantReason: "internal", wantFate: "released"},
		{name: "an idempotent endpoint's unrecorded answer is released", method: "QUERY", path: "/things", auditDown: true, wantStatus: 503, wantReason: "audit-unavailable", wantFate: "released"},
		{name: "an unbound handler never ran", path: "/unbound-things", wantStatus: 500, wantReason: "handler-unbound", wantFate: "released"},
		{name: "an unusable binding never called its upstream", path: "/misbound-things", wantStatus: 500, wantReason: "internal", wantFate: "released"},
		{name: "an upstream timeout is released", path: "/slow-remote-things", mode: "slow", wantStatus: 504, wantReason: "upstream_timeout", wantFate: "released"},
		{name: "an upstream 5xx is released", path: "/remote-things", mode: "fail", wantStatus: 502, wantReason: "upstream_error", wantFate: "released"},
		{name: "an upstream success is stored", path: "/remote-things", wantStatus: 200},
		{name: "an answer whose outcome the audit store could not keep holds the key unknown", path: "/things", lostClaim: true, wantStatus: 200, wantFate: "unknown"},
		{name: "a composition step's upstream 5xx is released", path: "/thing-pairs", mode: "fail", wantStatus: 502, wantReason: "composition_failed", wantFate: "released"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSettleFixture(t)
			f.audit.fail, f.audit.lostClaim = tc.auditDown, tc.lostClaim
			method := tc.method
			if method == "" {
				method = "EXECUTE"
			}
			key := "key-" + strings.ReplaceAll(tc.name, " ", "-")
			body := "{}"
			if tc.mode != "" {
				body = fmt.Sprintf(`{"mode":%q}`, tc.mode)
			}
			status, eb := f.serve(t, f.request(method, tc.path, key, body))
			if status != tc.wantStatus || (tc.wantReason != "" && eb["reason"] != tc.wantReason) {
				t.Fatalf("= %d %v, want %d %s", status, eb, tc.wantStatus, tc.wantReason)
			}
			if got := f.policy.fateOf(key); got != tc.wantFate {
				t.Fatalf("claim %q, want %q", got, tc.wantFate)
			}
			f.audit.mu.Lock()
			stored := f.audit.stored["slot:"+key]
			f.audit.mu.Unlock()
			if stored != (tc.wantFate == "") {
				t.Fatalf("outcome stored with the record: %v, want %v", stored, tc.wantFate == "")
			}
			if got, _ := eb["outcome"].(string); got != tc.wantOutcome {
				t.Fatalf("outcome member %q, want %q", got, tc.wantOutcome)
			}
		})
	}
}

// TestKeyReachesHandlersAndUpstreams: a function gets the request's key,
// an AGP request's without the binding's namespace, and an upstream gets
// it in Idempotency-Key; a composition step's upstream gets the step's
// derived key, the same on every retry of the composite.
func TestKeyReachesHandlersAndUpstreams(t *testing.T) {
	f := newSettleFixture(t)
	if status, eb := f.serve(t, f.request("EXECUTE", "/things", "k-1", "{}")); status != 200 {
		t.Fatalf("= %d %v", status, eb)
	}
	conn := &transport.ConnInfo{Transport: transport.TransportTCP, RemoteAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}, ID: 2}
	out := f.p.ServeBound(context.Background(), &pipeline.Bound{Request: f.request("EXECUTE", "/things", pipeline.BoundKeyPrefix+"k-2", "{}"), Conn: conn})
	if out.Response.Status != 200 {
		t.Fatalf("bound = %d %s", out.Response.Status, out.Response.Body)
	}
	if status, eb := f.serve(t, f.request("EXECUTE", "/remote-things", "k-3", "{}")); status != 200 {
		t.Fatalf("= %d %v", status, eb)
	}
	for range 2 {
		if status, eb := f.serve(t, f.request("EXECUTE", "/thing-pairs", "k-4", `{"mode":"fail"}`)); status != 502 {
			t.Fatalf("= %d %v", status, eb)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fmt.Sprint(f.keys) != "[k-1 k-2]" {
		t.Fatalf("functions saw keys %v, want [k-1 k-2]", f.keys)
	}
	if len(f.upstream) != 3 || f.upstream[0] != "k-3" || f.upstream[1] == "" || f.upstream[1] == "k-4" || f.upstream[2] != f.upstream[1] {
		t.Fatalf("upstream saw keys %v, want k-3 and the step's derived key twice", f.upstream)
	}
}
