package pipeline_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/attribution/attributionpb"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/agentcache"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/carried"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/composition"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/testkit"
)

// The peers of the pipeline are the test kit's stubs on real gRPC, their
// behaviour the methods of these small types, which keep what they were
// asked.

type bndIdentity struct {
	agents map[string]*identityv1.AgentRecord
}

func (s *bndIdentity) ResolveAgent(_ context.Context, req *identityv1.ResolveAgentRequest) (*identityv1.ResolveAgentResponse, error) {
	rec, ok := s.agents[req.GetAgentId()]
	if !ok {
		return nil, grpcerr.NotFound("agent-not-found", "no such agent")
	}
	return &identityv1.ResolveAgentResponse{Agent: rec}, nil
}

// bndPolicy admits a request when the caller's scopes cover the
// endpoint's required scopes, else 262, like policysvc; it records what
// it was asked.
type bndPolicy struct {
	mu    sync.Mutex
	asked []*policyv1.AuthorizeRequest
}

func (s *bndPolicy) Authorize(_ context.Context, req *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
	s.mu.Lock()
	s.asked = append(s.asked, req)
	s.mu.Unlock()
	held, _ := agtp.ParseScopeList(req.GetAgentScopes())
	for _, need := range req.GetRequiredScopes() {
		if !held.Covers(agtp.Scope(need)) {
			return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_DENY,
				Denial: &policyv1.Denial{Status: 262, Reason: "scope-required", Explanation: "needs " + need}}, nil
		}
	}
	return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW, EffectiveScopes: req.GetAgentScopes()}, nil
}

func (s *bndPolicy) requests() []*policyv1.AuthorizeRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*policyv1.AuthorizeRequest(nil), s.asked...)
}

// bndAudit appends unsigned records and keeps their payloads. Like
// auditsvc, it answers a request_id it has appended with that record; with
// loseAnswers > 0 it appends and then answers Unavailable, as a reply lost
// on the way back would look, that many times.
type bndAudit struct {
	mu          sync.Mutex
	records     []bndRecord
	byRequest   map[string]*auditv1.SignAndAppendResponse
	requests    []*auditv1.SignAndAppendRequest
	loseAnswers int
}

type bndRecord struct {
	chain   string
	auditID string
	payload attribution.Payload
}

func (s *bndAudit) SignAndAppend(_ context.Context, req *auditv1.SignAndAppendRequest) (*auditv1.SignAndAppendResponse, error) {
	if req.GetClaims() == nil || len(req.GetClaimsJson()) != 0 {
		return nil, grpcerr.InvalidArgument("claims-invalid", "the front door sends typed claims only")
	}
	p, err := attributionpb.Payload(req.GetClaims())
	if err != nil {
		return nil, grpcerr.InvalidArgument("claims-invalid", err.Error())
	}
	body, err := p.MarshalJSON()
	if err != nil {
		return nil, grpcerr.InvalidArgument("claims-invalid", err.Error())
	}
	jws := "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString(body) + "."
	sum := sha256.Sum256([]byte(jws))
	id := hex.EncodeToString(sum[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
	if out := s.byRequest[req.GetRequestId()]; out != nil {
		return out, nil
	}
	s.records = append(s.records, bndRecord{chain: req.GetChainAgentId(), auditID: id, payload: p})
	out := &auditv1.SignAndAppendResponse{AttributionRecord: jws, AuditId: id, Sequence: uint64(len(s.records)), OutcomeStored: req.GetIdempotentOutcome() != nil}
	if req.GetRequestId() != "" {
		if s.byRequest == nil {
			s.byRequest = map[string]*auditv1.SignAndAppendResponse{}
		}
		s.byRequest[req.GetRequestId()] = out
	}
	if s.loseAnswers > 0 {
		s.loseAnswers--
		return nil, status.Error(codes.Unavailable, "the answer was lost")
	}
	return out, nil
}

func (s *bndAudit) since(n int) []bndRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bndRecord(nil), s.records[n:]...)
}

func (s *bndAudit) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

var (
	agentFull    = strings.Repeat("a", 64) // every scope the tests need
	agentNoOrder = strings.Repeat("b", 64) // may ask for briefs, may not read orders
)

const bndEndpoints = `
endpoints:
  - method: QUERY
    path: /orders/{order_id}
    description: Returns one order.
    semantic: {intent: Return the order., actor: agent, outcome: The caller holds the order., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {order_id: {type: string}}, required: [order_id], additionalProperties: false}
    output_schema: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
    errors: [order_not_found]
    handler: {type: registered_function, function: test.orders.get}
    required_scopes: ["orders:read"]
  - method: SUMMARIZE
    path: /documents
    description: Summarizes text.
    semantic: {intent: Summarize the text., actor: agent, outcome: The caller holds a summary., capability: analysis, confidence: 0.8, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {text: {type: string}, max_sentences: {type: integer}}, required: [text], additionalProperties: false}
    output_schema: {type: object, properties: {summary: {type: string}}, required: [summary]}
    errors: [text_too_long]
    handler: {type: registered_function, function: test.summarize}
  - method: SUMMARIZE
    path: /order-briefs/{order_id}
    description: Summarizes one order in a sentence.
    semantic: {intent: Summarize the order., actor: agent, outcome: The caller holds a brief of the order., capability: analysis, confidence: 0.8, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {order_id: {type: string}}, required: [order_id], additionalProperties: false}
    output_schema: {type: object, properties: {order_id: {type: string}, brief: {type: string}}, required: [order_id, brief]}
    errors: [composition_failed]
    handler: {type: composition, recipe: order-brief}
    required_scopes: ["briefs:read"]
  - method: SUMMARIZE
    path: /unbound
    description: Names a recipe nobody has.
    semantic: {intent: Nothing., actor: agent, outcome: Nothing., capability: analysis, confidence: 0.5, impact: informational, is_idempotent: true}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: object}
    errors: [composition_failed]
    handler: {type: composition, recipe: nope}
  - method: PLAN
    path: /relays
    description: Relays to another server.
    semantic: {intent: Relay the call., actor: agent, outcome: The other server acted., capability: mechanics, confidence: 0.8, impact: reversible, is_idempotent: false}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.relay}
  - method: SUMMARIZE
    path: /loop
    description: A recipe that calls itself.
    semantic: {intent: Loop forever., actor: agent, outcome: Nothing., capability: analysis, confidence: 0.5, impact: informational, is_idempotent: true}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: object}
    errors: [composition_failed]
    handler: {type: composition, recipe: loop}
  - method: QUERY
    path: /rooms/{room_id}
    description: Returns one room from the booking system.
    semantic: {intent: Return the room., actor: agent, outcome: The caller holds the room., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {room_id: {type: string}}, required: [room_id], additionalProperties: false}
    output_schema: {type: object, properties: {room_id: {type: string}}, required: [room_id]}
    errors: [room_not_found, upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
    handler:
      type: external_service
      url: "https://127.0.0.1:ROOMS_PORT/${ROOMS_PREFIX}/{room_id}"
      method: GET
      headers: {Authorization: "Bearer ${ROOMS_TOKEN}"}
      output_transform: {room_id: roomId}
      error_map: {"404": room_not_found}
      timeout_seconds: 2
    required_scopes: ["rooms:read"]
  - method: EXECUTE
    path: /mcp
    description: This server's endpoints as MCP tools.
    semantic: {intent: Call a tool., actor: agent, outcome: The tool ran., capability: mechanics, confidence: 0.8, impact: reversible, is_idempotent: false}
    input_schema: {type: object, properties: {action: {type: string}, payload_type: {type: string}, payload: {type: object}}, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: agtp.mcp.tools}
  - method: EXECUTE
    path: /mcp-remote
    description: A remote MCP server's tools.
    semantic: {intent: Call a remote tool., actor: agent, outcome: The tool ran., capability: mechanics, confidence: 0.8, impact: reversible, is_idempotent: false}
    input_schema: {type: object, properties: {jsonrpc: {type: string}, id: {}, method: {type: string}, params: {type: object}, action: {type: string}, payload_type: {type: string}, payload: {type: object}}, additionalProperties: false}
    output_schema: {type: object}
    errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
    handler:
      type: external_service
      url: "https://127.0.0.1:MCP_PORT/mcp"
      method: POST
      timeout_seconds: 2
`

const loopRecipe = `
recipe_name: loop
recipe_version: "1"
steps:
  - {method: SUMMARIZE, path: /loop}
`

type bndFixture struct {
	p      *pipeline.Pipeline
	policy *bndPolicy
	audit  *bndAudit
	store  *catalogstate.Store
}

// setPolicies serves the fixture's catalog under other manifest policies.
func (f *bndFixture) setPolicies(t testing.TB, pol *catalogv1.ManifestPolicies) {
	t.Helper()
	snap := proto.Clone(f.store.Current().Snapshot).(*catalogv1.Snapshot)
	snap.Revision++
	snap.Policies = pol
	if err := f.store.Set(snap); err != nil {
		t.Fatal(err)
	}
}

func newBndFixture(t testing.TB) *bndFixture { t.Helper(); return newBndFixtureWith(t, "") }

// newBndFixtureWith adds the endpoints of extra (items of the endpoints
// list) to the fixture's; those bound to agtp.builtin.* are Tier A.
func newBndFixtureWith(t testing.TB, extra string) *bndFixture {
	t.Helper()
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("frontdoor"), pki.Key("frontdoor"))
	if err != nil {
		t.Fatal(err)
	}
	startTLS := func(h http.Handler) string {
		srv := httptest.NewUnstartedServer(h)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		return port
	}
	roomsPort := startTLS(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer rooms-token" || r.Header.Get("Agent-ID") != "" {
			w.WriteHeader(401)
			return
		}
		id := strings.TrimPrefix(r.URL.Path, "/rooms/")
		if id == "missing" {
			w.WriteHeader(404)
			return
		}
		fmt.Fprintf(w, `{"roomId":%q,"beds":2}`, id)
	}))
	mcpPort := startTLS(http.HandlerFunc(bndMCPServer))
	env := map[string]string{"ROOMS_PREFIX": "rooms", "ROOMS_TOKEN": "rooms-token"}
	defs := strings.NewReplacer("ROOMS_PORT", roomsPort, "MCP_PORT", mcpPort).Replace(bndEndpoints) + extra
	store := compiledStore(t, defs)

	identity := &bndIdentity{agents: map[string]*identityv1.AgentRecord{
		agentFull:    {AgentId: agentFull, Status: identityv1.AgentStatus_AGENT_STATUS_ACTIVE, OwnerId: "owner", Scopes: []string{"orders:read", "briefs:read", "rooms:read"}},
		agentNoOrder: {AgentId: agentNoOrder, Status: identityv1.AgentStatus_AGENT_STATUS_ACTIVE, OwnerId: "owner", Scopes: []string{"briefs:read"}},
	}}
	f := &bndFixture{policy: &bndPolicy{}, audit: &bndAudit{}, store: store}
	identityClient := (&testkit.IdentityStub{ResolveAgentF: identity.ResolveAgent}).Serve(t)
	policyClient := (&testkit.PolicyStub{AuthorizeF: f.policy.Authorize}).Serve(t)
	auditClient := (&testkit.AuditStub{SignAndAppendF: f.audit.SignAndAppend}).Serve(t)
	log := slog.New(slog.DiscardHandler)

	reg := handler.NewRegistry()
	reg.Register("test.orders.get", handler.Typed(func(_ context.Context, _ *handler.Call, in struct {
		OrderID string `json:"order_id"`
	}) (map[string]any, error) {
		switch in.OrderID {
		case "missing":
			return nil, handler.Errorf("order_not_found", "no order %s", in.OrderID)
		case "o-2":
			return map[string]any{"order_id": in.OrderID, "status": "unsummarizable"}, nil
		}
		return map[string]any{"order_id": in.OrderID, "status": "open"}, nil
	}))
	reg.Register("test.summarize", handler.Typed(func(_ context.Context, _ *handler.Call, in struct {
		Text string `json:"text"`
	}) (map[string]any, error) {
		if strings.Contains(in.Text, "unsummarizable") {
			return nil, handler.Errorf("text_too_long", "cannot summarize this")
		}
		return map[string]any{"summary": "about " + strconv.Itoa(len(in.Text)) + " characters"}, nil
	}))
	reg.Register("test.relay", func(_ context.Context, call *handler.Call) (*handler.Result, error) {
		return &handler.Result{Output: json.RawMessage(`{"key":"` + call.IdempotencyKey + `"}`),
			PriorActions: []handler.PriorAction{{AgentID: "other", AuditID: strings.Repeat("c", 64), AgentURI: "agtp://other.example/agents/x"}}}, nil
	})
	recipes, err := composition.Demo()
	if err != nil {
		t.Fatal(err)
	}
	loop, err := composition.LoadFS(fstest.MapFS{"loop.yaml": {Data: []byte(loopRecipe)}})
	if err != nil || recipes.Merge(loop) != nil {
		t.Fatal(err)
	}
	up, err := upstream.New(upstream.Options{CAFile: pki.CA(), Log: log,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Close() })
	// These tests are about bindings, not caller proof: the Agent-ID
	// header is taken as it is (callerproof.Off), as on a loopback
	// development server.
	f.p, err = pipeline.New(pipeline.Options{ServerID: "agtp.test", RequestTimeout: 10 * time.Second, CallerProof: callerproof.Off}, pipeline.Deps{
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

// bndMCPServer is a stateless MCP server (no session id) with one tool.
func bndMCPServer(w http.ResponseWriter, r *http.Request) {
	var msg upstream.RPCMessage
	_ = json.NewDecoder(r.Body).Decode(&msg)
	w.Header().Set("Content-Type", "application/json")
	switch msg.Method {
	case "initialize":
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"remote","version":"1"}}}`, msg.ID)
	case "notifications/initialized":
		w.WriteHeader(http.StatusAccepted)
	case "tools/call":
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"weather: sunny"}],"isError":false}}`, msg.ID)
	default:
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, msg.ID)
	}
}

type bndResult struct {
	status int
	header agtp.Header
	body   map[string]any
}

func (f *bndFixture) do(t testing.TB, agent, method, path string, headers map[string]string, body string) bndResult {
	t.Helper()
	req := &agtp.Request{Method: method, Target: path, Path: path}
	if agent != "" {
		req.Header.Set(agtp.HeaderAgentID, agent)
	}
	req.Header.Set(agtp.HeaderTaskID, "task-1")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	if body != "" {
		req.Body = []byte(body)
		if req.Header.Get(agtp.HeaderContentType) == "" {
			req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
		}
		req.Header.Set(agtp.HeaderContentLength, strconv.Itoa(len(body)))
	}
	conn := &transport.ConnInfo{Transport: transport.TransportTCP, RemoteAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}, ID: 1, Requests: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := f.p.ServeAGTP(ctx, conn, req)
	r := bndResult{status: resp.Status, header: resp.Header}
	if err := json.Unmarshal(resp.Body, &r.body); err != nil {
		t.Fatalf("%d body %q: %v", resp.Status, resp.Body, err)
	}
	return r
}

func (r bndResult) path(keys ...string) any {
	var cur any = r.body
	for _, k := range keys {
		m, _ := cur.(map[string]any)
		cur = m[k]
	}
	return cur
}

// A composition endpoint runs its recipe's steps through the pipeline as
// the caller: each step is authorized, validated and audited on the
// caller's chain, and the composite's Attribution-Record names the steps'
// records in prior_actions (AGTP-API §12.1; AGTP-IDENTIFIERS).
func TestCompositionThroughPipeline(t *testing.T) {
	f := newBndFixture(t)
	before := f.audit.count()
	r := f.do(t, agentFull, "SUMMARIZE", "/order-briefs/o-1", map[string]string{agtp.HeaderIdempotencyKey: "key-1"}, "")
	if r.status != 200 || r.path("result", "order_id") != "o-1" || r.path("result", "status") != "open" || r.path("result", "brief") == nil {
		t.Fatalf("%d %v", r.status, r.body)
	}
	recs := f.audit.since(before)
	if len(recs) != 3 {
		t.Fatalf("%d records, want the two steps' and the composite's", len(recs))
	}
	steps, composite := recs[:2], recs[2]
	if steps[0].payload.Method != "QUERY" || steps[1].payload.Method != "SUMMARIZE" || composite.auditID != r.header.Get(agtp.HeaderAuditID) {
		t.Fatalf("records %+v", recs)
	}
	want := []attribution.PriorAction{{AgentID: agentFull, AuditID: steps[0].auditID}, {AgentID: agentFull, AuditID: steps[1].auditID}}
	if fmt.Sprint(composite.payload.PriorActions) != fmt.Sprint(want) {
		t.Fatalf("prior_actions %+v, want %+v", composite.payload.PriorActions, want)
	}
	for _, rec := range recs {
		if rec.chain != agentFull || rec.payload.TaskID != "task-1" {
			t.Errorf("record on chain %q task %q: steps run as the caller in the caller's task", rec.chain, rec.payload.TaskID)
		}
	}
	// Every step was authorized, with an Idempotency-Key derived from the
	// composite's, distinct per step.
	asked := f.policy.requests()
	keys := map[string]bool{}
	for _, a := range asked[len(asked)-3:] {
		keys[a.GetIdempotencyKey()] = true
	}
	if len(keys) != 3 || !keys["key-1"] {
		t.Errorf("idempotency keys %v", keys)
	}
}

// api assertion 73 (AGTP-API §12.1): a composition that fails half way
// answers 422 composition_failed naming the step; the records of the steps
// that ran are still its prior actions.
func TestCompositionFailsHalfWay(t *testing.T) {
	f := newBndFixture(t)
	before := f.audit.count()
	r := f.do(t, agentFull, "SUMMARIZE", "/order-briefs/o-2", nil, "")
	if r.status != 422 || r.body["reason"] != "composition_failed" || r.body["error"] != "composition_failed" {
		t.Fatalf("%d %v", r.status, r.body)
	}
	for k, v := range map[string]any{"recipe": "order-brief", "step": 2.0, "step_method": "SUMMARIZE", "step_status": 422.0, "step_reason": "text_too_long"} {
		if got := r.path("details", k); got != v {
			t.Errorf("details.%s = %v, want %v", k, got, v)
		}
	}
	recs := f.audit.since(before)
	if len(recs) != 3 || len(recs[2].payload.PriorActions) != 2 || recs[1].payload.Status != 422 {
		t.Fatalf("records %+v", recs)
	}
}

// The caller's authority must cover every step before any runs
// (docs/decisions.md#D-composition, AGTP-API §16.2): no step runs, no step
// record.
func TestCompositionAuthorityCheckedFirst(t *testing.T) {
	f := newBndFixture(t)
	before := f.audit.count()
	r := f.do(t, agentNoOrder, "SUMMARIZE", "/order-briefs/o-1", nil, "")
	if r.status != 422 || r.path("details", "step") != 1.0 || r.path("details", "step_status") != 262.0 || r.path("details", "step_reason") != "scope-required" {
		t.Fatalf("%d %v", r.status, r.body)
	}
	if recs := f.audit.since(before); len(recs) != 1 || len(recs[0].payload.PriorActions) != 0 {
		t.Fatalf("records %+v: a refused composition ran steps", recs)
	}
}

// Nested invocations are bounded: a recipe that calls its own endpoint
// stops at the depth limit.
func TestCompositionDepthBounded(t *testing.T) {
	f := newBndFixture(t)
	asked := len(f.policy.requests())
	r := f.do(t, agentFull, "SUMMARIZE", "/loop", nil, "")
	if r.status != 422 || r.body["reason"] != "composition_failed" {
		t.Fatalf("%d %v", r.status, r.body)
	}
	if n := len(f.policy.requests()) - asked; n != 5 {
		t.Fatalf("%d requests authorized, want 5 (the call and 4 nested)", n)
	}
}

// A recipe the front door does not have is the operator's error, like an
// unregistered function.
func TestCompositionUnknownRecipe(t *testing.T) {
	f := newBndFixture(t)
	if r := f.do(t, agentFull, "SUMMARIZE", "/unbound", nil, ""); r.status != 500 || r.body["reason"] != "handler-unbound" {
		t.Fatalf("%d %v", r.status, r.body)
	}
}

// external_service through the pipeline: ${VAR}s from the lookup, the
// output renamed and validated, a mapped upstream status as the named
// error (AGTP-API §12.3).
func TestExternalServiceThroughPipeline(t *testing.T) {
	f := newBndFixture(t)
	r := f.do(t, agentFull, "QUERY", "/rooms/r-1", nil, "")
	if r.status != 200 || r.path("result", "room_id") != "r-1" || r.path("result", "beds") != 2.0 {
		t.Fatalf("%d %v", r.status, r.body)
	}
	r = f.do(t, agentFull, "QUERY", "/rooms/missing", nil, "")
	if r.status != 422 || r.body["reason"] != "room_not_found" || r.path("details", "upstream_status") != 404.0 {
		t.Fatalf("%d %v", r.status, r.body)
	}
}

func mcpBody(payload string) string {
	return `{"method":"EXECUTE","task_id":"task-1","parameters":{"action":"tools/call","payload_type":"` + carried.MediaTypeMCPTools + `","payload":` + payload + `}}`
}

// core §8: an EXECUTE carrying an MCP tools/call reaches the tool bound
// to it, after AGTP's checks; the result is a JSON-RPC response in the
// AGTP envelope, and the tool's own invocation is a prior action.
func TestMCPToolCallOverExecute(t *testing.T) {
	f := newBndFixture(t)
	before := f.audit.count()
	r := f.do(t, agentFull, "EXECUTE", "/mcp", nil, mcpBody(`{"name":"query_orders","arguments":{"order_id":"o-1"}}`))
	if r.status != 200 || r.header.Get(agtp.HeaderContentType) != carried.MediaTypeMCPTools {
		t.Fatalf("%d %v", r.status, r.body)
	}
	if r.path("result", "jsonrpc") != "2.0" || r.path("result", "id") != "task-1" || r.path("result", "result", "structuredContent", "order_id") != "o-1" {
		t.Fatalf("result %v", r.body["result"])
	}
	recs := f.audit.since(before)
	if len(recs) != 2 || recs[0].payload.Method != "QUERY" || len(recs[1].payload.PriorActions) != 1 || recs[1].payload.PriorActions[0].AuditID != recs[0].auditID {
		t.Fatalf("records %+v", recs)
	}

	// The tool list shows only what the caller may call; a tool outside
	// the caller's authority is refused with AGTP's 262 before the call.
	r = f.do(t, agentNoOrder, "EXECUTE", "/mcp", nil, `{"parameters":{"action":"tools/list","payload_type":"`+carried.MediaTypeMCPTools+`","payload":{}}}`)
	tools, _ := r.path("result", "result", "tools").([]any)
	var names []string
	for _, tl := range tools {
		names = append(names, tl.(map[string]any)["name"].(string))
	}
	listed := " " + strings.Join(names, " ") + " "
	if r.status != 200 || !strings.Contains(listed, " summarize_order_briefs ") ||
		strings.Contains(listed, " query_orders ") || strings.Contains(listed, " execute_mcp ") {
		t.Fatalf("%d tools %v: want the caller's tools, without orders (no orders:read) or the gateway itself", r.status, names)
	}
	r = f.do(t, agentNoOrder, "EXECUTE", "/mcp", nil, mcpBody(`{"name":"query_orders","arguments":{"order_id":"o-1"}}`))
	if r.status != 262 || r.body["reason"] != "scope-required" {
		t.Fatalf("%d %v", r.status, r.body)
	}
}

// An MCP server bound as an external service gets the carried message,
// sent with the MCP Content-Type as a bare JSON-RPC body.
func TestMCPRemoteOverExecute(t *testing.T) {
	f := newBndFixture(t)
	r := f.do(t, agentFull, "EXECUTE", "/mcp-remote", map[string]string{agtp.HeaderContentType: carried.MediaTypeMCPTools},
		`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"weather","arguments":{}}}`)
	if r.status != 200 || r.path("result", "id") != 42.0 || !strings.Contains(fmt.Sprint(r.path("result", "result")), "sunny") {
		t.Fatalf("%d %v", r.status, r.body)
	}
	r = f.do(t, agentFull, "EXECUTE", "/mcp-remote", map[string]string{agtp.HeaderContentType: carried.MediaTypeMCPTools},
		`{"jsonrpc":"2.0","id":43,"method":"resources/read","params":{}}`)
	if r.status != 422 || r.body["reason"] != carried.ReasonMCPMethod {
		t.Fatalf("%d %v", r.status, r.body)
	}
}

// A2A, ACP and unknown payload types are refused with 422
// payload-type-unsupported; so is a non-MCP call of the gateway.
func TestUnsupportedPayloadTypes(t *testing.T) {
	f := newBndFixture(t)
	for _, body := range []string{
		`{"parameters":{"action":"message/send","payload_type":"application/vnd.a2a+json","payload":{}}}`,
		`{"parameters":{"action":"x","payload_type":"application/vnd.acp+json"}}`,
		`{"parameters":{"action":"tools/list"}}`,
	} {
		r := f.do(t, agentFull, "EXECUTE", "/mcp", nil, body)
		if r.status != 422 || r.body["reason"] != carried.ReasonUnsupported || r.body["supported_payload_types"] == nil {
			t.Errorf("%s: %d %v", body, r.status, r.body)
		}
	}
}

// Registered functions see the Idempotency-Key, and the prior actions
// they report go into the record.
func TestRegisteredFunctionPriorActions(t *testing.T) {
	f := newBndFixture(t)
	before := f.audit.count()
	r := f.do(t, agentFull, "PLAN", "/relays", map[string]string{agtp.HeaderIdempotencyKey: "relay-key"}, "")
	if r.status != 200 || r.path("result", "key") != "relay-key" {
		t.Fatalf("%d %v", r.status, r.body)
	}
	recs := f.audit.since(before)
	if len(recs) != 1 || len(recs[0].payload.PriorActions) != 1 || recs[0].payload.PriorActions[0].AgentURI != "agtp://other.example/agents/x" {
		t.Fatalf("records %+v", recs)
	}
}

func BenchmarkCompositionThroughPipeline(b *testing.B) {
	f := newBndFixture(b)
	b.ReportAllocs()
	for b.Loop() {
		if r := f.do(b, agentFull, "SUMMARIZE", "/order-briefs/o-1", nil, ""); r.status != 200 {
			b.Fatal(r.status)
		}
	}
}

func BenchmarkExternalServiceThroughPipeline(b *testing.B) {
	f := newBndFixture(b)
	b.ReportAllocs()
	for b.Loop() {
		if r := f.do(b, agentFull, "QUERY", "/rooms/r-1", nil, ""); r.status != 200 {
			b.Fatal(r.status)
		}
	}
}

// TestLostAuditAnswerIsRetriedAndAppendsOnce: when SignAndAppend's answer
// is lost after the record was appended, the front door sends the same
// request again under the same request_id and gets that record back: one
// record, and the response is served, not 503 audit-unavailable.
func TestLostAuditAnswerIsRetriedAndAppendsOnce(t *testing.T) {
	f := newBndFixture(t)
	f.audit.mu.Lock()
	f.audit.loseAnswers, f.audit.requests = 1, nil
	f.audit.mu.Unlock()
	before := f.audit.count()
	r := f.do(t, agentFull, "SUMMARIZE", "/order-briefs/o-1", nil, "")
	if r.status != 200 {
		t.Fatalf("%d %v", r.status, r.body)
	}
	f.audit.mu.Lock()
	reqs := append([]*auditv1.SignAndAppendRequest(nil), f.audit.requests...)
	f.audit.mu.Unlock()
	// The composition's first step lost its answer: its request went twice.
	if len(reqs) < 2 || !proto.Equal(reqs[0], reqs[1]) || reqs[0].GetRequestId() == "" {
		t.Fatalf("the retry was not the same request under a request_id: %v", reqs)
	}
	if n := f.audit.count() - before; n != 3 {
		t.Fatalf("%d records appended, want 3 (two steps and the composite, each once)", n)
	}
}
