package server

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// proposeStatuses are the only statuses PROPOSE may answer with (core
// §7.2.7; core assertion 88), plus 429 for the negotiation limit.
var proposeStatuses = []int32{261, 262, 263, 400, 429, 459, 460, 463}

func reader() *rcnsv1.Caller { return caller(agentX, sessionA, 1, "orders:read") }

// api assertion 78 (AGTP-API §8.7).
func TestProposeWithSynthesisDisabledIs463SynthesisDisabled(t *testing.T) {
	pol := defaultPolicies()
	pol.SynthesisEnabled = false
	e := newEnv(t, envConfig{policies: pol})
	resp, b := e.propose(reader(), orderSummary(), "")
	if resp.GetStatus() != 463 || b["reason"] != "synthesis-disabled" || b["explanation"] == "" {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
}

// api assertion 79 (AGTP-API §10.4.2) and the core parameter sets
// (docs/decisions.md#D-propose-forms): more than one body form is 400
// ambiguous-body.
func TestProposeWithTwoBodyFormsIs400AmbiguousBody(t *testing.T) {
	e := newEnv(t, envConfig{})
	ep := orderSummaryEndpoint()
	for name, params := range map[string]map[string]any{
		"endpoint and name":             {"endpoint": ep, "name": "summary"},
		"endpoint and proposal":         {"endpoint": ep, "proposal": ep},
		"proposal and proposed_method":  {"proposal": ep, "proposed_method": "SUMMARIZE", "signature": map[string]any{}, "intent": "x"},
		"legacy fields and proposal":    {"method": "SUMMARIZE", "path": "/orders/{order_id}", "proposal": ep},
		"endpoint and proposed_method ": {"endpoint": ep, "proposed_method": "SUMMARIZE"},
	} {
		t.Run(name, func(t *testing.T) {
			resp, b := e.propose(reader(), params, "")
			if resp.GetStatus() != 400 || b["reason"] != "ambiguous-body" {
				t.Fatalf("got %d %v", resp.GetStatus(), b)
			}
		})
	}
}

func toStrings(v any) []string {
	var out []string
	arr, _ := v.([]any)
	for _, x := range arr {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// core §7.4.1: at most three turns per Negotiation-ID; then ESCALATE.
func TestProposeFourthTurnIs463Escalate(t *testing.T) {
	e := newEnv(t, envConfig{})
	bad := orderSummaryEndpoint()
	bad["path"] = "/nothing/{order_id}"
	resp, _ := e.propose(reader(), map[string]any{"endpoint": bad}, "")
	negID := resp.GetNegotiationId()
	if canonicalUUID(negID) == "" {
		t.Fatalf("minted Negotiation-ID %q is not a UUID", negID)
	}
	for turn := 2; turn <= 3; turn++ {
		r, b := e.propose(reader(), map[string]any{"endpoint": bad}, negID)
		if r.GetStatus() != 463 || b["reason"] != "composition-impossible" || r.GetNegotiationId() != negID || b["turn"] != float64(turn) {
			t.Fatalf("turn %d: %d %v", turn, r.GetStatus(), b)
		}
	}
	r, b := e.propose(reader(), orderSummary(), negID)
	if r.GetStatus() != 463 || b["reason"] != "policy-refused" || b["escalate"] != true {
		t.Fatalf("turn 4: %d %v", r.GetStatus(), b)
	}
	// Another agent's negotiation with the same ID is its own.
	if r, _ := e.propose(caller(agentY, sessionA, 1, "orders:read"), orderSummary(), negID); r.GetStatus() != 263 {
		t.Fatalf("agent Y: %d", r.GetStatus())
	}
}

// core §5.6 261 and §11.3: a slow evaluation answers 261 with a
// proposal_id and the Negotiation-ID; polling gives the 263.
func TestProposeSlowEvaluationIs261ThenPollable(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, envConfig{opts: func(o *Options) { o.Propose.AsyncAfter = 50 * time.Millisecond }})
	e.catalog.put = func(*catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error) {
		<-release
		return &catalogv1.PutEndpointResponse{ApiVersion: "1.0.9"}, nil
	}
	params := orderSummary()
	params["persistent"] = true
	c := caller(agentX, sessionA, 1, "orders:read", "rcns:persist")
	resp, b := e.propose(c, params, "")
	if resp.GetStatus() != 261 || resp.GetOutcome() != rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_IN_PROGRESS {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
	pid, _ := b["proposal_id"].(string)
	if pid == "" || resp.GetProposalId() != pid || b["estimated_seconds"] == nil || resp.GetNegotiationId() == "" {
		t.Fatalf("261 body %v", b)
	}
	poll := func(agent string) (*rcnsv1.GetProposalResponse, error) {
		return e.client.GetProposal(context.Background(), &rcnsv1.GetProposalRequest{ProposalId: pid, AgentId: agent})
	}
	if r, err := poll(agentX); err != nil || r.GetResult().GetStatus() != 261 {
		t.Fatalf("pending poll: %v %v", r, err)
	}
	if _, err := poll(agentY); status.Code(err) != codes.NotFound {
		t.Fatalf("another agent polled it: %v", err)
	}
	close(release)
	var final *rcnsv1.ProposeResponse
	testkit.WaitFor(t, 5*time.Second, "the proposal result", func() bool {
		r, err := poll(agentX)
		if err == nil && r.GetResult().GetStatus() != 261 {
			final = r.GetResult()
			return true
		}
		return false
	})
	fb := body(t, []byte(final.GetBody()))
	if final.GetStatus() != 263 || fb["persistent"] != true || fb["negotiation_id"] != resp.GetNegotiationId() {
		t.Fatalf("final %d %v", final.GetStatus(), fb)
	}
	if r := e.resolve(c, "SUMMARIZE", "/orders/o-1"); r.GetStatus() != 0 {
		t.Fatalf("the asynchronously approved endpoint does not resolve: %d", r.GetStatus())
	}
}

// The negotiation limit applies to PROPOSE too (policysvc's "rcns" scope).
func TestProposeOverTheNegotiationLimitIs429(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.policy.check = countingLimit(2)
	for i := 0; i < 2; i++ {
		if r, _ := e.propose(reader(), orderSummary(), ""); r.GetStatus() != 263 {
			t.Fatalf("proposal %d: %d", i, r.GetStatus())
		}
	}
	r, b := e.propose(reader(), orderSummary(), "")
	if r.GetStatus() != 429 || b["scope"] != "rcns" || b["retry_after_seconds"] != 42.0 {
		t.Fatalf("got %d %v", r.GetStatus(), b)
	}
	if r, _ := e.propose(caller(agentY, sessionA, 1, "orders:read"), orderSummary(), ""); r.GetStatus() != 263 {
		t.Fatalf("another agent was limited: %d", r.GetStatus())
	}
}

// core assertions 88-91: whatever the proposal, PROPOSE answers
// with a PROPOSE status (never 200), 463 with a five-value reason and an
// explanation, 263 with synthesis_id and expires_at, 261 with proposal_id.
func TestProposeAnswersOnlyProposeStatuses(t *testing.T) {
	e := newEnv(t, envConfig{})
	inputs := []string{
		`{}`, `[]`, `null`, `"x"`, `{"endpoint":7}`, `{"endpoint":{}}`, `{"proposal":{"method":"SUMMARIZE"}}`,
		`{"proposed_method":"SUMMARIZE","intent":"x","signature":{"path":"/orders/{order_id}"}}`,
		`{"endpoint":{"method":"SUMMARIZE","path":"/orders/{order_id}","semantic":"x"}}`,
		`{"persistent":"yes","endpoint":{}}`, `{"requested_duration":"forever","endpoint":{}}`,
	}
	for _, in := range inputs {
		resp, b := e.propose(reader(), in, "")
		if !slices.Contains(proposeStatuses, resp.GetStatus()) || b["status"] != float64(resp.GetStatus()) {
			t.Errorf("%s: status %d body %v", in, resp.GetStatus(), b)
		}
		switch resp.GetStatus() {
		case 463:
			if !slices.Contains([]string{"out-of-scope", "policy-refused", "composition-impossible", "ambiguous", "synthesis-disabled"}, fmt.Sprint(b["reason"])) || b["explanation"] == "" {
				t.Errorf("%s: 463 body %v", in, b)
			}
		case 263:
			if b["synthesis_id"] == nil || b["expires_at"] == nil {
				t.Errorf("%s: 263 body %v", in, b)
			}
		}
	}
}

// Many agents negotiate at once: every proposal is approved with its own
// synthesis_id, and each agent lists exactly its own contracts.
func TestConcurrentProposalsFromManyAgents(t *testing.T) {
	e := newEnv(t, envConfig{})
	const agents, each = 40, 4
	var mu sync.Mutex
	ids := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, agents*each)
	for a := 0; a < agents; a++ {
		for k := 0; k < each; k++ {
			wg.Go(func() {
				agent := agentN(a)
				resp, err := e.client.Propose(context.Background(), &rcnsv1.ProposeRequest{Caller: caller(agent, sessionA, 1, "orders:read"), Parameters: string(mustJSON(orderSummary()))})
				if err != nil || resp.GetStatus() != 263 {
					errs <- fmt.Errorf("agent %d: %v %v", a, err, resp.GetStatus())
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if _, dup := ids[resp.GetContract().GetSynthesisId()]; dup {
					errs <- fmt.Errorf("synthesis_id reused")
				}
				ids[resp.GetContract().GetSynthesisId()] = agent
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(ids) != agents*each {
		t.Fatalf("%d contracts, want %d", len(ids), agents*each)
	}
	for a := 0; a < agents; a++ {
		r, err := e.client.ListContracts(context.Background(), &rcnsv1.ListContractsRequest{Caller: caller(agentN(a), sessionA, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetContracts()) != each {
			t.Fatalf("agent %d lists %d contracts", a, len(r.GetContracts()))
		}
		for _, c := range r.GetContracts() {
			if ids[c.GetSynthesisId()] != agentN(a) {
				t.Fatalf("agent %d lists another agent's contract", a)
			}
		}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// The registered capability surface is the catalog's current snapshot:
// when a composed step leaves the catalog, its composition is refused, and
// the synthesis_enabled switch follows the manifest.
func TestCatalogChangesAreFollowed(t *testing.T) {
	e := newEnv(t, envConfig{})
	snap := demoSnapshot(t, defaultPolicies(), nil)
	snap.Revision = 2
	var kept []*catalogv1.Endpoint
	for _, ep := range snap.GetEndpoints() {
		if !(ep.GetMethod() == "QUERY" && ep.GetPath() == "/orders/{order_id}") {
			kept = append(kept, ep)
		}
	}
	snap.Endpoints = kept
	e.catalog.setSnapshot(snap)
	testkit.WaitFor(t, 5*time.Second, "snapshot 2", func() bool { return e.srv.cat.Load().snap.GetRevision() == 2 })
	resp, b := e.propose(reader(), orderSummary(), "")
	if resp.GetStatus() != 463 || b["reason"] != "composition-impossible" || !strings.Contains(fmt.Sprint(b["explanation"]), "QUERY /orders/{order_id}") {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
	snap3 := demoSnapshot(t, &catalogv1.ManifestPolicies{SynthesisEnabled: false}, nil)
	snap3.Revision = 3
	e.catalog.setSnapshot(snap3)
	testkit.WaitFor(t, 5*time.Second, "snapshot 3", func() bool { return e.srv.cat.Load().snap.GetRevision() == 3 })
	if resp, b := e.propose(reader(), orderSummary(), ""); resp.GetStatus() != 463 || b["reason"] != "synthesis-disabled" {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
}
