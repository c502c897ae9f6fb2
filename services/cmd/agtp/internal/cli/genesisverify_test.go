package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
)

func TestGenesisVerifyNamesTheReason(t *testing.T) {
	dir := t.TempDir()
	good, id := makeGenesis(t, dir, filepath.Join(dir, "issuer.key"))
	goodBytes, _ := os.ReadFile(good)
	variant := func(edit func(map[string]any)) string {
		p := filepath.Join(t.TempDir(), "g.json")
		if err := os.WriteFile(p, goodBytes, 0o644); err != nil {
			t.Fatal(err)
		}
		editFile(t, p, edit)
		return p
	}
	notJSON := filepath.Join(dir, "not.json")
	if err := os.WriteFile(notJSON, []byte("owner: acme\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	otherSig, _ := makeGenesis(t, dir, filepath.Join(dir, "other.key"))
	sigOf := func(p string) any {
		var v any
		editFile(t, p, func(o map[string]any) { v = o["signature"] })
		return v
	}

	for _, tc := range []struct {
		name string
		file string
		code int
		say  string
	}{
		{"a valid Genesis verifies", good, ExitOK, "verified\n  agent-id:   " + id},
		{"a changed agent_id is a hash mismatch", variant(func(o map[string]any) { o["agent_id"] = strings.Repeat("0", 64) }), ExitVerify, "INVALID: genesis-hash-mismatch: agent_id"},
		{"a changed member is a hash mismatch", variant(func(o map[string]any) { o["governance_zone"] = "production" }), ExitVerify, "INVALID: genesis-hash-mismatch"},
		{"another key's signature does not verify", variant(func(o map[string]any) { o["signature"] = sigOf(otherSig) }), ExitVerify, "INVALID: genesis-signature-invalid: signature"},
		{"an unsigned Genesis is not valid", variant(func(o map[string]any) { delete(o, "signature") }), ExitVerify, "INVALID: genesis-field-missing: signature"},
		{"a missing owner is named", variant(func(o map[string]any) { delete(o, "owner") }), ExitVerify, "INVALID: genesis-field-missing: owner"},
		{"a bad archetype is named", variant(func(o map[string]any) { o["archetype"] = "wizard" }), ExitVerify, "INVALID: genesis-field-invalid: archetype"},
		{"not JSON is malformed", notJSON, ExitVerify, "INVALID: genesis-malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", false, "genesis", "verify", tc.file)
			if r.code != tc.code || !strings.Contains(r.stdout, tc.say) {
				t.Fatalf("exit %d (want %d), stdout does not say %q:\n%s%s", r.code, tc.code, tc.say, r.stdout, r.stderr)
			}
		})
	}

	r := run(t, "", false, "genesis", "verify", good, notJSON)
	if r.code != ExitVerify || !strings.Contains(r.stdout, good+": verified") {
		t.Fatalf("one bad file of two: exit %d\n%s", r.code, r.stdout)
	}
	r = run(t, "", false, "genesis", "verify", filepath.Join(dir, "nope.json"))
	if r.code != ExitError || !strings.Contains(r.stderr, "no such file") {
		t.Fatalf("missing file: exit %d\n%s", r.code, r.stderr)
	}
	r = run(t, string(goodBytes), false, "genesis", "verify", "-")
	if r.code != ExitOK || !strings.Contains(r.stdout, "stdin: verified") {
		t.Fatalf("stdin: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestGenesisIDIsRecomputedNotRead(t *testing.T) {
	dir := t.TempDir()
	path, id := makeGenesis(t, dir, filepath.Join(dir, "issuer.key"))

	r := run(t, "", false, "genesis", "id", path)
	if r.code != ExitOK || r.stdout != id+"\n" || r.stderr != "" {
		t.Fatalf("id: exit %d, stdout %q, stderr %q; want %s", r.code, r.stdout, r.stderr, id)
	}

	// A forged agent_id does not change the answer.
	editFile(t, path, func(o map[string]any) { o["agent_id"] = strings.Repeat("a", 64) })
	r = run(t, "", false, "genesis", "id", path)
	if r.code != ExitOK || r.stdout != id+"\n" || !strings.Contains(r.stderr, "stale") {
		t.Fatalf("forged agent_id: stdout %q, stderr %q; want %s", r.stdout, r.stderr, id)
	}

	// An edit does, and the answer is the ID the edit gives.
	editFile(t, path, func(o map[string]any) { o["owner"] = "Other Corp"; delete(o, "agent_id"); delete(o, "signature") })
	data, _ := os.ReadFile(path)
	want, err := genesis.ComputeAgentID(data)
	if err != nil {
		t.Fatal(err)
	}
	r = run(t, string(data), false, "genesis", "id", "-")
	if r.code != ExitOK || r.stdout != want+"\n" || want == id || !strings.Contains(r.stderr, "no agent_id member") {
		t.Fatalf("edited: stdout %q, stderr %q; want %s", r.stdout, r.stderr, want)
	}

	r = run(t, "[1,2]", false, "genesis", "id", "-")
	if r.code != ExitVerify || !strings.Contains(r.stderr, "genesis-malformed") {
		t.Fatalf("not an object: exit %d\n%s", r.code, r.stderr)
	}
}
