package pipeline_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/agentcache"
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

// The stage tests run one pipeline in-process against the test kit's
// stubs of identitysvc, policysvc and auditsvc, served over real gRPC on
// loopback; each test sets the stub behaviour its stage needs.

const stageEndpoints = `
endpoints:
  - method: QUERY
    path: /notes/{note_id}
    description: Returns one note.
    semantic: {intent: Return the note., actor: agent, outcome: The caller holds the note., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {note_id: {type: string}, limit: {type: integer}}, required: [note_id], additionalProperties: false}
    output_schema: {type: object, properties: {note_id: {type: string}}, required: [note_id]}
    errors: []
    handler: {type: registered_function, function: test.notes.get}
  - method: EXECUTE
    path: /notes
    description: Stores a note.
    semantic: {intent: Store a note., actor: agent, outcome: The note is stored., capability: creation, confidence: 0.9, impact: reversible, is_idempotent: false}
    input_schema: {type: object, properties: {text: {type: string}}, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.notes.put}
  - method: DISCOVER
    path: /archives
    description: A DISCOVER path bound to the DISCOVER built-ins.
    semantic: {intent: List archives., actor: agent, outcome: The caller holds a listing., capability: discovery, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: agtp.builtin.discover.archives}
  - method: EXECUTE
    path: /builtin-nothing
    description: Names a built-in the front door does not have.
    semantic: {intent: Nothing., actor: agent, outcome: Nothing., capability: creation, confidence: 0.5, impact: reversible, is_idempotent: false}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: agtp.builtin.nothing}
`

var stageAgent = strings.Repeat("c", 64)

type stageFixture struct {
	p        *pipeline.Pipeline
	policy   *testkit.PolicyStub
	audit    *testkit.AuditStub
	identity *testkit.IdentityStub
	// rcns, when a change sets it, is the pipeline's rcnssvc; without it
	// the front door runs no RCNS.
	rcns *testkit.RCNSStub
	// handlers, when a change sets them, replace the registered
	// functions of the same name.
	handlers map[string]handler.Func
	// tracer and log, when a change sets them, replace the no-op tracer
	// and the discarding logger.
	tracer trace.Tracer
	log    *slog.Logger

	mu      sync.Mutex
	records []*auditv1.SignAndAppendRequest
}

// newStageFixture starts the stubs with their usual behaviour (a known
// active agent, policy allows, audit appends) and a pipeline over them;
// change reconfigures the stubs or options before the pipeline is built.
func newStageFixture(t *testing.T, change func(f *stageFixture, opts *pipeline.Options, store *catalogstate.Store)) *stageFixture {
	t.Helper()
	f := &stageFixture{
		identity: &testkit.IdentityStub{
			ResolveAgentF: func(_ context.Context, in *identityv1.ResolveAgentRequest) (*identityv1.ResolveAgentResponse, error) {
				if in.GetAgentId() != stageAgent {
					return nil, grpcerr.NotFound("agent-not-found", "no such agent")
				}
				return &identityv1.ResolveAgentResponse{Agent: &identityv1.AgentRecord{
					AgentId: stageAgent, Status: identityv1.AgentStatus_AGENT_STATUS_ACTIVE, Scopes: []string{"notes:read"}}}, nil
			},
		},
		policy: &testkit.PolicyStub{
			AuthorizeF: func(context.Context, *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
				return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW}, nil
			},
		},
	}
	f.audit = &testkit.AuditStub{SignAndAppendF: func(_ context.Context, in *auditv1.SignAndAppendRequest) (*auditv1.SignAndAppendResponse, error) {
		f.mu.Lock()
		f.records = append(f.records, in)
		n := len(f.records)
		f.mu.Unlock()
		sum := sha256.Sum256([]byte(in.GetRequestId()))
		return &auditv1.SignAndAppendResponse{AttributionRecord: "eyJhbGciOiJub25lIn0.e30.", AuditId: hex.EncodeToString(sum[:]),
			Sequence: uint64(n), OutcomeStored: in.GetIdempotentOutcome() != nil}, nil
	}}

	store := compiledStore(t, stageEndpoints)
	opts := pipeline.Options{ServerID: "agtp.stage.test", RequestTimeout: 5 * time.Second, CallerProof: callerproof.Off}
	if change != nil {
		change(f, &opts, store)
	}

	log := slog.New(slog.DiscardHandler)
	if f.log != nil {
		log = f.log
	}
	identity := f.identity.Serve(t)
	reg := handler.NewRegistry()
	for name, h := range map[string]handler.Func{
		"test.notes.get": func(_ context.Context, call *handler.Call) (*handler.Result, error) {
			out, _ := json.Marshal(map[string]string{"note_id": call.PathParams["note_id"]})
			return &handler.Result{Output: out}, nil
		},
		"test.notes.put": func(context.Context, *handler.Call) (*handler.Result, error) {
			return &handler.Result{Output: json.RawMessage(`{"stored":true}`)}, nil
		},
		// test.echo answers with its input and core parameters as it got them.
		"test.echo": func(_ context.Context, call *handler.Call) (*handler.Result, error) {
			out, _ := json.Marshal(map[string]json.RawMessage{"input": call.Input, "core": call.CoreParams})
			return &handler.Result{Output: out}, nil
		},
	} {
		if f.handlers[name] != nil {
			h = f.handlers[name]
		}
		reg.Register(name, h)
	}
	deps := pipeline.Deps{
		Catalog:  store,
		Agents:   agentcache.New(identity, log),
		Policy:   f.policy.Serve(t),
		Audit:    f.audit.Serve(t),
		Identity: identity,
		Handlers: reg,
		Log:      log,
		Tracer:   tracenoop.NewTracerProvider().Tracer(""),
		Meter:    metricnoop.NewMeterProvider().Meter(""),
	}
	if f.tracer != nil {
		deps.Tracer = f.tracer
	}
	if f.rcns != nil {
		deps.RCNS = f.rcns.Serve(t)
	}
	var err error
	if f.p, err = pipeline.New(opts, deps); err != nil {
		t.Fatal(err)
	}
	return f
}

// stageRequest is a request from stageAgent; headers are set after the
// defaults, an empty value deleting one.
// compiledStore is a catalog store holding the endpoint definitions defs
// (a YAML endpoints list) as revision 1; those bound to agtp.builtin.* are
// Tier A, the others Tier B.
func compiledStore(t testing.TB, defs string) *catalogstate.Store {
	t.Helper()
	eps, err := endpoint.ParseAndCompile("endpoints.yaml", []byte(defs), endpoint.FormatYAML, endpoint.Context{InheritCapability: true})
	if err != nil {
		t.Fatal(err)
	}
	snap := &catalogv1.Snapshot{Revision: 1, CatalogVersion: "1.0.0", ApiVersion: "1.0.0"}
	for _, ep := range eps {
		tier := catalogv1.EndpointTier_ENDPOINT_TIER_B
		if strings.HasPrefix(ep.HandlerName(), "agtp.builtin.") {
			tier = catalogv1.EndpointTier_ENDPOINT_TIER_A
		}
		snap.Endpoints = append(snap.Endpoints, ep.Proto(tier))
	}
	store := &catalogstate.Store{}
	if err := store.Set(snap); err != nil {
		t.Fatal(err)
	}
	return store
}

func stageRequest(method, target, body string, headers ...string) *agtp.Request {
	path, query, _ := strings.Cut(target, "?")
	req := &agtp.Request{Method: method, Target: target, Path: path, RawQuery: query, Body: []byte(body)}
	req.Header.Set(agtp.HeaderAgentID, stageAgent)
	if body != "" {
		req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
		req.Header.Set(agtp.HeaderContentLength, strconv.Itoa(len(body)))
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	return req
}

func stageConn() *transport.ConnInfo {
	return &transport.ConnInfo{Transport: transport.TransportTCP, RemoteAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}, ID: 1, Requests: 1}
}

// do serves req and returns the response and its decoded body.
func (f *stageFixture) do(t *testing.T, req *agtp.Request) (*agtp.Response, map[string]any) {
	t.Helper()
	resp := f.p.ServeAGTP(context.Background(), stageConn(), req)
	var body map[string]any
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatalf("%d body %q: %v", resp.Status, resp.Body, err)
	}
	return resp, body
}

func (f *stageFixture) appended() []*auditv1.SignAndAppendRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*auditv1.SignAndAppendRequest(nil), f.records...)
}

// wantAnswer checks status and reason of an answer.
func wantAnswer(t *testing.T, resp *agtp.Response, body map[string]any, status int, reason string) {
	t.Helper()
	if resp.Status != status || body["reason"] != reason {
		t.Fatalf("answer = %d %s, want %d %s", resp.Status, resp.Body, status, reason)
	}
	if resp.Header.Get(agtp.HeaderAttributionRecord) == "" || resp.Header.Get(agtp.HeaderResponseID) == "" {
		t.Fatalf("answer without Attribution-Record or Response-ID: %v", resp.Header)
	}
}
