package genesis_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/services/jcs"
)

// fuzzIssuer is fixed so that committed corpus entries signed with it
// stay valid documents.
func fuzzIssuer() ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(0xa0 + i)
	}
	return ed25519.NewKeyFromSeed(seed)
}

// fuzzGeneses are signed documents of every tier and verification path.
func fuzzGeneses(tb testing.TB) [][]byte {
	tb.Helper()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	templates := []genesis.Template{
		{Owner: "Acme Corp", Archetype: genesis.ArchetypeAssistant, GovernanceZone: "development",
			Scope: []string{"documents:query", "knowledge:query"}, IssuedAt: at,
			TrustTier: genesis.TierOrgAsserted, VerificationPath: genesis.PathOrgAsserted, OrgLabel: "helper"},
		{Owner: "José Müller — Ωmega 東京 😀", Archetype: genesis.ArchetypeExecutor, GovernanceZone: "production",
			Scope: []string{"booking:*"}, IssuedAt: at, TrustTier: genesis.TierVerified,
			VerificationPath: genesis.PathDNSAnchored, OrgDomain: "acme.tld", PackageRef: "oci://registry.acme.tld/agents/booker@sha256:00"},
		{Owner: "Log Ltd", Archetype: genesis.ArchetypeMonitor, GovernanceZone: "staging", Scope: []string{"audit:read"},
			IssuedAt: at, TrustTier: genesis.TierVerified, VerificationPath: genesis.PathLogAnchored,
			LogInclusionProof: json.RawMessage(`{"tree_size":7,"hashes":["aa","bb"],"leaf_index":3}`)},
		{Owner: "Lab", Archetype: genesis.ArchetypeAnalyst, GovernanceZone: "sandbox", Scope: []string{"x:y"},
			IssuedAt: at, TrustTier: genesis.TierExperimental,
			Extra: map[string]any{"x-note": "unknown members are covered too", "x-n": 1.5e-7, "x-nested": []any{map[string]any{"\u20ac": nil}}}},
	}
	var out [][]byte
	for _, tmpl := range templates {
		g, err := genesis.Create(tmpl, fuzzIssuer())
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, g.Bytes())
	}
	return out
}

// signedInputs maps the signing input of every document fuzzGeneses
// signs, so that a fuzzed document that verifies with the fixed key can
// be checked to say what a signed one says.
func signedInputs(tb testing.TB, docs [][]byte) map[string]bool {
	tb.Helper()
	m := map[string]bool{}
	for _, d := range docs {
		g, err := genesis.Load(d)
		if err != nil {
			tb.Fatalf("a created seed does not load: %v", err)
		}
		m[string(g.SigningInput())] = true
	}
	return m
}

var genesisReasons = map[string]bool{
	genesis.ReasonMalformed: true, genesis.ReasonFieldMissing: true, genesis.ReasonFieldInvalid: true,
	genesis.ReasonHashMismatch: true, genesis.ReasonSignatureInvalid: true,
}

func checkGenesisError(t *testing.T, what string, err error) {
	t.Helper()
	var ge *genesis.Error
	if !errors.As(err, &ge) || !genesisReasons[ge.Reason] {
		t.Fatalf("%s: %v is not a *genesis.Error with a known reason", what, err)
	}
}

// FuzzGenesis feeds a peer's Genesis through Parse, Load and
// ComputeAgentID. A document that parses has one JCS form, however it
// was spelled; its Agent-ID is the hash of that form; it verifies exactly
// when its canonical re-encoding does; a document that verifies with the
// fixed issuer key says what that key signed; and re-signing what
// ParseForSigning returns gives a document that loads.
func FuzzGenesis(f *testing.F) {
	docs := fuzzGeneses(f)
	for _, d := range docs {
		f.Add(d)
		// The same document spelled differently: members reordered,
		// whitespace, escapes. All of it must load.
		var buf bytes.Buffer
		if err := json.Indent(&buf, d, " ", "\t"); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
		var generic map[string]any
		if err := json.Unmarshal(d, &generic); err != nil {
			f.Fatal(err)
		}
		reordered, _ := json.Marshal(generic) // escapes <, >, & and U+2028
		f.Add(reordered)
		// A tampered copy: one member changed after signing.
		f.Add(bytes.Replace(d, []byte(`"owner":"`), []byte(`"owner":"X`), 1))
	}
	f.Add([]byte(`{"agent_id":"` + strings.Repeat("0", 64) + `"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"owner":"a","owner":"b"}`))
	signed := signedInputs(f, docs)
	priv := fuzzIssuer()
	pub := priv.Public().(ed25519.PublicKey)

	f.Fuzz(func(t *testing.T, data []byte) {
		id, idErr := genesis.ComputeAgentID(data)
		obj, objErr := jcs.ParseObject(data)
		if (idErr == nil) != (objErr == nil) {
			t.Fatalf("ComputeAgentID error %v, jcs.ParseObject error %v", idErr, objErr)
		}
		if idErr != nil {
			checkGenesisError(t, "ComputeAgentID", idErr)
		} else {
			delete(obj, genesis.FieldAgentID)
			delete(obj, genesis.FieldSignature)
			in, err := jcs.Append(nil, obj)
			if err != nil {
				t.Fatalf("a parsed object does not encode: %v", err)
			}
			sum := sha256.Sum256(in)
			if id != hex.EncodeToString(sum[:]) {
				t.Fatalf("ComputeAgentID = %s, want the SHA-256 of %s", id, in)
			}
		}

		g, err := genesis.Parse(data)
		loaded, loadErr := genesis.Load(data)
		if err != nil {
			checkGenesisError(t, "Parse", err)
			if loadErr == nil {
				t.Fatal("Load accepted what Parse refuses")
			}
			return
		}
		if len(data) > genesis.MaxSize {
			t.Fatalf("Parse accepted %d bytes", len(data))
		}
		if !bytes.Equal(g.Bytes(), data) {
			t.Fatal("Bytes is not the document as parsed")
		}
		if idErr != nil || g.ComputeAgentID() != id {
			t.Fatalf("method ComputeAgentID %s, function %s, %v", g.ComputeAgentID(), id, idErr)
		}
		sum := sha256.Sum256(g.IDInput())
		if id != hex.EncodeToString(sum[:]) {
			t.Fatal("the Agent-ID is not the SHA-256 of IDInput")
		}

		// One canonical form, whatever the spelling.
		canon := g.Canonical()
		if c, err := jcs.Canonicalize(data); err != nil || !bytes.Equal(c, canon) {
			t.Fatalf("Canonical %s, jcs.Canonicalize %s, %v", canon, c, err)
		}
		if len(canon) > genesis.MaxSize {
			// Numbers can spell shorter than their canonical form (9e20
			// against 900000000000000000000), so a document at the size
			// bound may have a canonical form beyond it; the registry
			// keeps the bytes as received, never the canonical form.
			return
		}
		g2, err := genesis.Parse(canon)
		if err != nil {
			t.Fatalf("the canonical form does not parse: %v", err)
		}
		if !bytes.Equal(g2.Canonical(), canon) || g2.ComputeAgentID() != id || !bytes.Equal(g2.SigningInput(), g.SigningInput()) {
			t.Fatal("the canonical form is not stable across a re-parse")
		}
		verr, verr2 := g.Verify(), g2.Verify()
		if (verr == nil) != (verr2 == nil) {
			t.Fatalf("the document verifies (%v) but its canonical form does not (%v), or the reverse", verr, verr2)
		}
		if (verr == nil) != (loadErr == nil) {
			t.Fatalf("Verify %v, Load %v", verr, loadErr)
		}
		if verr != nil {
			checkGenesisError(t, "Verify", verr)
		} else {
			if loaded.AgentID != id || loaded.ComputeAgentID() != loaded.AgentID {
				t.Fatalf("a loaded Genesis has agent_id %s, recomputed %s", loaded.AgentID, id)
			}
			if bytes.Equal(loaded.IssuerPublicKey, pub) && !signed[string(loaded.SigningInput())] {
				t.Fatalf("a document the fixed issuer never signed verifies with its key:\n%s", loaded.SigningInput())
			}
		}

		// Re-signing: what ParseForSigning keeps must sign and load.
		ps, err := genesis.ParseForSigning(data, pub)
		if err != nil {
			t.Fatalf("ParseForSigning refuses a document Parse accepts: %v", err)
		}
		if ps.AgentID != ps.ComputeAgentID() {
			t.Fatal("ParseForSigning left a stale agent_id")
		}
		if !bytes.Equal(ps.IssuerPublicKey, pub) {
			return
		}
		if err := ps.Sign(priv); err != nil {
			t.Fatalf("Sign: %v", err)
		}
		re, err := genesis.Load(ps.Bytes())
		if err != nil {
			t.Fatalf("a re-signed document does not load: %v\n%s", err, ps.Bytes())
		}
		if re.AgentID != ps.AgentID || !bytes.Equal(re.Canonical(), ps.Bytes()) {
			t.Fatal("a re-signed document changed when loaded")
		}
	})
}
