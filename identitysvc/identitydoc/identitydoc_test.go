package identitydoc

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
)

func signer(t *testing.T) Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return Signer{Key: k, Issuer: "registrar.acme.tld"}
}

// core §6.3.5: the registrar strips caller-supplied signature members and
// signs with its own key.
func TestSignInlineStripsCallerSuppliedSignature(t *testing.T) {
	s := signer(t)
	_, mallory, _ := ed25519.GenerateKey(nil)
	doc := map[string]any{
		"agent_id":                   strings.Repeat("a", 64),
		"status":                     "active",
		"manifest_issuer":            "mallory",
		"manifest_issuer_public_key": genesis.EncodeKey(mallory.Public().(ed25519.PublicKey)),
		"manifest_signature":         "forged",
	}
	b, err := s.SignInline(doc)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got["manifest_issuer"] != "registrar.acme.tld" || got["manifest_issuer_public_key"] != genesis.EncodeKey(s.Key.Public().(ed25519.PublicKey)) {
		t.Fatalf("caller-supplied issuer survived: %v", got)
	}
	if err := VerifyInline(b); err != nil {
		t.Fatal(err)
	}
	if err := VerifyInline(Indent(b)); err != nil {
		t.Fatalf("the indented manifest variant must verify too: %v", err)
	}
}

func TestVerifyInlineRejectsTampering(t *testing.T) {
	s := signer(t)
	b, err := s.SignInline(map[string]any{"status": "active", "agent_id": strings.Repeat("a", 64)})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"status edited":     strings.Replace(string(b), `"active"`, `"retired"`, 1),
		"issuer edited":     strings.Replace(string(b), `registrar.acme.tld`, `registrar.evil.tld`, 1),
		"signature removed": strings.Replace(string(b), `"manifest_signature"`, `"x_signature"`, 1),
		"not JSON":          "{",
	}
	for name, doc := range cases {
		if VerifyInline([]byte(doc)) == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

func TestNamespaceSignature(t *testing.T) {
	s := signer(t)
	now := time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC)
	active := &identityv1.AgentRecord{AgentId: strings.Repeat("a", 64), Name: "alpha", Status: identityv1.AgentStatus_AGENT_STATUS_ACTIVE,
		TrustTier: 1, UpdatedAt: timestamppb.New(now)}
	suspended := &identityv1.AgentRecord{AgentId: strings.Repeat("b", 64), Name: "beta", Status: identityv1.AgentStatus_AGENT_STATUS_SUSPENDED}
	doc := Namespace([]Agent{{Record: active, ActivatedAt: now}, {Record: suspended}}, Params{}, now)
	b, err := s.SignNamespace(doc)
	if err != nil {
		t.Fatal(err)
	}
	pub := s.Key.Public().(ed25519.PublicKey)
	if err := VerifyNamespace(b, pub); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	_ = json.Unmarshal(b, &got)
	if got["total_active"] != 1.0 || len(got["agents"].([]any)) != 1 || got["generated_at"] != "2026-03-20T14:00:00Z" {
		t.Fatalf("namespace %v", got)
	}
	if e := got["agents"].([]any)[0].(map[string]any); e["manifest_uri"] != "agtp://"+strings.Repeat("a", 64) {
		t.Fatalf("without an org domain the manifest URI is Form 1: %v", e)
	}
	// generated_at is covered: replaying with a new time fails.
	replayed := strings.Replace(string(b), "2026-03-20T14:00:00Z", "2026-03-20T15:00:00Z", 1)
	if VerifyNamespace([]byte(replayed), pub) == nil {
		t.Fatal("generated_at is not covered by the signature")
	}
	_, other, _ := ed25519.GenerateKey(nil)
	if VerifyNamespace(b, other.Public().(ed25519.PublicKey)) == nil {
		t.Fatal("verified with the wrong key")
	}
}

func TestMethodListKeepsFloorFirstWithoutDuplicates(t *testing.T) {
	got := MethodList([]string{"QUOTE", "EXECUTE", "QUOTE"})
	if len(got) != 19 || got[0] != "QUERY" || got[18] != "QUOTE" {
		t.Fatalf("%v", got)
	}
}

// The identity document carries delegation_permitted (false unless the
// Genesis says true) and max_delegation_depth when the Genesis has one
// (core §6.3.3; docs/decisions.md#D-delegation-consent).
func TestIdentityCarriesDelegationMembers(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(nil)
	for _, tc := range []struct {
		name      string
		extra     map[string]any
		permitted bool
		depth     any
	}{
		{"absent", nil, false, nil},
		{"permitted", map[string]any{genesis.FieldDelegationPermitted: true}, true, nil},
		{"permitted with a depth", map[string]any{genesis.FieldDelegationPermitted: true, genesis.FieldMaxDelegationDepth: 1.0}, true, 1.0},
		{"refused", map[string]any{genesis.FieldDelegationPermitted: false}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := genesis.Create(genesis.Template{
				Owner: "Acme", Archetype: genesis.ArchetypeExecutor, GovernanceZone: "development",
				Scope: []string{"orders:read"}, TrustTier: genesis.TierOrgAsserted, Extra: tc.extra,
			}, key)
			if err != nil {
				t.Fatal(err)
			}
			rec := &identityv1.AgentRecord{AgentId: g.AgentID, Name: "sub", Status: identityv1.AgentStatus_AGENT_STATUS_ACTIVE}
			doc, err := Identity(Agent{Record: rec, Genesis: g}, Params{})
			if err != nil {
				t.Fatal(err)
			}
			got, present := doc["max_delegation_depth"]
			if doc["delegation_permitted"] != tc.permitted || present != (tc.depth != nil) || got != tc.depth {
				t.Fatalf("delegation_permitted %v, max_delegation_depth %v; want %v, %v", doc["delegation_permitted"], got, tc.permitted, tc.depth)
			}
		})
	}
}
