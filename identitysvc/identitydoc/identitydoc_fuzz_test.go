package identitydoc_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/identitysvc/identitydoc"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/jcs"
)

// fuzzSigner is the registry key; it is fixed so that committed corpus
// entries signed with it stay valid documents.
func fuzzSigner() identitydoc.Signer {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(0x70 + i)
	}
	return identitydoc.Signer{Key: ed25519.NewKeyFromSeed(seed), Issuer: "registrar.acme.tld"}
}

// fuzzDocuments builds the documents a registry serves: identity
// documents of a Tier 1 and a deprecated Tier 2 agent, a status document
// and a namespace document, unsigned.
func fuzzDocuments(tb testing.TB) (inline []map[string]any, namespace map[string]any) {
	tb.Helper()
	at := time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC)
	seed := make([]byte, ed25519.SeedSize)
	g1, err := genesis.Create(genesis.Template{Owner: "Acme Corp", Archetype: genesis.ArchetypeAssistant, GovernanceZone: "production",
		Scope: []string{"documents:query", "booking:*"}, IssuedAt: at, TrustTier: genesis.TierVerified,
		VerificationPath: genesis.PathDNSAnchored, OrgDomain: "acme.tld", OrgLabel: "helper"}, ed25519.NewKeyFromSeed(seed))
	if err != nil {
		tb.Fatal(err)
	}
	g2, err := genesis.Create(genesis.Template{Owner: "José Müller — 東京 😀", Archetype: genesis.ArchetypeMonitor, GovernanceZone: "dev",
		Scope: []string{"audit:read"}, IssuedAt: at, TrustTier: genesis.TierOrgAsserted}, ed25519.NewKeyFromSeed(seed))
	if err != nil {
		tb.Fatal(err)
	}
	active := &identityv1.AgentRecord{AgentId: g1.AgentID, Name: "helper", Owner: "Acme Corp", Archetype: "assistant",
		Status: identityv1.AgentStatus_AGENT_STATUS_ACTIVE, TrustTier: 1, UpdatedAt: timestamppb.New(at)}
	deprecated := &identityv1.AgentRecord{AgentId: g2.AgentID, Name: "watcher", Status: identityv1.AgentStatus_AGENT_STATUS_DEPRECATED,
		TrustTier: 2, SuccessorAgentId: g1.AgentID, UpdatedAt: timestamppb.New(at)}
	p := identitydoc.Params{AGTPVersion: "1.0", DocumentVersion: "1", IssuerURL: "https://registrar.acme.tld", Methods: []string{"QUOTE"},
		TrustScore: 0.75, OrgDomain: "acme.tld", GovernanceZone: "production"}
	agents := []identitydoc.Agent{
		{Record: active, Genesis: g1, ActivatedAt: at, LastMethod: "ACTIVATE", LastMethodAt: at},
		{Record: deprecated, Genesis: g2, MigrationDeadline: at.Add(30 * 24 * time.Hour)},
	}
	for _, a := range agents {
		doc, err := identitydoc.Identity(a, p)
		if err != nil {
			tb.Fatal(err)
		}
		inline = append(inline, doc)
	}
	inline = append(inline, identitydoc.Status(agents[0], p, at))
	return inline, identitydoc.Namespace(agents, p, at)
}

// unsignedForm is the JCS form of doc without member, which is what its
// signature covers (or "" when doc is not an object).
func unsignedForm(doc []byte, member string) string {
	obj, err := jcs.ParseObject(doc)
	if err != nil {
		return ""
	}
	delete(obj, member)
	b, err := jcs.Append(nil, obj)
	if err != nil {
		return ""
	}
	return string(b)
}

// respellings returns doc indented and with members reordered and
// escaped as encoding/json writes them.
func respellings(tb testing.TB, doc []byte) [][]byte {
	tb.Helper()
	var generic any
	if err := json.Unmarshal(doc, &generic); err != nil {
		tb.Fatal(err)
	}
	reordered, err := json.Marshal(generic)
	if err != nil {
		tb.Fatal(err)
	}
	return [][]byte{identitydoc.Indent(doc), reordered}
}

// checkSameValue requires a and b to be JSON with the same value.
func checkSameValue(t *testing.T, what string, a, b []byte) {
	t.Helper()
	va, err := jcs.Parse(a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	vb, err := jcs.Parse(b)
	if err != nil || !reflect.DeepEqual(va, vb) {
		t.Fatalf("%s: %s is not %s: %v", what, b, a, err)
	}
}

// FuzzVerifyInline feeds identity and status documents, as a relying
// party fetches them, through VerifyInline. A document that verifies
// verifies again canonicalised and indented (the ?format=manifest
// variant); one that names the registry's key says what the registry
// signed; and the registry can sign any JSON object it is handed.
func FuzzVerifyInline(f *testing.F) {
	s := fuzzSigner()
	docs, _ := fuzzDocuments(f)
	// A small document gives the mutator something it can cover.
	docs = append(docs, map[string]any{"status": "active", "n": 1e21, "s": "\u2028<&>"})
	signed := map[string]bool{}
	for _, d := range docs {
		b, err := s.SignInline(d)
		if err != nil {
			f.Fatal(err)
		}
		signed[unsignedForm(b, identitydoc.FieldManifestSignature)] = true
		f.Add(b)
		for _, r := range respellings(f, b) {
			f.Add(r)
		}
		f.Add([]byte(strings.Replace(string(b), `"active"`, `"retired"`, 1)))
	}
	f.Add([]byte(`{"manifest_issuer":"x","manifest_issuer_public_key":"` + strings.Repeat("A", 43) + `","manifest_signature":"` + strings.Repeat("A", 86) + `"}`))
	f.Add([]byte(`{"manifest_issuer":"x","manifest_issuer_public_key":"+/","manifest_signature":"==="}`))
	f.Add([]byte(`[]`))
	pub := s.Key.Public().(ed25519.PublicKey)

	f.Fuzz(func(t *testing.T, doc []byte) {
		indented := identitydoc.Indent(doc)
		if json.Valid(doc) && !json.Valid(indented) {
			t.Fatalf("Indent(%s) = %s", doc, indented)
		}
		if err := identitydoc.VerifyInline(doc); err == nil {
			canon, err := jcs.Canonicalize(doc)
			if err != nil {
				t.Fatalf("a verified document does not canonicalise: %v", err)
			}
			if err := identitydoc.VerifyInline(canon); err != nil {
				t.Fatalf("the canonical form of a verified document fails: %v", err)
			}
			if err := identitydoc.VerifyInline(indented); err != nil {
				t.Fatalf("the indented form of a verified document fails: %v", err)
			}
			checkSameValue(t, "Indent", doc, indented)
			var hdr struct {
				Key string `json:"manifest_issuer_public_key"`
			}
			_ = json.Unmarshal(canon, &hdr)
			// Padding and unused bits spell the same key otherwise.
			key, _ := base64.RawURLEncoding.DecodeString(strings.TrimRight(hdr.Key, "="))
			if bytes.Equal(key, pub) && !signed[unsignedForm(doc, identitydoc.FieldManifestSignature)] {
				t.Fatalf("a document the registry never signed verifies with its key: %s", doc)
			}
		}
		obj, err := jcs.ParseObject(doc)
		if err != nil {
			return
		}
		out, err := s.SignInline(obj)
		if err != nil {
			t.Fatalf("SignInline refuses a JSON object: %v", err)
		}
		if c, err := jcs.Canonicalize(out); err != nil || !bytes.Equal(c, out) {
			t.Fatalf("SignInline output is not canonical: %s", out)
		}
	})
}

// FuzzVerifyNamespace is FuzzVerifyInline for the namespace document's
// detached-style signature member, checked with the registry's key.
func FuzzVerifyNamespace(f *testing.F) {
	s := fuzzSigner()
	_, ns := fuzzDocuments(f)
	b, err := s.SignNamespace(ns)
	if err != nil {
		f.Fatal(err)
	}
	signed := map[string]bool{unsignedForm(b, "signature"): true}
	f.Add(b)
	for _, r := range respellings(f, b) {
		f.Add(r)
	}
	f.Add([]byte(strings.Replace(string(b), "2026-03-20T14:00:00Z", "2026-03-20T15:00:00Z", 1)))
	f.Add([]byte(strings.Replace(string(b), `"EdDSA"`, `"ES256"`, 1)))
	f.Add([]byte(`{"signature":{"algorithm":"EdDSA","value":"` + strings.Repeat("A", 86) + `=="}}`))
	f.Add([]byte(`{"signature":"x"}`))
	small, err := s.SignNamespace(map[string]any{"agents": []any{}, "total_active": 0.0})
	if err != nil {
		f.Fatal(err)
	}
	signed[unsignedForm(small, "signature")] = true
	f.Add(small)
	pub := s.Key.Public().(ed25519.PublicKey)

	f.Fuzz(func(t *testing.T, doc []byte) {
		if err := identitydoc.VerifyNamespace(doc, pub); err == nil {
			if !signed[unsignedForm(doc, "signature")] {
				t.Fatalf("a namespace document the registry never signed verifies: %s", doc)
			}
			canon, err := jcs.Canonicalize(doc)
			if err != nil || identitydoc.VerifyNamespace(canon, pub) != nil {
				t.Fatalf("the canonical form of a verified document fails: %v", err)
			}
			indented := identitydoc.Indent(doc)
			if err := identitydoc.VerifyNamespace(indented, pub); err != nil {
				t.Fatalf("the indented form of a verified document fails: %v", err)
			}
			checkSameValue(t, "Indent", doc, indented)
		}
		obj, err := jcs.ParseObject(doc)
		if err != nil {
			return
		}
		out, err := s.SignNamespace(obj)
		if err != nil {
			t.Fatalf("SignNamespace refuses a JSON object: %v", err)
		}
		if err := identitydoc.VerifyNamespace(out, pub); err != nil {
			t.Fatal(err)
		}
	})
}
