package pipeline_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
)

// documentEndpoints are the built-ins whose documents are encoded once
// per catalog revision, with the definitions catalogsvc gives them.
const documentEndpoints = `
endpoints:
  - method: DESCRIBE
    path: /
    description: Returns this server's capability document.
    semantic: {intent: Describe the server., actor: agent, outcome: The caller holds its capabilities., capability: discovery, confidence: 1.0, impact: informational, is_idempotent: true}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: object, additionalProperties: true}
    errors: []
    handler: {type: registered_function, function: agtp.builtin.describe.server}
    anonymous: true
  - method: DISCOVER
    path: /methods
    description: Lists all registered endpoints on this server.
    semantic: {intent: List every endpoint., actor: agent, outcome: The caller holds every endpoint., capability: discovery, confidence: 1.0, impact: informational, is_idempotent: true}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: array, items: {type: object}}
    errors: []
    handler: {type: registered_function, function: agtp.builtin.discover.methods}
    anonymous: true
`

const cartEndpoint = `
  - method: QUERY
    path: /carts/{cart_id}
    description: Returns a cart.
    semantic: {intent: Return the cart., actor: agent, outcome: The caller holds the cart., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {cart_id: {type: string}}, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.notes.get}
`

func documentSnapshot(t *testing.T, revision uint64, version, defs string) *catalogv1.Snapshot {
	t.Helper()
	eps, err := endpoint.ParseAndCompile("endpoints.yaml", []byte(defs), endpoint.FormatYAML,
		endpoint.Context{InheritCapability: true, AllowReserved: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	snap := &catalogv1.Snapshot{Revision: revision, CatalogVersion: version, ApiVersion: "1.0.0"}
	for _, ep := range eps {
		snap.Endpoints = append(snap.Endpoints, ep.Proto(catalogv1.EndpointTier_ENDPOINT_TIER_A))
	}
	return snap
}

// TestCatalogDocumentsFollowTheRevision: DESCRIBE / and DISCOVER /methods
// are encoded once per catalog revision, and a new revision is what the
// next request sees.
func TestCatalogDocumentsFollowTheRevision(t *testing.T) {
	var store *catalogstate.Store
	f := newStageFixture(t, func(_ *stageFixture, _ *pipeline.Options, s *catalogstate.Store) {
		store = s
		if err := s.Set(documentSnapshot(t, 1, "1.0.0", documentEndpoints)); err != nil {
			t.Fatal(err)
		}
	})
	check := func(version string, wantCarts bool) {
		t.Helper()
		for range 2 { // the second answer comes from the encoded bytes
			resp, body := f.do(t, stageRequest("DESCRIBE", "/", ""))
			if resp.Status != 200 || body["catalog_version"] != version {
				t.Fatalf("DESCRIBE /: %d %v, want catalog_version %s", resp.Status, body, version)
			}
			resp = f.p.ServeAGTP(t.Context(), stageConn(), stageRequest("DISCOVER", "/methods", ""))
			var listed []struct {
				Path string `json:"path"`
			}
			if err := json.Unmarshal(resp.Body, &listed); resp.Status != 200 || err != nil {
				t.Fatalf("DISCOVER /methods: %d %s %v", resp.Status, resp.Body, err)
			}
			if got := slices.ContainsFunc(listed, func(m struct {
				Path string `json:"path"`
			}) bool {
				return m.Path == "/carts/{cart_id}"
			}); got != wantCarts {
				t.Fatalf("DISCOVER /methods %s, want /carts/{cart_id} listed %v", resp.Body, wantCarts)
			}
		}
	}
	check("1.0.0", false)
	if err := store.Set(documentSnapshot(t, 2, "1.1.0", documentEndpoints+cartEndpoint)); err != nil {
		t.Fatal(err)
	}
	check("1.1.0", true)
}
