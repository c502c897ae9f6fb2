package demo

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
)

func TestEnsureCreatesOnceAndReuses(t *testing.T) {
	dir := t.TempDir()
	a, err := Ensure(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Created || a.Name != "demo-agent" || a.AgentID != a.Genesis.ComputeAgentID() {
		t.Fatalf("first Ensure: %+v", a)
	}
	if !slices.Equal(a.Genesis.Scope, Scopes) || a.Genesis.TrustTier != genesis.TierOrgAsserted {
		t.Fatalf("demo Genesis %+v", a.Genesis)
	}
	st, err := os.Stat(a.KeyPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v %v", st.Mode(), err)
	}
	data, _ := os.ReadFile(a.GenesisPath)
	if _, err := genesis.Load(data[:len(data)-1]); err != nil {
		t.Fatalf("stored Genesis does not verify: %v", err)
	}

	b, err := Ensure(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.Created || b.AgentID != a.AgentID || string(b.Genesis.Bytes()) != string(a.Genesis.Bytes()) {
		t.Fatal("second Ensure must reuse the same key and Genesis")
	}
	req := b.Request()
	if !req.GetActivate() || req.GetName() != "demo-agent" || req.GetGenesis() != string(a.Genesis.Bytes()) {
		t.Fatalf("request %v", req)
	}
}

func TestEnsureRefusesInconsistentState(t *testing.T) {
	dir := t.TempDir()
	if _, err := Ensure(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, KeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(dir); err == nil {
		t.Fatal("a Genesis without its key must not be replaced silently")
	}

	other := t.TempDir()
	if _, err := Ensure(other); err != nil {
		t.Fatal(err)
	}
	// Put another agent's key next to this Genesis.
	third := t.TempDir()
	if _, err := Ensure(third); err != nil {
		t.Fatal(err)
	}
	k, _ := os.ReadFile(filepath.Join(third, KeyFile))
	if err := os.WriteFile(filepath.Join(other, KeyFile), k, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(other); err == nil {
		t.Fatal("a Genesis issued by another key was accepted")
	}

	bad := t.TempDir()
	if _, err := Ensure(bad); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, GenesisFile), []byte(`{"owner":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(bad); err == nil {
		t.Fatal("a corrupt Genesis was accepted")
	}
}
