package server

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/testkit"
)

func rcnsOn(mode string) func(*Options) {
	return func(o *Options) {
		o.RCNS.Enabled = true
		o.RCNS.Mode = mode
		o.RCNS.MinTrustTier = 2
	}
}

// negotiator holds rcns:negotiate and the steps' scope.
func negotiator(agent string) *rcnsv1.Caller {
	return caller(agent, sessionA, 1, "rcns:negotiate", "orders:read")
}

func (e *env) attempt(id string) map[string]any {
	e.t.Helper()
	r, err := e.client.GetAttempt(context.Background(), &rcnsv1.GetAttemptRequest{AttemptId: id})
	if err != nil {
		e.t.Fatalf("GetAttempt %q: %v", id, err)
	}
	var m map[string]any
	//lint:ignore SA1019 the first release's field must still carry the attempt
	if err := json.Unmarshal(r.GetAttemptJson(), &m); err != nil {
		e.t.Fatal(err)
	}
	if got := r.GetAttempt().AsMap(); !reflect.DeepEqual(got, m) {
		e.t.Fatalf("attempt: the Struct %v, the JSON bytes %v", got, m)
	}
	return m
}

// api assertion 90, core assertion 101: RCNS disabled is 464
// rcns-disabled with an RCNS-Attempt-Id that INSPECT reads back.
func TestGateWithRCNSDisabledIs464WithAttempt(t *testing.T) {
	e := newEnv(t, envConfig{})
	r := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest")
	if r.GetOutcome() != rcnsv1.GateOutcome_GATE_OUTCOME_NO_CONTRACT || r.GetStatus() != 464 || r.GetReason() != "rcns-disabled" || r.GetAttemptId() == "" {
		t.Fatalf("got %v", r)
	}
	a := e.attempt(r.GetAttemptId())
	locks, _ := a["locks"].(map[string]any)
	if a["method"] != "SUMMARIZE" || a["path"] != "/order-digest" || a["agent_id"] != agentX || a["reason"] != "rcns-disabled" ||
		locks["rcns_enabled"] != "closed" || locks["allow_rcns"] != "open" || locks["scope"] != "not-evaluated" || a["trust_tier"] != 1.0 {
		t.Fatalf("attempt %v", a)
	}
}

// api assertion 91 (AGTP-API §10.1.2, lock 3).
func TestGateWithoutNegotiateScopeIs262(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeConfirmFirst)})
	r := e.gate(caller(agentX, sessionA, 1, "orders:read"), "SUMMARIZE", "/order-digest")
	if r.GetOutcome() != rcnsv1.GateOutcome_GATE_OUTCOME_AUTHORIZATION_REQUIRED || r.GetStatus() != 262 || r.GetReason() != "scope-required" || r.GetScope() != "rcns:negotiate" {
		t.Fatalf("got %v", r)
	}
	if a := e.attempt(r.GetAttemptId()); a["locks"].(map[string]any)["scope"] != "closed" {
		t.Fatalf("attempt %v", a)
	}
}

// api assertion 92 and docs/decisions.md#D-rcns-trust-tier: tier 1 is the
// most trusted; a caller passes when its tier is at most min_trust_tier.
func TestGateTrustTierRule(t *testing.T) {
	for _, tc := range []struct {
		min, tier int32
		pass      bool
	}{
		{1, 1, true}, {1, 2, false}, {1, 3, false}, {2, 1, true}, {2, 2, true}, {2, 3, false}, {3, 3, true}, {3, 0, false},
	} {
		e := newEnv(t, envConfig{opts: func(o *Options) { rcnsOn(ModeConfirmFirst)(o); o.RCNS.MinTrustTier = tc.min }})
		r := e.gate(caller(agentX, "", tc.tier, "rcns:negotiate", "orders:read"), "SUMMARIZE", "/order-digest")
		if got := r.GetStatus() == 461; got != tc.pass {
			t.Errorf("min %d tier %d: status %d %s", tc.min, tc.tier, r.GetStatus(), r.GetReason())
		}
		if !tc.pass && (r.GetStatus() != 464 || r.GetReason() != "trust-tier-insufficient" || r.GetAttemptId() == "") {
			t.Errorf("min %d tier %d: %v", tc.min, tc.tier, r)
		}
	}
}

// api assertions 93-94: confirm-first previews with a 461; the
// preview never resolves implicitly; presenting it accepts and runs it,
// and the gate never answers 461 for it again.
func TestGateConfirmFirstPreviewThenPresentation(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeConfirmFirst)})
	r := e.gate(negotiator(agentX), "SUMMARIZE", "/orders/o-17")
	c := r.GetContract()
	if r.GetOutcome() != rcnsv1.GateOutcome_GATE_OUTCOME_CONFIRM_FIRST || r.GetStatus() != 461 || c == nil {
		t.Fatalf("got %v", r)
	}
	if !validID(prefixSynthesis, c.GetSynthesisId()) || c.GetMethod() != "SUMMARIZE" || c.GetPath() != "/orders/{order_id}" ||
		c.GetRecipeName() != "order-summary" || c.GetRecipeVersion() != "1" || !hex64.MatchString(c.GetContractHash()) ||
		c.GetNegotiationOrigin() != "rcns-gate" || state(c) != statePending || len([]byte(c.GetEndpoint())) == 0 || len([]byte(c.GetRecipe())) == 0 {
		t.Fatalf("preview %v", c)
	}
	if time.Until(c.GetExpiresAt().AsTime()) < 50*time.Minute {
		t.Errorf("expires_at %v", c.GetExpiresAt().AsTime())
	}
	if got := contractHash([]byte(c.GetEndpoint()), c.GetRecipeName(), c.GetRecipeVersion()); got != c.GetContractHash() {
		t.Errorf("contract_hash is not the hash of endpoint plus lineage")
	}
	// The same request again is the same preview (no second contract).
	if r2 := e.gate(negotiator(agentX), "SUMMARIZE", "/orders/o-18"); r2.GetStatus() != 461 || r2.GetContract().GetSynthesisId() != c.GetSynthesisId() {
		t.Fatalf("repeat: %v", r2)
	}
	if got := e.resolve(negotiator(agentX), "SUMMARIZE", "/orders/o-17"); got.GetStatus() != 404 {
		t.Fatalf("a pending preview resolved implicitly: %d", got.GetStatus())
	}
	if e.audit.count(agentX, eventAccepted, c.GetSynthesisId()) != 0 {
		t.Fatal("a preview was audited as accepted")
	}
	p := e.present(negotiator(agentX), c.GetSynthesisId())
	if p.GetStatus() != 0 || state(p.GetContract()) != stateActive {
		t.Fatalf("presentation: %v", p)
	}
	if e.audit.count(agentX, eventAccepted, c.GetSynthesisId()) != 1 {
		t.Fatalf("acceptance not audited: %v", e.audit.of(agentX))
	}
	if r3 := e.gate(negotiator(agentX), "SUMMARIZE", "/orders/o-17"); r3.GetStatus() == 461 || r3.GetOutcome() != rcnsv1.GateOutcome_GATE_OUTCOME_OPTIMISTIC {
		t.Fatalf("after acceptance the gate answered %v", r3)
	}
	if got := e.resolve(negotiator(agentX), "SUMMARIZE", "/orders/o-17"); got.GetStatus() != 0 {
		t.Fatalf("the accepted contract does not resolve: %d", got.GetStatus())
	}
	if p := e.present(negotiator(agentX), c.GetSynthesisId()); p.GetStatus() != 0 || e.audit.count(agentX, eventAccepted, c.GetSynthesisId()) != 1 {
		t.Fatalf("second presentation: %v", p)
	}
}

// A contract runs only for the pair it was made for: presented on another
// method it is 405, on another path 404, and neither accepts a pending
// confirm-first preview.
func TestPresentingAContractOnAnotherPair(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeConfirmFirst)})
	c := e.gate(negotiator(agentX), "SUMMARIZE", "/orders/o-17").GetContract()
	for _, tc := range []struct {
		name, method, path string
		status             int32
		reason             string
	}{
		{"another method", "FETCH", "/orders/o-17", 405, ReasonContractMethodMismatch},
		{"another path", "SUMMARIZE", "/invoices/o-17", 404, ReasonContractPathMismatch},
	} {
		r := e.presentOn(negotiator(agentX), c.GetSynthesisId(), tc.method, tc.path)
		if r.GetStatus() != tc.status || r.GetReason() != tc.reason || r.GetContract().GetMethod() != "SUMMARIZE" {
			t.Fatalf("%s: %v", tc.name, r)
		}
	}
	if e.audit.count(agentX, eventAccepted, c.GetSynthesisId()) != 0 {
		t.Fatal("a presentation on another pair accepted the preview")
	}
	if r := e.presentOn(negotiator(agentX), c.GetSynthesisId(), "SUMMARIZE", "/orders/o-18"); r.GetStatus() != 0 || r.GetContract().GetContractState() != rcnsv1.ContractState_CONTRACT_STATE_ACTIVE {
		t.Fatalf("on its own pair: %v", r)
	}
}

// api assertions 95-97, core assertions 100-101, companions assertion 21.
func TestPresentingAContract(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeOptimistic)})
	c := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()
	t.Run("another agent is 464 contract-not-yours", func(t *testing.T) {
		r := e.present(negotiator(agentY), c.GetSynthesisId())
		if r.GetStatus() != 464 || r.GetReason() != "contract-not-yours" || r.GetAttemptId() == "" || r.GetContract() != nil {
			t.Fatalf("got %v", r)
		}
		if a := e.attempt(r.GetAttemptId()); a["kind"] != "presentation" || a["synthesis_id"] != c.GetSynthesisId() || a["agent_id"] != agentY {
			t.Fatalf("attempt %v", a)
		}
	})
	t.Run("unknown is 404", func(t *testing.T) {
		for _, id := range []string{newID(prefixSynthesis), "garbage", "syn_{x}"} {
			if r := e.present(negotiator(agentX), id); r.GetStatus() != 404 {
				t.Fatalf("%s: got %v", id, r)
			}
		}
	})
	t.Run("revoked is 464 contract-revoked", func(t *testing.T) {
		if _, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: negotiator(agentY), SynthesisId: c.GetSynthesisId()}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("revoke by another agent: %v", err)
		}
		rv, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: negotiator(agentX), SynthesisId: c.GetSynthesisId(), Reason: "done"})
		if err != nil || state(rv.GetContract()) != stateRevoked {
			t.Fatalf("revoke: %v %v", rv, err)
		}
		r := e.present(negotiator(agentX), c.GetSynthesisId())
		if r.GetStatus() != 464 || r.GetReason() != "contract-revoked" || r.GetAttemptId() == "" {
			t.Fatalf("got %v", r)
		}
		if n := e.audit.count(agentX, eventRevoke, c.GetSynthesisId()); n != 1 {
			t.Fatalf("rcns_revoke events: %d", n)
		}
		// Revoking again changes nothing and emits nothing.
		if _, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: negotiator(agentX), SynthesisId: c.GetSynthesisId()}); err != nil {
			t.Fatal(err)
		}
		if n := e.audit.count(agentX, eventRevoke, c.GetSynthesisId()); n != 1 {
			t.Fatalf("rcns_revoke events after a repeat: %d", n)
		}
		if in, err := e.client.GetContract(context.Background(), &rcnsv1.GetContractRequest{SynthesisId: c.GetSynthesisId(), Inspect: true, Caller: negotiator(agentY)}); err != nil ||
			state(in.GetContract()) != stateRevoked || in.GetContract().GetStateReason() != "done" {
			t.Fatalf("INSPECT target=contract: %v %v", in, err)
		}
	})
}

// core §7.2.16.1: an operator holding inspect:all may revoke any contract.
func TestRevokeByInspectAllOperator(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeOptimistic)})
	c := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()
	rv, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: caller(agentY, "", 1, "inspect:all"), SynthesisId: c.GetSynthesisId(), Actor: "ops@example"})
	if err != nil || state(rv.GetContract()) != stateRevoked {
		t.Fatalf("%v %v", rv, err)
	}
	ev := e.audit.of(agentX)
	if last := ev[len(ev)-1]; last.Type != eventRevoke || last.Claims["actor"] != "ops@example" {
		t.Fatalf("event %v", last)
	}
}

// core §7.2.12.1, assertion 99: SUSPEND synthesis_id releases the
// caller's own contract (rcns_release); another agent gets 403.
func TestReleaseContract(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeOptimistic)})
	c := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()
	_, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: caller(agentY, "", 1, "inspect:all"), SynthesisId: c.GetSynthesisId(), Release: true})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("release by another agent: %v", err)
	}
	rv, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: negotiator(agentX), SynthesisId: c.GetSynthesisId(), Release: true})
	if err != nil || state(rv.GetContract()) != stateReleased {
		t.Fatalf("%v %v", rv, err)
	}
	if e.audit.count(agentX, eventRelease, c.GetSynthesisId()) != 1 {
		t.Fatalf("events %v", e.audit.of(agentX))
	}
	if r := e.present(negotiator(agentX), c.GetSynthesisId()); r.GetStatus() != 464 || r.GetReason() != "contract-revoked" {
		t.Fatalf("got %v", r)
	}
	if _, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: negotiator(agentX), SynthesisId: newID(prefixSynthesis)}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown: %v", err)
	}
}

// api assertion 98: optimistic mode gives an active contract at
// once, audited.
func TestGateOptimisticIsActiveAtOnce(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeOptimistic)})
	r := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest")
	c := r.GetContract()
	if r.GetOutcome() != rcnsv1.GateOutcome_GATE_OUTCOME_OPTIMISTIC || state(c) != stateActive || c.GetPath() != "/order-digest" {
		t.Fatalf("got %v", r)
	}
	if e.audit.count(agentX, eventAccepted, c.GetSynthesisId()) != 1 {
		t.Fatal("optimistic contract not audited")
	}
	if got := e.resolve(negotiator(agentX), "SUMMARIZE", "/order-digest"); got.GetStatus() != 0 {
		t.Fatalf("does not resolve: %d", got.GetStatus())
	}
}

// The gate refuses what cannot be composed, bounded by the data manifest
// and the composed steps' scopes.
func TestGateRefusals(t *testing.T) {
	dm := map[string]any{"available_data": []any{map[string]any{"class": "documents"}}}
	e := newEnv(t, envConfig{opts: rcnsOn(ModeConfirmFirst)})
	if r := e.gate(negotiator(agentX), "SUMMARIZE", "/nothing-here"); r.GetStatus() != 464 || r.GetReason() != "composition-impossible" || r.GetAttemptId() == "" {
		t.Fatalf("no pattern: %v", r)
	}
	if r := e.gate(caller(agentX, "", 1, "rcns:negotiate"), "SUMMARIZE", "/order-digest"); r.GetStatus() != 262 || r.GetScope() != "orders:read" {
		t.Fatalf("step scope: %v", r)
	}
	e2 := newEnv(t, envConfig{opts: rcnsOn(ModeConfirmFirst), dataManifest: dm})
	if r := e2.gate(negotiator(agentX), "SUMMARIZE", "/order-digest"); r.GetStatus() != 464 || r.GetReason() != "composition-impossible" {
		t.Fatalf("outside the data manifest: %v", r)
	}
}

// The gate refuses in the order 464 rcns-disabled, 262 scope-required,
// 464 trust-tier-insufficient, 429 (the negotiation rate limit), and only
// then synthesizes (461): each row closes one lock more than the next
// (docs/decisions.md#D-rcns-gate-order).
func TestGateRefusalOrder(t *testing.T) {
	for _, tc := range []struct {
		name        string
		enabled     bool
		scopes      []string
		tier        int32
		limit       int
		status      int32
		reason      string
		rateLimited bool
	}{
		{"disabled before everything", false, []string{"orders:read"}, 3, 0, 464, "rcns-disabled", false},
		{"scope before trust tier and rate", true, []string{"orders:read"}, 3, 0, 262, "scope-required", false},
		{"trust tier before rate", true, []string{"rcns:negotiate", "orders:read"}, 3, 0, 464, "trust-tier-insufficient", false},
		{"rate before synthesis", true, []string{"rcns:negotiate", "orders:read"}, 1, 0, 429, "rate-limited", true},
		{"all open", true, []string{"rcns:negotiate", "orders:read"}, 1, 1, 461, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{opts: func(o *Options) {
				rcnsOn(ModeConfirmFirst)(o)
				o.RCNS.Enabled = tc.enabled
			}})
			e.policy.check = countingLimit(tc.limit)
			r := e.gate(caller(agentX, sessionA, tc.tier, tc.scopes...), "SUMMARIZE", "/order-digest")
			if r.GetStatus() != tc.status || r.GetReason() != tc.reason || (r.GetOutcome() == rcnsv1.GateOutcome_GATE_OUTCOME_RATE_LIMITED) != tc.rateLimited {
				t.Fatalf("got %v, want %d %q", r, tc.status, tc.reason)
			}
		})
	}
}

// A caller the locks refuse spends none of its negotiation rate.
func TestGateRefusalsSpendNoRate(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeConfirmFirst)})
	e.policy.check = countingLimit(1)
	for range 3 {
		if r := e.gate(caller(agentX, sessionA, 1, "orders:read"), "SUMMARIZE", "/order-digest"); r.GetStatus() != 262 {
			t.Fatalf("without rcns:negotiate: %v", r)
		}
	}
	if r := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest"); r.GetStatus() != 461 {
		t.Fatalf("first evaluation past the locks: %v", r)
	}
}

// api assertion 99: more than the limit of gate evaluations is
// 429 scope rcns; presenting a contract is not limited.
func TestGateRateLimit(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeOptimistic)})
	e.policy.check = countingLimit(3)
	var id string
	for i := 0; i < 3; i++ {
		r := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest")
		if r.GetStatus() == 429 {
			t.Fatalf("evaluation %d limited", i)
		}
		id = r.GetContract().GetSynthesisId()
	}
	r := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest")
	if r.GetOutcome() != rcnsv1.GateOutcome_GATE_OUTCOME_RATE_LIMITED || r.GetStatus() != 429 || r.GetRetryAfterSeconds() != 42 {
		t.Fatalf("got %v", r)
	}
	for i := 0; i < 10; i++ {
		if p := e.present(negotiator(agentX), id); p.GetStatus() != 0 {
			t.Fatalf("presentation %d: %v", i, p)
		}
	}
	if r := e.gate(negotiator(agentY), "SUMMARIZE", "/order-digest"); r.GetStatus() == 429 {
		t.Fatal("another agent was limited")
	}
}

// api assertions 50-51: DISCOVER /contracts lists the caller's
// own contracts, or all of them with inspect:all.
func TestListContracts(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeConfirmFirst)})
	cx := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()
	cy := e.gate(negotiator(agentY), "SUMMARIZE", "/order-digest").GetContract()
	list := func(c *rcnsv1.Caller) []*rcnsv1.Contract {
		r, err := e.client.ListContracts(context.Background(), &rcnsv1.ListContractsRequest{Caller: c})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetContracts()
	}
	x := list(negotiator(agentX))
	if len(x) != 1 || x[0].GetSynthesisId() != cx.GetSynthesisId() || x[0].GetOriginatingAgentId() != agentX || !hex64.MatchString(x[0].GetContractHash()) ||
		x[0].GetNegotiationOrigin() != "rcns-gate" || x[0].GetRecipeName() == "" || x[0].GetIssuedAt() == nil || x[0].GetExpiresAt() == nil {
		t.Fatalf("X lists %v", x)
	}
	if all := list(caller(agentY, "", 1, "inspect:all")); len(all) != 2 {
		t.Fatalf("inspect:all lists %d", len(all))
	}
	if y := list(negotiator(agentY)); len(y) != 1 || y[0].GetSynthesisId() != cy.GetSynthesisId() {
		t.Fatalf("Y lists %v", y)
	}
}

// api assertion 100, core assertion 109: the stale sweep.
func TestRevokeStaleContracts(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeOptimistic)})
	op := caller(agentY, "", 1, "inspect:all")
	sweep := func(c *rcnsv1.Caller, mode string) (*rcnsv1.RevokeStaleContractsResponse, error) {
		return e.client.RevokeStaleContracts(context.Background(), &rcnsv1.RevokeStaleContractsRequest{Caller: c, Mode: mode, Actor: "ops"})
	}
	if _, err := sweep(op, "bogus"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("mode=bogus: %v", err)
	}
	if _, err := sweep(negotiator(agentX), "invalidate"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("without inspect:all: %v", err)
	}
	digest := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()
	summary := e.gate(negotiator(agentX), "SUMMARIZE", "/orders/o-1").GetContract()
	r, err := sweep(op, "")
	if err != nil || r.GetMode() != "grandfather" || len(r.GetContracts()) != 2 || r.GetEvicted() != 0 {
		t.Fatalf("unchanged sweep: %v %v", r, err)
	}
	for _, c := range r.GetContracts() {
		if enumname.Of(c.GetSweepOutcome()) != "unchanged" {
			t.Fatalf("outcome %v", c)
		}
	}
	e.setPatternVersion("order-digest", "2")
	r, err = sweep(op, "grandfather")
	if err != nil || outcomeOf(r, digest.GetSynthesisId()) != "grandfathered" || outcomeOf(r, summary.GetSynthesisId()) != "unchanged" {
		t.Fatalf("grandfather: %v %v", r, err)
	}
	if p := e.present(negotiator(agentX), digest.GetSynthesisId()); p.GetStatus() != 0 || p.GetContract().GetRecipeVersion() != "1" {
		t.Fatalf("a grandfathered contract stopped working: %v", p)
	}
	r, err = sweep(op, "invalidate")
	if err != nil || outcomeOf(r, digest.GetSynthesisId()) != "evicted" || r.GetEvicted() != 1 || r.GetSynthesisIds()[0] != digest.GetSynthesisId() {
		t.Fatalf("invalidate: %v %v", r, err)
	}
	for _, c := range r.GetContracts() {
		if c.GetSynthesisId() == digest.GetSynthesisId() && (c.CurrentVersion == nil || c.GetCurrentVersion() != "2" || c.GetRecipeVersion() != "1") {
			t.Fatalf("versions %v", c)
		}
	}
	if p := e.present(negotiator(agentX), digest.GetSynthesisId()); p.GetStatus() != 404 {
		t.Fatalf("an evicted contract: %v", p)
	}
	var ev auditEvent
	for _, x := range e.audit.of(agentX) {
		if x.Type == eventRelease && x.Claims["synthesis_id"] == digest.GetSynthesisId() {
			ev = x
		}
	}
	if ev.Claims["reason"] != "policy-change-invalidation" || ev.Claims["actor"] != "ops" {
		t.Fatalf("rcns_release %v", ev)
	}
	// A removed recipe has no current version; invalidate evicts its contracts.
	e.srv.SetPatterns(nil)
	r, err = sweep(op, "invalidate")
	if err != nil || outcomeOf(r, summary.GetSynthesisId()) != "evicted" || r.GetContracts()[0].CurrentVersion != nil {
		t.Fatalf("removed recipe: %v %v", r, err)
	}
}

func outcomeOf(r *rcnsv1.RevokeStaleContractsResponse, id string) string {
	for _, c := range r.GetContracts() {
		if c.GetSynthesisId() == id {
			return enumname.Of(c.GetSweepOutcome())
		}
	}
	return ""
}

// api assertions 48-49 (AGTP-API §5.8.6).
func TestListPatterns(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		e := newEnv(t, envConfig{opts: func(o *Options) { o.RCNS.Enabled = enabled }})
		r, err := e.client.ListPatterns(context.Background(), &rcnsv1.ListPatternsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var b struct {
			RCNSEnabled *bool            `json:"rcns_enabled"`
			Patterns    []map[string]any `json:"patterns"`
		}
		if err := json.Unmarshal([]byte(r.GetBody()), &b); err != nil || b.RCNSEnabled == nil || *b.RCNSEnabled != enabled || len(b.Patterns) != 2 {
			t.Fatalf("body %s: %v", []byte(r.GetBody()), err)
		}
		for _, p := range b.Patterns {
			_, exact := p["path_exact"]
			_, re := p["path_regex"]
			if p["recipe_name"] == nil || p["recipe_version"] == nil || p["method"] == nil || exact == re {
				t.Fatalf("pattern %v", p)
			}
		}
		if len(r.GetPatterns()) != 2 || r.GetRcnsEnabled() != enabled {
			t.Fatalf("typed %v", r)
		}
	}
}

// AGTP-API §10.5: a contract keeps the recipe version it captured; the
// captured recipe stays retrievable after the pattern changes.
func TestGetRecipe(t *testing.T) {
	e := newEnv(t, envConfig{})
	if r, _ := e.propose(reader(), orderSummary(), ""); r.GetStatus() != 263 {
		t.Fatal(r.GetStatus())
	}
	e.setPatternVersion("order-summary", "2")
	for version, want := range map[string]string{"": "2", "2": "2", "1": "1"} {
		r, err := e.client.GetRecipe(context.Background(), &rcnsv1.GetRecipeRequest{RecipeName: "order-summary", RecipeVersion: version})
		if err != nil || r.GetRecipeVersion() != want || r.GetRecipe().AsMap()["recipe_version"] != want {
			t.Fatalf("version %q: %v %v", version, r, err)
		}
	}
	if _, err := e.client.GetRecipe(context.Background(), &rcnsv1.GetRecipeRequest{RecipeName: "order-summary", RecipeVersion: "7"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown version: %v", err)
	}
}

func TestGetAttemptUnknownIs404(t *testing.T) {
	e := newEnv(t, envConfig{})
	for _, id := range []string{"", "x", newID(prefixAttempt)} {
		if _, err := e.client.GetAttempt(context.Background(), &rcnsv1.GetAttemptRequest{AttemptId: id}); status.Code(err) != codes.NotFound {
			t.Fatalf("%q: %v", id, err)
		}
	}
}

// Attempts are a bounded ring: the oldest fall off.
func TestAttemptRingIsBounded(t *testing.T) {
	e := newEnv(t, envConfig{opts: func(o *Options) { o.Attempts.Max = 3 }})
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetAttemptId())
	}
	for i, id := range ids {
		_, err := e.client.GetAttempt(context.Background(), &rcnsv1.GetAttemptRequest{AttemptId: id})
		if kept := err == nil; kept != (i >= 2) {
			t.Errorf("attempt %d kept=%v", i, kept)
		}
	}
	if n, _ := e.rdb.LLen(context.Background(), "agtp:{rcnsattempts}:ring").Result(); n != 3 {
		t.Errorf("ring length %d", n)
	}
}

// A revocation takes effect even when its event cannot be audited yet;
// the retry sends the event once.
func TestRevokeWithAuditDownIsRetried(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeOptimistic)})
	c := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()
	e.audit.mu.Lock()
	e.audit.fail = func(*auditv1AppendReq) error { return status.Error(codes.Unavailable, "down") }
	e.audit.mu.Unlock()
	req := &rcnsv1.RevokeContractRequest{Caller: negotiator(agentX), SynthesisId: c.GetSynthesisId()}
	if _, err := e.client.RevokeContract(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Fatalf("revoke with audit down: %v", err)
	}
	if r := e.present(negotiator(agentX), c.GetSynthesisId()); r.GetStatus() != 464 || r.GetReason() != "contract-revoked" {
		t.Fatalf("the revocation did not take effect: %v", r)
	}
	e.audit.mu.Lock()
	e.audit.fail = nil
	e.audit.mu.Unlock()
	for i := 0; i < 2; i++ {
		if _, err := e.client.RevokeContract(context.Background(), req); err != nil {
			t.Fatalf("retry %d: %v", i, err)
		}
	}
	if n := e.audit.count(agentX, eventRevoke, c.GetSynthesisId()); n != 1 {
		t.Fatalf("rcns_revoke events: %d", n)
	}
}

// A sweep whose evictions cannot be audited yet still answers with every
// contract's outcome: the eviction stands, is marked release_pending, and
// the next sweep emits its rcns_release once.
func TestStaleSweepWithAuditDownListsEveryOutcome(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeOptimistic)})
	op := caller(agentY, "", 1, "inspect:all")
	digest := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()
	summary := e.gate(negotiator(agentX), "SUMMARIZE", "/orders/o-1").GetContract()
	e.setPatternVersion("order-digest", "2")
	e.audit.mu.Lock()
	e.audit.fail = func(*auditv1AppendReq) error { return status.Error(codes.Unavailable, "down") }
	e.audit.mu.Unlock()
	r, err := e.client.RevokeStaleContracts(context.Background(), &rcnsv1.RevokeStaleContractsRequest{Caller: op, Mode: "invalidate", Actor: "ops"})
	if err != nil || len(r.GetContracts()) != 2 || outcomeOf(r, digest.GetSynthesisId()) != "evicted" || outcomeOf(r, summary.GetSynthesisId()) != "unchanged" || r.GetEvicted() != 1 {
		t.Fatalf("sweep with audit down: %v %v", r, err)
	}
	for _, c := range r.GetContracts() {
		if c.GetReleasePending() != (c.GetSynthesisId() == digest.GetSynthesisId()) {
			t.Fatalf("release_pending on %v", c)
		}
	}
	if p := e.present(negotiator(agentX), digest.GetSynthesisId()); p.GetStatus() != 404 {
		t.Fatalf("the eviction did not take effect: %v", p)
	}
	e.audit.mu.Lock()
	e.audit.fail = nil
	e.audit.mu.Unlock()
	r, err = e.client.RevokeStaleContracts(context.Background(), &rcnsv1.RevokeStaleContractsRequest{Caller: op, Mode: "invalidate", Actor: "ops"})
	if err != nil || outcomeOf(r, digest.GetSynthesisId()) != "evicted" {
		t.Fatalf("the next sweep: %v %v", r, err)
	}
	for _, c := range r.GetContracts() {
		if c.GetReleasePending() {
			t.Fatalf("still pending: %v", c)
		}
	}
	if n := e.audit.count(agentX, eventRelease, digest.GetSynthesisId()); n != 1 {
		t.Fatalf("rcns_release events: %d", n)
	}
}

// Accepting a preview while the audit service is down leaves it a
// preview.
func TestAcceptWithAuditDownStaysPending(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeConfirmFirst)})
	c := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()
	e.audit.mu.Lock()
	e.audit.fail = func(*auditv1AppendReq) error { return status.Error(codes.Unavailable, "down") }
	e.audit.mu.Unlock()
	_, err := e.client.GetContract(context.Background(), &rcnsv1.GetContractRequest{Caller: negotiator(agentX), SynthesisId: c.GetSynthesisId()})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("accept with audit down: %v", err)
	}
	in, _ := e.client.GetContract(context.Background(), &rcnsv1.GetContractRequest{SynthesisId: c.GetSynthesisId(), Inspect: true})
	if state(in.GetContract()) != statePending {
		t.Fatalf("state %s", state(in.GetContract()))
	}
}

// An operator or internal system calling rcnssvc directly is known by its
// certificate: what it writes about the caller (an Agent-ID, scopes, an
// actor) is ignored. An operator revokes any contract and the event names
// it; a direct GetContract only reads, so it never accepts a confirm-first
// preview on an agent's behalf.
func TestDirectCallersAreKnownByTheirCertificate(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeOptimistic)})
	as := func(id access.Identity) rcnsv1.RcnsServiceClient {
		return rcnsv1.NewRcnsServiceClient(testkit.ServeGRPCAs(t, id, func(g grpc.ServiceRegistrar) { rcnsv1.RegisterRcnsServiceServer(g, e.srv) }))
	}
	operator := as(testkit.Operator)
	ctx := context.Background()
	c := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()

	// Written as the contract's originator: ignored, the operator is who
	// revokes, and the event says so whatever actor it wrote.
	if _, err := operator.RevokeContract(ctx, &rcnsv1.RevokeContractRequest{Caller: negotiator(agentX), SynthesisId: c.GetSynthesisId(), Release: true, Actor: "agent"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an operator releasing as the agent: %v, want PermissionDenied (release is the originator's)", err)
	}
	if _, err := operator.RevokeContract(ctx, &rcnsv1.RevokeContractRequest{SynthesisId: c.GetSynthesisId(), Reason: "test", Actor: "someone else"}); err != nil {
		t.Fatal(err)
	}
	ev := e.audit.of(agentX)
	if last := ev[len(ev)-1]; last.Type != eventRevoke || last.Claims["actor"] != "operator/admin" {
		t.Fatalf("event %+v, want rcns_revoke by operator/admin", last)
	}
	if _, err := operator.RevokeStaleContracts(ctx, &rcnsv1.RevokeStaleContractsRequest{Mode: "grandfather"}); err != nil {
		t.Fatalf("an operator's sweep: %v", err)
	}

	// A reporting system reads a contract it names; it cannot present it.
	preview := e.gate(negotiator(agentX), "SUMMARIZE", "/orders/o-1").GetContract()
	system := as(access.Identity{Kind: access.System, Name: "reporting"})
	r, err := system.GetContract(ctx, &rcnsv1.GetContractRequest{Caller: negotiator(agentX), SynthesisId: preview.GetSynthesisId(), Method: "SUMMARIZE", Path: "/x"})
	if err != nil || r.GetContract().GetSynthesisId() != preview.GetSynthesisId() {
		t.Fatalf("a system reading a contract: %v %v", r, err)
	}
	list, err := system.ListContracts(ctx, &rcnsv1.ListContractsRequest{Caller: caller(agentY, "", 1)})
	if err != nil || len(list.GetContracts()) == 0 {
		t.Fatalf("a system listing contracts sees every live one: %v %v", list, err)
	}
}
