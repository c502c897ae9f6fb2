package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
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
		{"a negative delegation depth", []string{"--delegation-permitted", "--max-delegation-depth", "-1"}, "",
			`--max-delegation-depth "-1" is not an integer from 0 to 255`},
		{"a delegation depth over the limit", []string{"--delegation-permitted", "--max-delegation-depth", "256"}, "",
			`--max-delegation-depth "256" is not an integer from 0 to 255`},
		{"a fractional delegation depth", []string{"--max-delegation-depth", "1.5"}, "",
			`--max-delegation-depth "1.5" is not an integer from 0 to 255`},
		{"a delegation depth that is no number", []string{"--max-delegation-depth", "two"}, "",
			`--max-delegation-depth "two" is not an integer from 0 to 255`},
		{"an empty delegation depth", []string{"--max-delegation-depth", ""}, "",
			`--max-delegation-depth "" is not an integer from 0 to 255`},
		{"delegation-permitted is a boolean", []string{"--delegation-permitted=maybe"}, "",
			"invalid boolean value \"maybe\" for -delegation-permitted"},
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

// TestGenesisNewDelegationConsent: --delegation-permitted and
// --max-delegation-depth put the sub-agent's consent to delegated work
// into the signed Genesis (docs/decisions.md#D-delegation-consent), and
// without them the members are absent.
func TestGenesisNewDelegationConsent(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	plainID := ""
	for _, tc := range []struct {
		name      string
		flags     []string
		permitted any // the delegation_permitted member; nil when absent
		depth     any // the max_delegation_depth member; nil when absent
		note      string
	}{
		{"without the flags both members are absent", nil, nil, nil, ""},
		{"--delegation-permitted", []string{"--delegation-permitted"}, true, nil, ""},
		{"--delegation-permitted=true", []string{"--delegation-permitted=true"}, true, nil, ""},
		{"--delegation-permitted=false states the refusal", []string{"--delegation-permitted=false"}, false, nil, ""},
		{"with a depth of one hop", []string{"--delegation-permitted", "--max-delegation-depth", "1"}, true, 1.0, ""},
		{"with the largest depth", []string{"--max-delegation-depth=255", "--delegation-permitted"}, true, 255.0, ""},
		{"depth 0 takes no delegated work", []string{"--delegation-permitted", "--max-delegation-depth", "0"}, true, 0.0,
			"max_delegation_depth 0: the agent takes no delegated work"},
		{"a depth alone gives no consent", []string{"--max-delegation-depth", "2"}, nil, 2.0,
			"max_delegation_depth alone gives no consent: without --delegation-permitted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "g.json")
			r := run(t, "", false, newArgs(key, append(tc.flags, "--out", out)...)...)
			if r.code != ExitOK {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			if tc.note != "" && !strings.Contains(r.stderr, "note: "+tc.note) {
				t.Errorf("stderr does not note %q:\n%s", tc.note, r.stderr)
			}
			if tc.note == "" && strings.Contains(r.stderr, "note:") {
				t.Errorf("an unexpected note:\n%s", r.stderr)
			}
			// genesis.Load verifies the Agent-ID and the signature, which
			// cover the members.
			g := loadFile(t, out)
			raw, err := jcs.ParseObject(g.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			for member, want := range map[string]any{genesis.FieldDelegationPermitted: tc.permitted, genesis.FieldMaxDelegationDepth: tc.depth} {
				got, present := raw[member]
				if want == nil && present {
					t.Errorf("%s is %v, want it absent", member, got)
				}
				if want != nil && got != want {
					t.Errorf("%s is %v (present %v), want %v", member, got, present, want)
				}
			}
			if g.DelegationPermitted != (tc.permitted == true) {
				t.Errorf("DelegationPermitted %v, want %v", g.DelegationPermitted, tc.permitted)
			}
			if (g.MaxDelegationDepth == nil) != (tc.depth == nil) || g.MaxDelegationDepth != nil && float64(*g.MaxDelegationDepth) != tc.depth {
				t.Errorf("MaxDelegationDepth %v, want %v", g.MaxDelegationDepth, tc.depth)
			}
			id := strings.TrimSpace(r.stdout)
			switch {
			case tc.flags == nil:
				plainID = id
			case id == plainID:
				t.Errorf("the members did not change the Agent-ID %s", id)
			}
		})
	}
}
