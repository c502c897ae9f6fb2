package callerpolicy

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

func rec(st identityv1.AgentStatus) *identityv1.AgentRecord {
	return &identityv1.AgentRecord{
		AgentId: strings.Repeat("a", 64), Status: st, Scopes: []string{"orders:*", "documents:summarize"},
		TrustTier: 2, VerificationPath: "org-asserted", TrustWarning: "verification-incomplete",
		RevokedAt: timestamppb.New(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)), SuccessorAgentId: strings.Repeat("b", 64),
	}
}

// docs/decisions.md#D-caller-states: unknown or non-active caller 401,
// revoked 410, suspended 503, deprecated served (core assertions 58–61).
func TestCallerRules(t *testing.T) {
	cases := []struct {
		name    string
		rec     *identityv1.AgentRecord
		allowed bool
		status  int
		reason  string
		state   string
	}{
		{"unknown", nil, false, 401, "agent-unauthenticated", ""},
		{"never activated", rec(identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED), false, 401, "agent-unauthenticated", "pending"},
		{"active", rec(identityv1.AgentStatus_AGENT_STATUS_ACTIVE), true, 0, "", "active"},
		{"suspended", rec(identityv1.AgentStatus_AGENT_STATUS_SUSPENDED), false, 503, "agent-suspended", "suspended"},
		{"retired", rec(identityv1.AgentStatus_AGENT_STATUS_RETIRED), false, 410, "agent-retired", "retired"},
		{"deprecated", rec(identityv1.AgentStatus_AGENT_STATUS_DEPRECATED), true, 0, "", "deprecated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Caller(c.rec)
			if d.Allowed != c.allowed || d.Status != c.status || d.Reason != c.reason || d.State != c.state {
				t.Fatalf("got %+v", d)
			}
			if !d.Allowed && d.State != "" && d.Fields()["lifecycle_state"] != c.state {
				t.Fatalf("the body must carry the lifecycle state: %v", d.Fields())
			}
		})
	}
	if d := Caller(rec(identityv1.AgentStatus_AGENT_STATUS_RETIRED)); d.Fields()["revoked_at"] != "2026-05-01T00:00:00Z" {
		t.Fatalf("410 body must carry the revocation time: %v", d.Fields())
	}
	if d := Caller(rec(identityv1.AgentStatus_AGENT_STATUS_DEPRECATED)); !d.Deprecated || d.SuccessorAgentID == "" {
		t.Fatalf("deprecated callers carry the deprecation signal: %+v", d)
	}
}

func TestTargetRules(t *testing.T) {
	cases := []struct {
		rec    *identityv1.AgentRecord
		status int
		reason string
	}{
		{nil, 404, "agent-not-found"},
		{rec(identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED), 404, "agent-not-activated"},
		{rec(identityv1.AgentStatus_AGENT_STATUS_SUSPENDED), 503, "agent-suspended"},
		{rec(identityv1.AgentStatus_AGENT_STATUS_RETIRED), 410, "agent-retired"},
		{rec(identityv1.AgentStatus_AGENT_STATUS_ACTIVE), 0, ""},
		{rec(identityv1.AgentStatus_AGENT_STATUS_DEPRECATED), 0, ""},
	}
	for _, c := range cases {
		d := Target(c.rec)
		if d.Status != c.status || d.Reason != c.reason || d.Allowed != (c.status == 0) {
			t.Errorf("%v: got %+v", c.rec.GetStatus(), d)
		}
	}
}

// core assertions 51 and 54 (core §5.5.3).
func TestClaimedScopesMustBeDeclared(t *testing.T) {
	r := rec(identityv1.AgentStatus_AGENT_STATUS_ACTIVE)
	cases := []struct {
		claim string
		ok    bool
	}{
		{"orders:create", true},
		{"orders:query, documents:summarize", true},
		{"documents:summarize,orders:refund", true},
		{"payments:purchase", false},
		{"documents:*", false},
		{"orders:create:bulk", false},
	}
	for _, c := range cases {
		claimed, err := agtp.ParseScopes(c.claim)
		if err != nil {
			t.Fatal(err)
		}
		d := ClaimedScopes(r, claimed)
		if d.Allowed != c.ok {
			t.Errorf("%q: got %+v", c.claim, d)
		}
		if !c.ok && (d.Status != 262 || d.Reason != "scope-claim-invalid") {
			t.Errorf("%q: want 262 scope-claim-invalid, got %d %s", c.claim, d.Status, d.Reason)
		}
	}
}

// core assertions 45 and 46 (core §5.5.4).
func TestTrustHeaders(t *testing.T) {
	for _, c := range []struct {
		tier    int32
		path    string
		warning string
		want    Trust
	}{
		{1, "dns-anchored", "", Trust{"1", "dns-anchored", ""}},
		{1, "dns-anchored", "stray", Trust{"1", "dns-anchored", ""}},
		{2, "org-asserted", "verification-incomplete", Trust{"2", "org-asserted", "verification-incomplete"}},
		{3, "", "stray", Trust{"3", "", ""}},
		{0, "", "", Trust{}},
	} {
		got := TrustHeaders(&identityv1.AgentRecord{TrustTier: c.tier, VerificationPath: c.path, TrustWarning: c.warning})
		if got != c.want {
			t.Errorf("tier %d: got %+v, want %+v", c.tier, got, c.want)
		}
	}
}

func TestStateNamesAreLowercaseAndParsedCaseInsensitively(t *testing.T) {
	for _, s := range []identityv1.AgentStatus{
		identityv1.AgentStatus_AGENT_STATUS_ACTIVE, identityv1.AgentStatus_AGENT_STATUS_SUSPENDED,
		identityv1.AgentStatus_AGENT_STATUS_RETIRED, identityv1.AgentStatus_AGENT_STATUS_DEPRECATED,
	} {
		name := StateName(s)
		if name != strings.ToLower(name) {
			t.Errorf("%v: %q", s, name)
		}
		if got, ok := ParseState(strings.ToUpper(name[:1]) + name[1:]); !ok || got != s {
			t.Errorf("ParseState(%q) = %v", name, got)
		}
	}
	if _, ok := ParseState("frozen"); ok {
		t.Fatal("unknown state parsed")
	}
}
