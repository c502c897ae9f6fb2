package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/keyfile"
)

func TestGenesisNewCreatesTheKeyOnceAndASignedGenesis(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	path, id := makeGenesis(t, dir, key)

	st, err := os.Stat(key)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("issuer key: %v, mode %v; want a 0600 file", err, st.Mode())
	}
	priv, err := keyfile.ReadEd25519(key)
	if err != nil {
		t.Fatal(err)
	}
	g := loadFile(t, path)
	if !agtp.IsCanonicalID(id) || id != g.AgentID || id != g.ComputeAgentID() {
		t.Fatalf("stdout Agent-ID %q, Genesis agent_id %s", id, g.AgentID)
	}
	if !g.IssuerPublicKey.Equal(priv.Public()) {
		t.Fatal("the Genesis is not issued by the key file")
	}
	if g.Owner != "Acme Corp" || g.Archetype != genesis.ArchetypeAssistant || g.GovernanceZone != "development" ||
		!slices.Equal(g.Scope, []string{"documents:read", "orders:read", "reports:run"}) ||
		g.TrustTier != genesis.TierOrgAsserted || g.VerificationPath != genesis.PathOrgAsserted || g.OrgLabel != "helper" {
		t.Fatalf("members: %s", g.Bytes())
	}

	// The same key and content give the same Agent-ID: the key was
	// reused, not replaced.
	r := run(t, "", false, newArgs(key)...)
	if r.code != ExitOK || strings.Contains(r.stderr, "created issuer key") {
		t.Fatalf("second run: exit %d\n%s", r.code, r.stderr)
	}
	g2, err := genesis.Load([]byte(strings.TrimSpace(r.stdout)))
	if err != nil {
		t.Fatalf("stdout is not a verified Genesis: %v\n%s", err, r.stdout)
	}
	if g2.AgentID != id || !strings.Contains(r.stderr, "Agent-ID: "+id) {
		t.Fatalf("without --out: Agent-ID %s, stderr %q; want %s on stderr", g2.AgentID, r.stderr, id)
	}
}

func TestGenesisNewNamesTheFlagOfARefusedValue(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
		drop  string // a flag of newArgs to leave out
		say   string
	}{
		{"owner is required", nil, "--owner", "missing --owner"},
		{"archetype must be one of five", []string{"--archetype", "wizard"}, "", "--archetype: \"wizard\" is not one of"},
		{"scope tokens are resource:action", []string{"--scope", "nocolon"}, "", "--scope:"},
		{"tier 1 names its path", []string{"--tier", "1"}, "", "--path:"},
		{"tier is 1, 2 or 3", []string{"--tier", "7"}, "", "--tier: must be the number 1, 2 or 3"},
		{"dns-anchored needs the domain", []string{"--tier", "1", "--path", "dns-anchored"}, "", "--org-domain:"},
		{"log-anchored needs a proof", []string{"--tier", "1", "--path", "log-anchored"}, "", "--log-proof:"},
		{"issued-at is RFC 3339", []string{"--issued-at", "yesterday"}, "", "--issued-at \"yesterday\" is not an RFC 3339 time"},
		{"log proof is JSON", []string{"--log-proof", "{nope"}, "", "--log-proof is not JSON"},
		{"no positional arguments", []string{"extra"}, "", "unexpected argument \"extra\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := filepath.Join(t.TempDir(), "issuer.key")
			args := newArgs(key)
			if tc.drop != "" {
				i := slices.Index(args, tc.drop)
				args = slices.Delete(args, i, i+2)
			}
			// Later flags win, so extra values replace newArgs' ones.
			args = append(args, tc.extra...)
			r := run(t, "", false, args...)
			if r.code != ExitError || !strings.Contains(r.stderr, tc.say) {
				t.Fatalf("exit %d, stderr does not say %q:\n%s", r.code, tc.say, r.stderr)
			}
			if r.stdout != "" {
				t.Fatalf("a refused Genesis printed %q", r.stdout)
			}
			if _, err := os.Stat(key); err == nil {
				t.Fatal("a key was left behind for a refused Genesis")
			}
		})
	}
}

func TestGenesisNewTier1WithItsAnchors(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	proof := filepath.Join(dir, "proof.json")
	if err := os.WriteFile(proof, []byte(`{"log":"rekor","index":7}`), 0o644); err != nil {
		t.Fatal(err)
	}
	path, _ := makeGenesis(t, dir, key, "--tier", "1", "--path", "log-anchored", "--log-proof", "@"+proof, "--package-ref", "helper.agent")
	g := loadFile(t, path)
	if g.TrustTier != 1 || g.EffectivePath() != genesis.PathLogAnchored || string(g.LogInclusionProof) != `{"index":7,"log":"rekor"}` || g.PackageRef != "helper.agent" {
		t.Fatalf("tier 1 Genesis: %s", g.Bytes())
	}
	path, _ = makeGenesis(t, dir, key, "--tier", "1", "--path", "dns-anchored", "--org-domain", "acme.example")
	if g := loadFile(t, path); g.OrgDomain != "acme.example" || g.TrustWarning() != "" {
		t.Fatalf("dns-anchored Genesis: %s", g.Bytes())
	}
}
