package pipeline_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/agentcache"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/carried"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/composition"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/frontdoor/internal/outputcheck"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/testkit"
)

func TestDispatchStage(t *testing.T) {
	for _, tc := range []struct {
		name, method, target, body string
		status                     int
		reason                     string
		member                     string
	}{
		{"a registered function answers in the envelope", "QUERY", "/notes/n-7", "", agtp.StatusOK, "", `"result":{"note_id":"n-7"}`},
		{"a built-in is found in the table by method", "DISCOVER", "/archives", "", agtp.StatusNotFound, "not-found", ""},
		{"a built-in the table lacks is 501", "EXECUTE", "/builtin-nothing", "", agtp.StatusNotImplemented, "builtin-unsupported", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStageFixture(t, nil)
			resp, body := f.do(t, stageRequest(tc.method, tc.target, tc.body))
			if tc.reason != "" {
				wantAnswer(t, resp, body, tc.status, tc.reason)
				return
			}
			if resp.Status != tc.status || !contains(string(resp.Body), tc.member) {
				t.Fatalf("answer = %d %s, want %d with %s", resp.Status, resp.Body, tc.status, tc.member)
			}
		})
	}
}

// outputCheckEndpoints bind one endpoint of each kind to an answer its
// output_schema refuses: an upstream's extra member, an MCP server's
// response without the structuredContent the schema requires, a recipe's
// output without room_id, a registered function's result without it.
const outputCheckEndpoints = `
endpoints:
  - method: QUERY
    path: /rooms/{room_id}
    description: Returns one room from the booking system.
    semantic: {intent: Return the room., actor: agent, outcome: The caller holds the room., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {room_id: {type: string}}, required: [room_id], additionalProperties: false}
    output_schema: {type: object, properties: {room_id: {type: string}}, required: [room_id], additionalProperties: false}
    errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
    handler: {type: external_service, url: "UPSTREAM/rooms/{room_id}", method: GET, timeout_seconds: 2}
  - method: EXECUTE
    path: /mcp-remote
    description: A remote MCP server's tools.
    semantic: {intent: Call a remote tool., actor: agent, outcome: The tool ran., capability: mechanics, confidence: 0.8, impact: reversible, is_idempotent: false}
    input_schema: {type: object, properties: {jsonrpc: {type: string}, id: {}, method: {type: string}, params: {type: object}}, additionalProperties: false}
    output_schema: {type: object, properties: {result: {type: object, required: [structuredContent]}}, required: [result]}
    errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
    handler: {type: external_service, url: "UPSTREAM/mcp", method: POST, timeout_seconds: 2}
  - method: QUERY
    path: /rates/{room_id}
    description: Returns a room's rate.
    semantic: {intent: Return the rate., actor: agent, outcome: The caller holds the rate., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {room_id: {type: string}}, required: [room_id], additionalProperties: false}
    output_schema: {type: object, properties: {room_id: {type: string}, rate: {type: integer}}, required: [room_id, rate]}
    errors: []
    handler: {type: registered_function, function: test.rates.get}
  - method: SUMMARIZE
    path: /room-briefs/{room_id}
    description: Summarizes one room.
    semantic: {intent: Summarize the room., actor: agent, outcome: The caller holds a brief of the room., capability: analysis, confidence: 0.8, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {room_id: {type: string}}, required: [room_id], additionalProperties: false}
    output_schema: {type: object, properties: {room_id: {type: string}}, required: [room_id]}
    errors: [composition_failed]
    handler: {type: composition, recipe: room-brief}
  - method: QUERY
    path: /drifting/{room_id}
    description: A function whose result drifted from its schema.
    semantic: {intent: Return the room., actor: agent, outcome: The caller holds the room., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {room_id: {type: string}}, required: [room_id], additionalProperties: false}
    output_schema: {type: object, properties: {room_id: {type: string}}, required: [room_id]}
    errors: []
    handler: {type: registered_function, function: test.drifting}
`

const roomBriefRecipe = `
recipe_name: room-brief
recipe_version: "1"
steps:
  - method: QUERY
    path: /rates/{room_id}
    input:
      room_id: {$from: input.room_id}
output:
  rate: {$from: steps.0.output.rate}
`

// newOutputCheckFixture is a pipeline over outputCheckEndpoints with the
// front door's default output check (frontdoor.DefaultConfig: sampled).
func newOutputCheckFixture(t *testing.T) *bndFixture {
	t.Helper()
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("frontdoor"), pki.Key("frontdoor"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mcp" {
			bndMCPServer(w, r)
			return
		}
		// Not the declared output: no room_id, and a member the schema forbids.
		_, _ = w.Write([]byte(`{"internal_cost": 1234}`))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	defs := strings.ReplaceAll(outputCheckEndpoints, "UPSTREAM", srv.URL)
	store := compiledStore(t, defs)
	identity := &bndIdentity{agents: map[string]*identityv1.AgentRecord{
		agentFull: {AgentId: agentFull, Status: identityv1.AgentStatus_AGENT_STATUS_ACTIVE, OwnerId: "owner"},
	}}
	f := &bndFixture{policy: &bndPolicy{}, audit: &bndAudit{}, store: store}
	identityClient := (&testkit.IdentityStub{ResolveAgentF: identity.ResolveAgent}).Serve(t)
	log := slog.New(slog.DiscardHandler)
	reg := handler.NewRegistry()
	reg.Register("test.rates.get", func(_ context.Context, call *handler.Call) (*handler.Result, error) {
		out, err := json.Marshal(map[string]any{"room_id": call.PathParams["room_id"], "rate": 120})
		return &handler.Result{Output: out}, err
	})
	reg.Register("test.drifting", func(context.Context, *handler.Call) (*handler.Result, error) {
		return &handler.Result{Output: json.RawMessage(`{"id":"r-1"}`)}, nil
	})
	recipes, err := composition.LoadFS(fstest.MapFS{"room-brief.yaml": {Data: []byte(roomBriefRecipe)}})
	if err != nil {
		t.Fatal(err)
	}
	up, err := upstream.New(upstream.Options{CAFile: pki.CA(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Close() })
	f.p, err = pipeline.New(pipeline.Options{ServerID: "agtp.test", RequestTimeout: 10 * time.Second, CallerProof: callerproof.Off,
		OutputCheck: outputcheck.New(outputcheck.Default)}, pipeline.Deps{
		Catalog:  store,
		Agents:   agentcache.New(identityClient, log),
		Policy:   (&testkit.PolicyStub{AuthorizeF: f.policy.Authorize}).Serve(t),
		Audit:    (&testkit.AuditStub{SignAndAppendF: f.audit.SignAndAppend}).Serve(t),
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

// TestUpstreamOutputAlwaysValidated: what an upstream, an MCP server bound
// as one, or a recipe returns is validated against the endpoint's
// output_schema on every call (500 output-invalid if not;
// docs/bindings.md), whatever AGTP_OUTPUT_VALIDATION says: the setting,
// sampled by default, covers the suite's own registered functions only
// (docs/frontdoor.md "Output validation"), whose results it still samples.
func TestUpstreamOutputAlwaysValidated(t *testing.T) {
	mcpCall := map[string]string{agtp.HeaderContentType: carried.MediaTypeMCPTools}
	for _, tc := range []struct {
		name, method, path string
		header             map[string]string
		body               string
	}{
		{"external_service", "QUERY", "/rooms/r-1", nil, ""},
		{"MCP server bound as an external service", "EXECUTE", "/mcp-remote", mcpCall,
			`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"weather","arguments":{}}}`},
		{"composition", "SUMMARIZE", "/room-briefs/r-1", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newOutputCheckFixture(t)
			for i := 1; i <= 3; i++ {
				r := f.do(t, agentFull, tc.method, tc.path, tc.header, tc.body)
				if r.status != 500 || r.body["reason"] != "output-invalid" {
					t.Fatalf("call %d: a result outside the output_schema answered %d %v; want 500 output-invalid", i, r.status, r.body)
				}
			}
		})
	}
	t.Run("registered function, sampled", func(t *testing.T) {
		f := newOutputCheckFixture(t)
		if r := f.do(t, agentFull, "QUERY", "/drifting/r-1", nil, ""); r.status != 500 || r.body["reason"] != "output-invalid" {
			t.Fatalf("first call: %d %v; want the first result validated, 500 output-invalid", r.status, r.body)
		}
		if r := f.do(t, agentFull, "QUERY", "/drifting/r-1", nil, ""); r.status != 200 {
			t.Fatalf("second call: %d %v; want 200, the result not sampled", r.status, r.body)
		}
	})
}
