package server

import (
	"testing"
)

// Core §7.2.7 and §7.5.3 parameter sets (docs/decisions.md#D-propose-forms):
// both are served.
func TestProposeCoreParameterSets(t *testing.T) {
	e := newEnv(t, envConfig{})
	t.Run("7.5.3 proposal", func(t *testing.T) {
		resp, b := e.propose(reader(), map[string]any{"proposal": orderSummaryEndpoint(), "session_id": sessionA, "requested_duration": "30m", "scope_requested": []string{"orders:read"}}, "")
		if resp.GetStatus() != 263 || b["granted_duration"] != "30m" {
			t.Fatalf("got %d %v", resp.GetStatus(), b)
		}
	})
	t.Run("7.2.7 signature with path", func(t *testing.T) {
		resp, b := e.propose(reader(), map[string]any{
			"proposed_method": "SUMMARIZE", "intent": "Summarize an order for me.", "contract_version": "AGTP-API/1.0",
			"signature": map[string]any{"path": "/orders/{order_id}", "params": map[string]any{"order_id": map[string]any{"type": "string"}}, "outcome": "I hold a summary."},
		}, "")
		if resp.GetStatus() != 263 || b["path"] != "/orders/{order_id}" {
			t.Fatalf("got %d %v", resp.GetStatus(), b)
		}
		sem := b["instantiated_endpoint"].(map[string]any)["semantic"].(map[string]any)
		if sem["intent"] != "Summarize an order for me." || sem["outcome"] != "I hold a summary." {
			t.Errorf("semantic %v", sem)
		}
	})
	t.Run("7.2.7 signature without path is ambiguous", func(t *testing.T) {
		resp, b := e.propose(reader(), map[string]any{"proposed_method": "SUMMARIZE", "intent": "Summarize something.", "signature": map[string]any{}}, "")
		if resp.GetStatus() != 463 || b["reason"] != "ambiguous" {
			t.Fatalf("got %d %v", resp.GetStatus(), b)
		}
		if c, _ := b["candidates"].([]any); len(c) != 2 || b["counter_proposal"] == nil {
			t.Errorf("candidates %v", b["candidates"])
		}
	})
	t.Run("7.2.7 unsupported contract version", func(t *testing.T) {
		resp, b := e.propose(reader(), map[string]any{"proposed_method": "SUMMARIZE", "intent": "x", "signature": map[string]any{}, "contract_version": "AGTP-API/2.0"}, "")
		if resp.GetStatus() != 400 {
			t.Fatalf("got %d %v", resp.GetStatus(), b)
		}
	})
	t.Run("legacy form", func(t *testing.T) {
		params := orderSummaryEndpoint()
		params["name"] = "order summary"
		params["handler"] = map[string]any{"type": "external_service", "url": "https://evil.example"}
		resp, b := e.propose(reader(), params, "")
		if resp.GetStatus() != 263 {
			t.Fatalf("got %d %v", resp.GetStatus(), b)
		}
		if h := b["endpoint"].(map[string]any)["handler"].(map[string]any); h["type"] != "composition" {
			t.Errorf("a proposed handler was honoured: %v", h)
		}
	})
}
