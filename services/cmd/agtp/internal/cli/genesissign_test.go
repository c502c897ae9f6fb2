package cli

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/identitysvc/demo"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
)

func TestGenesisSignMakesAnEditedGenesisVerifyAgain(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	path, oldID := makeGenesis(t, dir, key)
	editFile(t, path, func(o map[string]any) { o["owner"] = "Other Corp"; o["x_note"] = "kept" })

	r := run(t, "", false, "genesis", "verify", path)
	if r.code != ExitVerify || !strings.Contains(r.stdout, "INVALID: genesis-hash-mismatch: agent_id") || !strings.Contains(r.stdout, "agtp genesis sign") {
		t.Fatalf("edited Genesis: exit %d\n%s", r.code, r.stdout)
	}

	r = run(t, "", false, "genesis", "sign", "--key", key, path)
	if r.code != ExitOK {
		t.Fatalf("sign: exit %d\n%s", r.code, r.stderr)
	}
	newID := strings.TrimSpace(r.stdout)
	g := loadFile(t, path)
	if newID == oldID || newID != g.AgentID || !strings.Contains(r.stderr, "the Agent-ID changed: "+newID+" was "+oldID) {
		t.Fatalf("sign: stdout %q stderr %q, file agent_id %s (was %s)", newID, r.stderr, g.AgentID, oldID)
	}
	if v, _ := g.Member("x_note"); g.Owner != "Other Corp" || v != "kept" {
		t.Fatalf("edits lost: %s", g.Bytes())
	}
	if r := run(t, "", false, "genesis", "verify", path); r.code != ExitOK {
		t.Fatalf("re-signed Genesis: exit %d\n%s", r.code, r.stdout)
	}
}

func TestGenesisSignCompletesAnUnsignedDocument(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	priv, err := demo.WriteNewKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// No agent_id, issuer_public_key or signature: written by hand.
	doc := `{"owner":"Acme Corp","archetype":"monitor","governance_zone":"production",
	  "scope":["metrics:read"],"issued_at":"2026-02-01T00:00:00Z","trust_tier":3}`
	r := run(t, doc, false, "genesis", "sign", "--key", key, "-")
	if r.code != ExitOK {
		t.Fatalf("sign -: exit %d\n%s", r.code, r.stderr)
	}
	g, err := genesis.Load([]byte(strings.TrimSpace(r.stdout)))
	if err != nil {
		t.Fatalf("stdout is not a verified Genesis: %v\n%s", err, r.stdout)
	}
	pub, _ := priv.Public().(ed25519.PublicKey)
	if !g.IssuerPublicKey.Equal(pub) || !strings.Contains(r.stderr, "Agent-ID: "+g.AgentID) {
		t.Fatalf("issuer %x, stderr %q", g.IssuerPublicKey, r.stderr)
	}
}

func TestGenesisSignRefusesAnotherIssuersKey(t *testing.T) {
	dir := t.TempDir()
	path, _ := makeGenesis(t, dir, filepath.Join(dir, "issuer.key"))
	before, _ := os.ReadFile(path)
	other := filepath.Join(dir, "other.key")
	if _, err := demo.WriteNewKey(other); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		say  string
	}{
		{"another issuer", []string{"--key", other, path}, "is not the issuer of"},
		{"no key", []string{path}, "--key FILE is required"},
		{"missing key file", []string{"--key", filepath.Join(dir, "nope.key"), path}, "no such file"},
		{"not a key", []string{"--key", path, path}, "not a PEM PRIVATE KEY"},
		{"two files", []string{"--key", other, path, path}, "want one GENESIS file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", false, append([]string{"genesis", "sign"}, tc.args...)...)
			if r.code != ExitError || !strings.Contains(r.stderr, tc.say) {
				t.Fatalf("exit %d, stderr does not say %q:\n%s", r.code, tc.say, r.stderr)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Fatal("a refused sign changed the file")
			}
		})
	}
}
