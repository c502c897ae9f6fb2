package server

import (
	"testing"
)

// api assertion 85 (AGTP-API §10.6) and core §5.6: 463
// composition-impossible with an explanation and a counter-proposal
// referencing a composable endpoint; the counter-proposal, proposed as it
// is, is approved.
func TestProposeUncomposableIs463WithCounterProposal(t *testing.T) {
	e := newEnv(t, envConfig{})
	ep := orderSummaryEndpoint()
	ep["method"] = "SUMMARIZE"
	ep["path"] = "/orders/{order_id}/history"
	resp, b := e.propose(reader(), map[string]any{"endpoint": ep}, "")
	if resp.GetStatus() != 463 || b["reason"] != "composition-impossible" || b["explanation"] == "" {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
	counter, ok := b["counter_proposal"].(map[string]any)
	if !ok || counter["method"] != "SUMMARIZE" || counter["path"] != "/orders/{order_id}" {
		t.Fatalf("counter_proposal = %v", b["counter_proposal"])
	}
	if sim, _ := b["similar_endpoints"].([]any); len(sim) == 0 {
		t.Errorf("no similar_endpoints from the manifest: %v", b)
	}
	resp2, b2 := e.propose(reader(), map[string]any{"endpoint": counter["endpoint"]}, resp.GetNegotiationId())
	if resp2.GetStatus() != 263 {
		t.Fatalf("the counter-proposal itself was refused: %d %v", resp2.GetStatus(), b2)
	}
}
