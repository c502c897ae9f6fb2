package genesis

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/agtpsuite/agtp/services/jcs"
)

// testKey is deterministic so the vectors below are reproducible.
func testKey() ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i + 1)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func vectorTemplate(owner string) Template {
	return Template{
		Owner: owner, Archetype: ArchetypeAssistant, GovernanceZone: "development",
		Scope:     []string{"documents:query", "knowledge:query"},
		IssuedAt:  time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC),
		TrustTier: TierOrgAsserted, VerificationPath: PathOrgAsserted, OrgLabel: "helper",
	}
}

// The vectors were cross-checked with Python: sha256 of
// json.dumps(doc minus agent_id and signature, sort_keys=True,
// separators=(",", ":"), ensure_ascii=False), and the signature verified
// with the cryptography package over the same bytes plus agent_id.
const (
	vectorASCIIGenesis = `{"agent_id":"6f74573fa6a54bc08ba22c506682f9d7b239df9f16f49ab350c511e79035b7df","archetype":"assistant","governance_zone":"development","issued_at":"2026-01-15T09:00:00Z","issuer_public_key":"ebVWLo_mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ","org_label":"helper","owner":"Acme Corp","scope":["documents:query","knowledge:query"],"signature":"_WjOINtiwQ0j5AS2FyYqXDdgdP-u8rqnn_b1-_Uyjgap2RVuEVvwWvwzVj2Im0h3IqjDw5TB3vPnDkd7H5igBQ","trust_tier":2,"verification_path":"org-asserted"}`
	vectorASCIIID      = "6f74573fa6a54bc08ba22c506682f9d7b239df9f16f49ab350c511e79035b7df"
	vectorIssuerFP     = "65b60673d6ed884bf01c2c222d82ada0740f29ac3355d6a925c81f17f47a27b8"

	vectorUnicodeOwner = "José Müller — Ωmega 東京 😀"
	vectorUnicodeID    = "4cf33aed234b02b88ec3e5f49a7050933fa274a27652d9706f3ebd787f2a7867"
	// vectorUnicodeRefID is what the reference implementation's hashing
	// (Python json.dumps with sort_keys and the default ensure_ascii=True)
	// gives for the same document: non-ASCII characters become \uXXXX
	// escapes, so the bytes, and the ID, differ from JCS.
	vectorUnicodeRefID = "bc35213f1295c8f8cd32cb9cbe4b5e07631854be022ebd235bb9915a5304bcb8"
)

func TestAgentIDMatchesPinnedVectors(t *testing.T) {
	g, err := Create(vectorTemplate("Acme Corp"), testKey())
	if err != nil {
		t.Fatal(err)
	}
	if string(g.Bytes()) != vectorASCIIGenesis {
		t.Fatalf("signed Genesis changed:\n got %s\nwant %s", g.Bytes(), vectorASCIIGenesis)
	}
	if g.AgentID != vectorASCIIID || g.ComputeAgentID() != vectorASCIIID {
		t.Fatalf("agent_id %s, recomputed %s, want %s", g.AgentID, g.ComputeAgentID(), vectorASCIIID)
	}
	if g.IssuerFingerprint() != vectorIssuerFP {
		t.Fatalf("issuer fingerprint %s, want %s", g.IssuerFingerprint(), vectorIssuerFP)
	}
	loaded, err := Load([]byte(vectorASCIIGenesis))
	if err != nil {
		t.Fatalf("pinned vector does not load: %v", err)
	}
	if id, err := ComputeAgentID([]byte(vectorASCIIGenesis)); err != nil || id != vectorASCIIID || loaded.AgentID != id {
		t.Fatalf("ComputeAgentID = %s, %v", id, err)
	}

	u, err := Create(vectorTemplate(vectorUnicodeOwner), testKey())
	if err != nil {
		t.Fatal(err)
	}
	if u.AgentID != vectorUnicodeID {
		t.Fatalf("non-ASCII agent_id %s, want %s", u.AgentID, vectorUnicodeID)
	}
}

// pythonDumpsASCII is the reference implementation's serialisation:
// json.dumps(v, sort_keys=True, separators=(",", ":")) with the default
// ensure_ascii=True, for the strings, arrays, objects and small integers
// a Genesis holds.
func pythonDumpsASCII(v any) string {
	switch x := v.(type) {
	case string:
		var b strings.Builder
		b.WriteByte('"')
		for _, r := range x {
			switch {
			case r == '"':
				b.WriteString(`\"`)
			case r == '\\':
				b.WriteString(`\\`)
			case r == '\n':
				b.WriteString(`\n`)
			case r < 0x20 || r > 0x7e:
				if r > 0xffff {
					r1, r2 := utf16.EncodeRune(r)
					fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
				} else {
					fmt.Fprintf(&b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
		return b.String()
	case float64:
		return fmt.Sprintf("%d", int64(x))
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pythonDumpsASCII(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys) // Python sorts by code point, as byte order does for UTF-8
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = pythonDumpsASCII(k) + ":" + pythonDumpsASCII(x[k])
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	panic(fmt.Sprintf("unexpected %T", v))
}

func TestReferenceHashingDiffersFromJCSOnNonASCII(t *testing.T) {
	for _, c := range []struct {
		owner     string
		wantJCS   string
		wantRef   string
		sameBytes bool
	}{
		{"Acme Corp", vectorASCIIID, vectorASCIIID, true},
		{vectorUnicodeOwner, vectorUnicodeID, vectorUnicodeRefID, false},
	} {
		g, err := Create(vectorTemplate(c.owner), testKey())
		if err != nil {
			t.Fatal(err)
		}
		obj, err := jcs.ParseObject(g.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		delete(obj, FieldAgentID)
		delete(obj, FieldSignature)
		ref := pythonDumpsASCII(obj)
		refSum := sha256.Sum256([]byte(ref))
		if got := hex.EncodeToString(refSum[:]); got != c.wantRef {
			t.Errorf("%q: reference hash %s, want %s (%s)", c.owner, got, c.wantRef, ref)
		}
		if g.AgentID != c.wantJCS {
			t.Errorf("%q: JCS agent_id %s, want %s", c.owner, g.AgentID, c.wantJCS)
		}
		if (ref == string(g.IDInput())) != c.sameBytes {
			t.Errorf("%q: reference bytes equal JCS bytes = %v, want %v", c.owner, !c.sameBytes, c.sameBytes)
		}
	}
}

func TestAgentIDExcludesAgentIDAndSignatureOnly(t *testing.T) {
	g, err := Create(vectorTemplate("Acme Corp"), testKey())
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := jcs.ParseObject(g.Bytes())
	id := func(o map[string]any) string {
		b, _ := jcs.Append(nil, o)
		s, err := ComputeAgentID(b)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := id(obj)
	obj[FieldAgentID] = strings.Repeat("0", 64)
	obj[FieldSignature] = "AAAA"
	if id(obj) != base {
		t.Fatal("agent_id or signature changed the Agent-ID")
	}
	for _, field := range []string{FieldOwner, FieldGovernanceZone, FieldOrgLabel, "x_extension"} {
		o, _ := jcs.ParseObject(g.Bytes())
		o[field] = "changed"
		if id(o) == base {
			t.Errorf("changing %s did not change the Agent-ID", field)
		}
	}
}

func TestSignatureCoversAgentID(t *testing.T) {
	g, err := Create(vectorTemplate("Acme Corp"), testKey())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(g.SigningInput()), `"signature"`) || !strings.Contains(string(g.SigningInput()), `"agent_id"`) {
		t.Fatalf("signing input must be the document minus signature only: %s", g.SigningInput())
	}
	if !ed25519.Verify(g.IssuerPublicKey, g.SigningInput(), g.Signature) {
		t.Fatal("signature does not verify over the signing input")
	}
}

// reencode replaces one member of an encoded Genesis.
func reencode(t *testing.T, doc []byte, edit func(map[string]any)) []byte {
	t.Helper()
	obj, err := jcs.ParseObject(doc)
	if err != nil {
		t.Fatal(err)
	}
	edit(obj)
	b, err := jcs.Append(nil, obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// resign fixes agent_id and signature after an edit, so that only the
// edited rule fails.
func resign(t *testing.T, doc []byte, edit func(map[string]any)) []byte {
	t.Helper()
	b := reencode(t, doc, edit)
	obj, _ := jcs.ParseObject(b)
	id, err := agentIDOf(obj)
	if err != nil {
		t.Fatal(err)
	}
	obj[FieldAgentID] = id
	delete(obj, FieldSignature)
	in, _ := jcs.Append(nil, obj)
	obj[FieldSignature] = base64.RawURLEncoding.EncodeToString(ed25519.Sign(testKey(), in))
	out, _ := jcs.Append(nil, obj)
	return out
}

func TestLoadRefusesBadGenesisWithPreciseReason(t *testing.T) {
	good, err := Create(vectorTemplate("Acme Corp"), testKey())
	if err != nil {
		t.Fatal(err)
	}
	doc := good.Bytes()
	set := func(k string, v any) func(map[string]any) { return func(o map[string]any) { o[k] = v } }
	del := func(k string) func(map[string]any) { return func(o map[string]any) { delete(o, k) } }
	_, otherKey, _ := ed25519.GenerateKey(nil)

	cases := []struct {
		name   string
		doc    []byte
		reason string
		field  string
	}{
		{"not JSON", []byte(`{"owner":`), ReasonMalformed, ""},
		{"not an object", []byte(`[1,2]`), ReasonMalformed, ""},
		{"duplicate member", []byte(`{"owner":"a","owner":"b"}`), ReasonMalformed, ""},
		{"too large", []byte(`{"owner":"` + strings.Repeat("a", MaxSize) + `"}`), ReasonMalformed, ""},
		{"owner missing", resign(t, doc, del(FieldOwner)), ReasonFieldMissing, FieldOwner},
		{"owner empty", resign(t, doc, set(FieldOwner, "")), ReasonFieldMissing, FieldOwner},
		{"owner not a string", resign(t, doc, set(FieldOwner, 7.0)), ReasonFieldInvalid, FieldOwner},
		{"archetype missing", resign(t, doc, del(FieldArchetype)), ReasonFieldMissing, FieldArchetype},
		{"archetype not in the enum", resign(t, doc, set(FieldArchetype, "wizard")), ReasonFieldInvalid, FieldArchetype},
		{"archetype is case-sensitive", resign(t, doc, set(FieldArchetype, "Assistant")), ReasonFieldInvalid, FieldArchetype},
		{"governance_zone missing", resign(t, doc, del(FieldGovernanceZone)), ReasonFieldMissing, FieldGovernanceZone},
		{"scope missing", resign(t, doc, del(FieldScope)), ReasonFieldMissing, FieldScope},
		{"scope empty", resign(t, doc, set(FieldScope, []any{})), ReasonFieldMissing, FieldScope},
		{"scope a string", resign(t, doc, set(FieldScope, "documents:query")), ReasonFieldInvalid, FieldScope},
		{"scope token without action", resign(t, doc, set(FieldScope, []any{"documents"})), ReasonFieldInvalid, FieldScope},
		{"scope token upper case", resign(t, doc, set(FieldScope, []any{"Documents:query"})), ReasonFieldInvalid, FieldScope},
		{"scope token with space", resign(t, doc, set(FieldScope, []any{"documents: query"})), ReasonFieldInvalid, FieldScope},
		{"scope token twice", resign(t, doc, set(FieldScope, []any{"a:b", "a:b"})), ReasonFieldInvalid, FieldScope},
		{"issued_at missing", resign(t, doc, del(FieldIssuedAt)), ReasonFieldMissing, FieldIssuedAt},
		{"issued_at not RFC 3339", resign(t, doc, set(FieldIssuedAt, "15 Jan 2026")), ReasonFieldInvalid, FieldIssuedAt},
		{"issuer key missing", reencode(t, doc, del(FieldIssuerPublicKey)), ReasonFieldMissing, FieldIssuerPublicKey},
		{"issuer key 31 bytes", reencode(t, doc, set(FieldIssuerPublicKey, base64.RawURLEncoding.EncodeToString(make([]byte, 31)))), ReasonFieldInvalid, FieldIssuerPublicKey},
		{"issuer key standard base64", reencode(t, doc, set(FieldIssuerPublicKey, "+/"+strings.Repeat("A", 41))), ReasonFieldInvalid, FieldIssuerPublicKey},
		{"signature missing", reencode(t, doc, del(FieldSignature)), ReasonFieldMissing, FieldSignature},
		{"signature wrong length", reencode(t, doc, set(FieldSignature, "AAAA")), ReasonFieldInvalid, FieldSignature},
		{"agent_id missing", reencode(t, doc, del(FieldAgentID)), ReasonFieldMissing, FieldAgentID},
		{"agent_id upper case", reencode(t, doc, set(FieldAgentID, strings.ToUpper(good.AgentID))), ReasonFieldInvalid, FieldAgentID},
		{"trust_tier missing", resign(t, doc, del(FieldTrustTier)), ReasonFieldMissing, FieldTrustTier},
		{"trust_tier 0", resign(t, doc, set(FieldTrustTier, 0.0)), ReasonFieldInvalid, FieldTrustTier},
		{"trust_tier 4", resign(t, doc, set(FieldTrustTier, 4.0)), ReasonFieldInvalid, FieldTrustTier},
		{"trust_tier 1.5", resign(t, doc, set(FieldTrustTier, 1.5)), ReasonFieldInvalid, FieldTrustTier},
		{"trust_tier a string", resign(t, doc, set(FieldTrustTier, "2")), ReasonFieldInvalid, FieldTrustTier},
		{"unknown verification path", resign(t, doc, set(FieldVerificationPath, "vibes")), ReasonFieldInvalid, FieldVerificationPath},
		{"tier 2 claiming dns-anchored", resign(t, doc, set(FieldVerificationPath, "dns-anchored")), ReasonFieldInvalid, FieldVerificationPath},
		{"tier 1 without a path", resign(t, doc, func(o map[string]any) { o[FieldTrustTier] = 1.0; delete(o, FieldVerificationPath) }), ReasonFieldMissing, FieldVerificationPath},
		{"tier 1 org-asserted", resign(t, doc, set(FieldTrustTier, 1.0)), ReasonFieldInvalid, FieldVerificationPath},
		{"dns-anchored without org_domain", resign(t, doc, func(o map[string]any) { o[FieldTrustTier] = 1.0; o[FieldVerificationPath] = "dns-anchored" }), ReasonFieldMissing, FieldOrgDomain},
		{"hybrid without org_domain", resign(t, doc, func(o map[string]any) { o[FieldTrustTier] = 1.0; o[FieldVerificationPath] = "hybrid" }), ReasonFieldMissing, FieldOrgDomain},
		{"log-anchored without proof", resign(t, doc, func(o map[string]any) { o[FieldTrustTier] = 1.0; o[FieldVerificationPath] = "log-anchored" }), ReasonFieldMissing, FieldLogInclusionProof},
		{"org_domain not a domain", resign(t, doc, set(FieldOrgDomain, "acme tld")), ReasonFieldInvalid, FieldOrgDomain},
		{"hash mismatch", reencode(t, doc, set(FieldOwner, "Mallory")), ReasonHashMismatch, FieldAgentID},
		{"agent_id of another document", reencode(t, doc, set(FieldAgentID, strings.Repeat("ab", 32))), ReasonHashMismatch, FieldAgentID},
		{"signature by another key", reencode(t, doc, func(o map[string]any) {
			delete(o, FieldSignature)
			in, _ := jcs.Append(nil, o)
			o[FieldSignature] = base64.RawURLEncoding.EncodeToString(ed25519.Sign(otherKey, in))
		}), ReasonSignatureInvalid, FieldSignature},
		{"signature over the ID input instead", reencode(t, doc, func(o map[string]any) {
			o[FieldSignature] = base64.RawURLEncoding.EncodeToString(ed25519.Sign(testKey(), good.IDInput()))
		}), ReasonSignatureInvalid, FieldSignature},
		{"issuer key swapped with agent_id fixed", func() []byte {
			b := reencode(t, doc, set(FieldIssuerPublicKey, EncodeKey(otherKey.Public().(ed25519.PublicKey))))
			obj, _ := jcs.ParseObject(b)
			id, _ := agentIDOf(obj)
			obj[FieldAgentID] = id
			out, _ := jcs.Append(nil, obj)
			return out
		}(), ReasonSignatureInvalid, FieldSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.doc)
			var ge *Error
			if !errors.As(err, &ge) {
				t.Fatalf("want *genesis.Error, got %v", err)
			}
			if ge.Reason != c.reason || ge.Field != c.field {
				t.Fatalf("got %s/%s (%v), want %s/%s", ge.Reason, ge.Field, ge, c.reason, c.field)
			}
		})
	}
}

func TestLoadAcceptsValidVariants(t *testing.T) {
	good, err := Create(vectorTemplate("Acme Corp"), testKey())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		doc  []byte
	}{
		{"tier 2 without a path means org-asserted", resign(t, good.Bytes(), func(o map[string]any) { delete(o, FieldVerificationPath) })},
		{"tier 1 dns-anchored with org_domain", resign(t, good.Bytes(), func(o map[string]any) {
			o[FieldTrustTier], o[FieldVerificationPath], o[FieldOrgDomain] = 1.0, "dns-anchored", "acme.tld"
		})},
		{"tier 1 log-anchored with proof", resign(t, good.Bytes(), func(o map[string]any) {
			o[FieldTrustTier], o[FieldVerificationPath], o[FieldLogInclusionProof] = 1.0, "log-anchored", map[string]any{"tree_size": 7.0}
		})},
		{"tier 3 without a path", resign(t, good.Bytes(), func(o map[string]any) { o[FieldTrustTier] = 3.0; delete(o, FieldVerificationPath) })},
		{"wildcard scopes", resign(t, good.Bytes(), func(o map[string]any) { o[FieldScope] = []any{"booking:*", "*:query", "mcp:tools:execute"} })},
		{"unknown extension members", resign(t, good.Bytes(), func(o map[string]any) { o["x_team"] = map[string]any{"cost_center": 42.0} })},
		{"padded base64url key and signature", func() []byte {
			obj, _ := jcs.ParseObject(good.Bytes())
			// Padding changes the member values, so re-issue over them.
			obj[FieldIssuerPublicKey] = base64.URLEncoding.EncodeToString(testKey().Public().(ed25519.PublicKey))
			id, _ := agentIDOf(obj)
			obj[FieldAgentID] = id
			delete(obj, FieldSignature)
			in, _ := jcs.Append(nil, obj)
			obj[FieldSignature] = base64.URLEncoding.EncodeToString(ed25519.Sign(testKey(), in))
			out, _ := jcs.Append(nil, obj)
			return out
		}()},
		{"pretty-printed with escapes", []byte(strings.ReplaceAll(strings.ReplaceAll(string(good.Bytes()), ",", ",\n  "), "Acme", `\u0041cme`))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Load(c.doc)
			if err != nil {
				t.Fatal(err)
			}
			if string(g.Bytes()) != string(c.doc) {
				t.Fatal("Bytes must return the document exactly as given")
			}
		})
	}
}

func TestEffectivePathAndTrustWarning(t *testing.T) {
	cases := []struct {
		tier     int
		path     VerificationPath
		org      string
		wantPath VerificationPath
		warning  string
	}{
		{1, PathDNSAnchored, "acme.tld", PathDNSAnchored, ""},
		{2, "", "", PathOrgAsserted, TrustWarningVerificationIncomplete},
		{2, PathOrgAsserted, "", PathOrgAsserted, TrustWarningVerificationIncomplete},
		{3, "", "", "", ""},
	}
	for _, c := range cases {
		tpl := vectorTemplate("Acme Corp")
		tpl.TrustTier, tpl.VerificationPath, tpl.OrgDomain = c.tier, c.path, c.org
		g, err := Create(tpl, testKey())
		if err != nil {
			t.Fatalf("tier %d: %v", c.tier, err)
		}
		if g.EffectivePath() != c.wantPath || g.TrustWarning() != c.warning {
			t.Errorf("tier %d path %q: got %q/%q, want %q/%q", c.tier, c.path, g.EffectivePath(), g.TrustWarning(), c.wantPath, c.warning)
		}
	}
}

func TestFingerprintIsSHA256OfRawKey(t *testing.T) {
	pub := testKey().Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	if Fingerprint(pub) != hex.EncodeToString(sum[:]) || len(Fingerprint(pub)) != 64 {
		t.Fatal("fingerprint is not lowercase hex SHA-256 of the raw key")
	}
}

func TestNewRefusesBadTemplates(t *testing.T) {
	pub := testKey().Public().(ed25519.PublicKey)
	bad := vectorTemplate("Acme Corp")
	bad.Archetype = "wizard"
	if _, err := New(bad, pub); err == nil {
		t.Fatal("bad archetype accepted")
	}
	clash := vectorTemplate("Acme Corp")
	clash.Extra = map[string]any{FieldOwner: "x"}
	if _, err := New(clash, pub); err == nil {
		t.Fatal("Extra shadowing a field accepted")
	}
	sig := vectorTemplate("Acme Corp")
	sig.Extra = map[string]any{FieldSignature: "x"}
	if _, err := New(sig, pub); err == nil {
		t.Fatal("Extra setting the signature accepted")
	}
	g, err := New(vectorTemplate("Acme Corp"), pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Verify(); err == nil {
		t.Fatal("an unsigned Genesis verified")
	}
	_, other, _ := ed25519.GenerateKey(nil)
	if err := g.Sign(other); err == nil {
		t.Fatal("signing with a key other than the issuer's succeeded")
	}
}

func TestParseForSigningRecomputesIDAndKeepsUnknownMembers(t *testing.T) {
	good, err := Create(vectorTemplate("Acme Corp"), testKey())
	if err != nil {
		t.Fatal(err)
	}
	edited := reencode(t, good.Bytes(), func(o map[string]any) {
		o[FieldOwner] = "Other Corp"
		o["x_note"] = "kept"
	})
	g, err := ParseForSigning(edited, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.Signature != nil || g.AgentID == good.AgentID || g.AgentID != g.ComputeAgentID() {
		t.Fatalf("edited Genesis: agent_id %s (was %s), signature %x", g.AgentID, good.AgentID, g.Signature)
	}
	if err := g.Sign(testKey()); err != nil {
		t.Fatal(err)
	}
	loaded, err := Load(g.Bytes())
	if err != nil {
		t.Fatalf("re-signed Genesis does not load: %v", err)
	}
	if v, _ := loaded.Member("x_note"); v != "kept" || loaded.Owner != "Other Corp" {
		t.Fatalf("members lost: %s", g.Bytes())
	}

	noIssuer := reencode(t, good.Bytes(), func(o map[string]any) { delete(o, FieldIssuerPublicKey) })
	if _, err := ParseForSigning(noIssuer, nil); err == nil {
		t.Fatal("a Genesis without issuer_public_key and no issuer given was accepted")
	}
	pub, _ := testKey().Public().(ed25519.PublicKey)
	g, err = ParseForSigning(noIssuer, pub)
	if err != nil || !g.IssuerPublicKey.Equal(pub) || g.AgentID != good.AgentID {
		t.Fatalf("issuer fill-in: %v, agent_id %s want %s", err, g.AgentID, good.AgentID)
	}
	var ge *Error
	if _, err := ParseForSigning([]byte(`{"owner":`), nil); !errors.As(err, &ge) || ge.Reason != ReasonMalformed {
		t.Fatalf("malformed input: %v", err)
	}
}

func BenchmarkLoad(b *testing.B) {
	doc := []byte(vectorASCIIGenesis)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// delegation_permitted and max_delegation_depth are the issuer's word on
// whether the agent takes delegated work (docs/decisions.md#D-delegation-consent).
func TestDelegationMembers(t *testing.T) {
	depth := func(n int) *int { return &n }
	cases := []struct {
		name      string
		extra     map[string]any
		permitted bool
		depth     *int
		invalid   string
	}{
		{"absent is not permitted", nil, false, nil, ""},
		{"true", map[string]any{FieldDelegationPermitted: true}, true, nil, ""},
		{"false", map[string]any{FieldDelegationPermitted: false}, false, nil, ""},
		{"with a depth", map[string]any{FieldDelegationPermitted: true, FieldMaxDelegationDepth: 1.0}, true, depth(1), ""},
		{"depth 0", map[string]any{FieldDelegationPermitted: true, FieldMaxDelegationDepth: 0.0}, true, depth(0), ""},
		{"a string is not a boolean", map[string]any{FieldDelegationPermitted: "true"}, false, nil, FieldDelegationPermitted},
		{"a negative depth", map[string]any{FieldMaxDelegationDepth: -1.0}, false, nil, FieldMaxDelegationDepth},
		{"a fractional depth", map[string]any{FieldMaxDelegationDepth: 1.5}, false, nil, FieldMaxDelegationDepth},
		{"too deep", map[string]any{FieldMaxDelegationDepth: float64(MaxDelegationDepthLimit + 1)}, false, nil, FieldMaxDelegationDepth},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := vectorTemplate("Acme Corp")
			tmpl.Extra = tc.extra
			g, err := Create(tmpl, testKey())
			if tc.invalid != "" {
				var ge *Error
				if !errors.As(err, &ge) || ge.Reason != ReasonFieldInvalid || ge.Field != tc.invalid {
					t.Fatalf("Create = %v, want %s invalid", err, tc.invalid)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			loaded, err := Load(g.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if loaded.DelegationPermitted != tc.permitted || (loaded.MaxDelegationDepth == nil) != (tc.depth == nil) ||
				tc.depth != nil && *loaded.MaxDelegationDepth != *tc.depth {
				t.Fatalf("permitted %v depth %v, want %v %v", loaded.DelegationPermitted, loaded.MaxDelegationDepth, tc.permitted, tc.depth)
			}
		})
	}
}
