package e2e

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
)

// TestDecisionOrder checks over the wire where in the decision order each
// refusal comes (docs/decisions.md#D-decision-order,
// docs/decisions.md#D-rcns-gate-order), against the suite's processes, so
// that a service can be stopped: the structural 404 and 405 need neither
// identitysvc nor rcnssvc. e2e/README.md maps the assertions to it.
func TestDecisionOrder(t *testing.T) {
	c := Start(t, Options{})
	negotiator := c.registerAgent(t, "order-negotiator", "orders:read", "documents:read", "rcns:negotiate")

	t.Run("the RCNS gate: a refused lock spends no negotiation rate; 262 before 429 before 461", func(t *testing.T) {
		// Narrowed by Authority-Scope, the same agent lacks rcns:negotiate:
		// more refusals than the rate limit allows (10 a minute) are all
		// 262, and the first evaluation past the locks is still a 461.
		for i := range 11 {
			r := c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1003", agtp.HeaderAgentID, negotiator,
				agtp.HeaderAllowRCNS, "true", agtp.HeaderAuthorityScope, "orders:read"))
			if r.Status != agtp.StatusAuthorizationRequired || errorBody(t, r)["scope"] != "rcns:negotiate" {
				t.Fatalf("refusal %d = %d %s, want 262 naming rcns:negotiate", i, r.Status, r.Body)
			}
		}
		if r := c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1003", agtp.HeaderAgentID, negotiator, agtp.HeaderAllowRCNS, "true")); r.Status != agtp.StatusRCNSContractAvailable {
			t.Fatalf("past the locks = %d %s, want 461", r.Status, r.Body)
		}
	})

	t.Run("a contract presented on another method is 405 naming its method, and runs on its own", func(t *testing.T) {
		gate := c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1001", agtp.HeaderAgentID, negotiator, agtp.HeaderAllowRCNS, "true"))
		id, _ := errorBody(t, gate)["synthesis_id"].(string)
		if gate.Status != agtp.StatusRCNSContractAvailable || id == "" {
			t.Fatalf("gate = %d %s", gate.Status, gate.Body)
		}
		other := c.roundTrip(t, request(t, "ANNOTATE", "/orders/ord-1001", agtp.HeaderAgentID, negotiator, agtp.HeaderContractSynthesized, id))
		body := errorBody(t, other)
		allowed, _ := body["allowed_methods_for_path"].([]any)
		if other.Status != agtp.StatusMethodNotAllowed || body["reason"] != "contract-method-mismatch" || !slices.Contains(allowed, any("SUMMARIZE")) || body["redirects_for_path"] == nil {
			t.Fatalf("on ANNOTATE = %d %s", other.Status, other.Body)
		}
		if run := c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1001", agtp.HeaderAgentID, negotiator, agtp.HeaderContractSynthesized, id)); run.Status != 200 {
			t.Fatalf("on its own method = %d %s", run.Status, run.Body)
		}
	})

	t.Run("api 100: the stale-contract sweep reports each contract's outcome", func(t *testing.T) {
		operator := c.registerAgent(t, "order-operator", "inspect:all")
		r := c.roundTrip(t, withJSON(request(t, "REVOKE", "/", agtp.HeaderAgentID, operator), `{"target":"stale-contracts","mode":"grandfather","actor":"ops"}`))
		body := errorBody(t, r)
		contracts, _ := body["contracts"].([]any)
		if r.Status != 200 || body["mode"] != "grandfather" || len(contracts) == 0 {
			t.Fatalf("sweep = %d %s", r.Status, r.Body)
		}
		for _, x := range contracts {
			m, _ := x.(map[string]any)
			if m["outcome"] != "unchanged" || m["synthesis_id"] == "" || m["recipe_version"] == nil || m["current_version"] != m["recipe_version"] {
				t.Fatalf("contract %v in %s", m, r.Body)
			}
		}
	})

	t.Run("PROPOSE answers a malformed proposal 400 with the violations, never 422", func(t *testing.T) {
		r := c.roundTrip(t, withJSON(request(t, "PROPOSE", "/", agtp.HeaderAgentID, negotiator), `{"endpoint":"SUMMARIZE /order-digest"}`))
		if r.Status != agtp.StatusBadRequest || errorBody(t, r)["violations"] == nil {
			t.Fatalf("PROPOSE = %d %s, want 400 with violations", r.Status, r.Body)
		}
	})

	t.Run("core 50: Delegation-Chain's 501 comes after 459, 460 and 404", func(t *testing.T) {
		for _, tc := range []struct {
			method, target string
			status         int
		}{
			{"FROB", "/orders", agtp.StatusMethodViolation},
			{"QUERY", "/orders/", agtp.StatusEndpointViolation},
			{"QUERY", "/nowhere-at-all", agtp.StatusNotFound},
			{"DISCOVER", "/", agtp.StatusNotImplemented},
		} {
			r := c.roundTrip(t, request(t, tc.method, tc.target, agtp.HeaderDelegationChain, "x"))
			if r.Status != tc.status {
				t.Fatalf("%s %s with Delegation-Chain = %d %s, want %d", tc.method, tc.target, r.Status, r.Body, tc.status)
			}
		}
	})

	t.Run("with rcnssvc stopped, an unmatched request is still 404 or 405", func(t *testing.T) {
		c.Stop("rcnssvc", syscall.SIGKILL)
		session := "sess-" + strings.Repeat("7b", 12)
		for _, tc := range []struct {
			name, method, target string
			headers              []string
			status               int
		}{
			{"unknown path", "QUERY", "/nowhere-at-all", nil, agtp.StatusNotFound},
			{"path under other methods", "SUMMARIZE", "/orders/ord-1002", nil, agtp.StatusMethodNotAllowed},
			{"unknown path in a session", "QUERY", "/nowhere-at-all", []string{agtp.HeaderSessionID, session}, agtp.StatusNotFound},
			{"path under other methods in a session", "SUMMARIZE", "/orders/ord-1002", []string{agtp.HeaderSessionID, session}, agtp.StatusMethodNotAllowed},
			{"a caller that asked for RCNS learns of the outage", "SUMMARIZE", "/orders/ord-1002", []string{agtp.HeaderAllowRCNS, "true"}, agtp.StatusUnavailable},
		} {
			headers := append([]string{agtp.HeaderAgentID, negotiator}, tc.headers...)
			r := c.roundTrip(t, request(t, tc.method, tc.target, headers...))
			if r.Status != tc.status {
				t.Fatalf("%s: %d %s, want %d", tc.name, r.Status, r.Body, tc.status)
			}
			if r.Header.Get(agtp.HeaderServerID) == "" || r.Header.Get(agtp.HeaderAttributionRecord) == "" {
				t.Fatalf("%s: answer without Server-ID or Attribution-Record: %v", tc.name, r.Header)
			}
		}
	})
}

// api 90: a front door without rcnssvc answers Allow-RCNS: true with 464
// rcns-disabled and an RCNS-Attempt-Id; without the header the pair is
// 404 (api 89).
func TestAllowRCNSWithoutRCNSService(t *testing.T) {
	c := Start(t, Options{Services: []string{"catalogsvc", "policysvc", "identitysvc", "auditsvc", "frontdoor"}})
	agent := c.registerAgent(t, "no-rcns-negotiator", "orders:read", "rcns:negotiate")
	r := c.roundTrip(t, request(t, "SUMMARIZE", "/nowhere-at-all", agtp.HeaderAgentID, agent, agtp.HeaderAllowRCNS, "true"))
	if r.Status != agtp.StatusRCNSNoContract || errorBody(t, r)["reason"] != "rcns-disabled" || r.Header.Get(agtp.HeaderRCNSAttemptID) == "" {
		t.Fatalf("Allow-RCNS without rcnssvc = %d %s %v", r.Status, r.Body, r.Header)
	}
	if r := c.roundTrip(t, request(t, "SUMMARIZE", "/nowhere-at-all", agtp.HeaderAgentID, agent)); r.Status != agtp.StatusNotFound {
		t.Fatalf("without Allow-RCNS = %d %s", r.Status, r.Body)
	}
}
