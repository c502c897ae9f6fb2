package server

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
)

// api assertion 87, core assertion 90 (263 has synthesis_id and
// expires_at) and the core 263 example's shape
// (docs/decisions.md#D-propose-forms: emit both).
func TestProposeComposableIs263WithBothShapes(t *testing.T) {
	e := newEnv(t, envConfig{})
	resp, b := e.propose(reader(), orderSummary(), "")
	if resp.GetStatus() != 263 || resp.GetOutcome() != rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_APPROVED {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
	if b["status"] != 263.0 || b["method"] != "SUMMARIZE" || b["path"] != "/orders/{order_id}" {
		t.Errorf("method/path/status: %v", b)
	}
	id, _ := b["synthesis_id"].(string)
	if !validID(prefixSynthesis, id) || resp.GetContract().GetSynthesisId() != id {
		t.Errorf("synthesis_id %q, contract %q", id, resp.GetContract().GetSynthesisId())
	}
	if _, err := time.Parse(time.RFC3339, fmt.Sprint(b["expires_at"])); err != nil {
		t.Errorf("expires_at %v: %v", b["expires_at"], err)
	}
	lin, _ := b["recipe_lineage"].(map[string]any)
	if lin["recipe_name"] != "order-summary" || lin["recipe_version"] != "1" {
		t.Errorf("recipe_lineage %v", lin)
	}
	epm, _ := b["endpoint"].(map[string]any)
	handler, _ := epm["handler"].(map[string]any)
	if epm["method"] != "SUMMARIZE" || handler["type"] != "composition" || !slices.Contains(toStrings(epm["errors"]), "composition_failed") {
		t.Errorf("endpoint %v", epm)
	}
	if !slices.Contains(toStrings(epm["required_scopes"]), "orders:read") {
		t.Errorf("the composite does not require its steps' scopes: %v", epm["required_scopes"])
	}
	// The front door compiles the contract's endpoint like any snapshot endpoint.
	if ep, err := endpoint.FromJSON([]byte(resp.GetContract().GetEndpoint())); err != nil || ep.Def.Handler.Recipe != "order-summary" {
		t.Errorf("endpoint.FromJSON(endpoint): %v", err)
	}
	//lint:ignore SA1019 the first release's fields must still carry the same documents
	if c := resp.GetContract(); string(c.GetEndpointJson()) != c.GetEndpoint() || string(c.GetRecipeJson()) != c.GetRecipe() || string(resp.GetBodyJson()) != resp.GetBody() {
		t.Errorf("the deprecated bytes fields differ from the strings")
	}
	inst, _ := b["instantiated_endpoint"].(map[string]any)
	if inst["proposed"] != true || inst["expires"] != "session" || inst["input"] == nil || inst["output"] == nil || inst["semantic"] == nil {
		t.Errorf("instantiated_endpoint %v", inst)
	}
	if b["negotiation_id"] == "" || b["negotiation_origin"] != "propose" || !hex64.MatchString(fmt.Sprint(b["contract_hash"])) {
		t.Errorf("negotiation_id/origin/hash: %v", b)
	}
	if b["persistent"] != false || b["granted_duration"] != "1h" {
		t.Errorf("persistent/granted_duration: %v %v", b["persistent"], b["granted_duration"])
	}
	// Accepted synthesis is on the originator's lifecycle stream (core §7.2.7).
	if e.audit.count(agentX, eventAccepted, id) != 1 {
		t.Errorf("rcns_propose_accepted events: %v", e.audit.of(agentX))
	}
}

// api assertion 88 and companions assertion 20: the synthesized
// endpoint resolves at once for its agent in its session, by the bare
// (method, path) and by its synthesis_id; not in another session, and not
// for another agent.
func TestProposedEndpointIsCallableAtOnceInTheSameSessionOnly(t *testing.T) {
	e := newEnv(t, envConfig{})
	resp, _ := e.propose(reader(), orderSummary(), "")
	id := resp.GetContract().GetSynthesisId()
	if r := e.resolve(reader(), "SUMMARIZE", "/orders/o-17"); r.GetStatus() != 0 || r.GetContract().GetSynthesisId() != id {
		t.Fatalf("same session: %d %v", r.GetStatus(), r.GetContract())
	}
	if r := e.present(reader(), id); r.GetStatus() != 0 || state(r.GetContract()) != stateActive {
		t.Fatalf("presented: %d %s", r.GetStatus(), r.GetReason())
	}
	other := caller(agentX, sessionB, 1, "orders:read")
	if r := e.resolve(other, "SUMMARIZE", "/orders/o-17"); r.GetStatus() != 404 || r.GetContract() != nil {
		t.Fatalf("another session resolved it: %d", r.GetStatus())
	}
	if r := e.present(other, id); r.GetStatus() != 404 {
		t.Fatalf("another session presented it: %d %s", r.GetStatus(), r.GetReason())
	}
	if r := e.resolve(caller(agentY, sessionA, 1, "orders:read"), "SUMMARIZE", "/orders/o-17"); r.GetStatus() != 404 {
		t.Fatalf("another agent resolved it: %d", r.GetStatus())
	}
	if r := e.resolve(reader(), "SUMMARIZE", "/orders/o-17/extra"); r.GetStatus() != 404 {
		t.Fatalf("a longer path resolved: %d", r.GetStatus())
	}
}

// core §7.5.5: persistence needs higher authorization; granted, the
// endpoint is promoted into the catalog as Tier C (so AGTP-API-Version
// bumps) and leaves it when revoked.
func TestProposePersistent(t *testing.T) {
	e := newEnv(t, envConfig{})
	params := orderSummary()
	params["persistent"] = true
	resp, b := e.propose(reader(), params, "")
	if resp.GetStatus() != 263 || b["persistent"] != false || b["persistent_refused"] == nil {
		t.Fatalf("ungranted: %d %v", resp.GetStatus(), b)
	}
	if len(e.catalog.puts) != 0 {
		t.Fatal("an ungranted persistent proposal reached the catalog")
	}
	resp, b = e.propose(caller(agentX, sessionA, 1, "orders:read", "rcns:persist"), params, "")
	if resp.GetStatus() != 263 || b["persistent"] != true || b["agtp_api_version"] != "1.0.2" {
		t.Fatalf("granted: %d %v", resp.GetStatus(), b)
	}
	if len(e.catalog.puts) != 1 || e.catalog.puts[0].GetTier() != catalogv1.EndpointTier_ENDPOINT_TIER_C {
		t.Fatalf("catalog puts %v", e.catalog.puts)
	}
	put := e.catalog.puts[0].GetDefinition().AsMap()
	if put["method"] != "SUMMARIZE" || put["path"] != "/orders/{order_id}" {
		t.Errorf("promoted definition %v", put)
	}
	// Persistent contracts are not bound to the session.
	if r := e.resolve(caller(agentX, sessionB, 1, "orders:read"), "SUMMARIZE", "/orders/o-1"); r.GetStatus() != 0 || !r.GetContract().GetPersistent() {
		t.Fatalf("persistent contract in another session: %d", r.GetStatus())
	}
	id := resp.GetContract().GetSynthesisId()
	if _, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: reader(), SynthesisId: id}); err != nil {
		t.Fatal(err)
	}
	if len(e.catalog.delete) != 1 || e.catalog.delete[0].GetPath() != "/orders/{order_id}" {
		t.Fatalf("catalog deletes %v", e.catalog.delete)
	}
	// A refused promotion keeps the synthesis (AGTP-API §10.8).
	e.catalog.put = func(*catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error) {
		return nil, status.Error(codes.FailedPrecondition, "endpoint-conflict")
	}
	resp, b = e.propose(caller(agentX, sessionA, 1, "orders:read", "rcns:persist"), params, "")
	if resp.GetStatus() != 263 || b["persistent"] != false || b["persistent_refused"] == nil {
		t.Fatalf("refused promotion: %d %v", resp.GetStatus(), b)
	}
}

// An agent's live contracts are capped; releasing one frees a slot.
func TestContractCapPerAgent(t *testing.T) {
	e := newEnv(t, envConfig{opts: func(o *Options) { o.Contracts.MaxPerAgent = 2 }})
	var first string
	for i := 0; i < 2; i++ {
		r, _ := e.propose(reader(), orderSummary(), "")
		if r.GetStatus() != 263 {
			t.Fatalf("proposal %d: %d", i, r.GetStatus())
		}
		if first == "" {
			first = r.GetContract().GetSynthesisId()
		}
	}
	r, b := e.propose(reader(), orderSummary(), "")
	if r.GetStatus() != 463 || b["reason"] != "policy-refused" {
		t.Fatalf("over the cap: %d %v", r.GetStatus(), b)
	}
	if _, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: reader(), SynthesisId: first, Release: true}); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.propose(reader(), orderSummary(), ""); r.GetStatus() != 263 {
		t.Fatalf("after a release: %d", r.GetStatus())
	}
}

// No unaudited contract: when the audit service refuses the accepted
// event, the contract is taken back and the caller gets an error.
func TestProposeWithAuditDownLeavesNoContract(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.audit.fail = func(*auditv1AppendReq) error { return status.Error(codes.Unavailable, "down") }
	_, err := e.client.Propose(context.Background(), &rcnsv1.ProposeRequest{Caller: reader(), Parameters: string(mustJSON(orderSummary()))})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v", err)
	}
	r, err := e.client.ListContracts(context.Background(), &rcnsv1.ListContractsRequest{Caller: reader()})
	if err != nil || len(r.GetContracts()) != 0 {
		t.Fatalf("contracts after a refused audit: %v %v", r.GetContracts(), err)
	}
}

// A front door of the first release sends the parameters only as
// parameters_json; the proposal is evaluated the same.
func TestProposeFromAFirstReleaseFrontDoor(t *testing.T) {
	e := newEnv(t, envConfig{})
	//lint:ignore SA1019 the first release's field must still be honoured
	resp, err := e.client.Propose(context.Background(), &rcnsv1.ProposeRequest{Caller: reader(), ParametersJson: mustJSON(orderSummary())})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOutcome() != rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_APPROVED || resp.GetContract().GetEndpoint() == "" || resp.GetBody() == "" {
		t.Fatalf("Propose with parameters_json: %v", resp)
	}
}
