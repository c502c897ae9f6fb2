package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/services/jcs"
)

// newArgs are the flags of a valid Tier 2 Genesis; issued-at is fixed so
// that the same key gives the same Agent-ID.
func newArgs(key string, extra ...string) []string {
	return append([]string{"genesis", "new", "--owner", "Acme Corp", "--archetype", "assistant", "--zone", "development",
		"--scope", "documents:read, orders:read", "--scope", "reports:run", "--label", "helper",
		"--issued-at", "2026-01-15T09:00:00Z", "--key", key}, extra...)
}

// makeGenesis runs `genesis new` into a file and returns its path and
// Agent-ID.
func makeGenesis(t *testing.T, dir, key string, extra ...string) (string, string) {
	t.Helper()
	out := filepath.Join(dir, "g-"+strconv.Itoa(len(extra))+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".json")
	r := run(t, "", false, newArgs(key, append(extra, "--out", out)...)...)
	if r.code != ExitOK {
		t.Fatalf("genesis new: exit %d\n%s", r.code, r.stderr)
	}
	return out, strings.TrimSpace(r.stdout)
}

func loadFile(t *testing.T, path string) *genesis.Genesis {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := genesis.Load([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		t.Fatalf("%s does not load: %v", path, err)
	}
	return g
}

// editFile changes members of a Genesis file without signing it again.
func editFile(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := jcs.ParseObject([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		t.Fatal(err)
	}
	edit(obj)
	out, err := jcs.Append(nil, obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGenesisUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string // on stdout for help, else on stderr
	}{
		{"help lists every subcommand", []string{"genesis", "--help"}, ExitOK, "agtp genesis register --cacert FILE"},
		{"subcommand help", []string{"genesis", "sign", "-h"}, ExitOK, "usage: agtp genesis sign --key FILE"},
		{"top-level help lists genesis", []string{"--help"}, ExitOK, "genesis  make, sign, verify and register"},
		{"no subcommand", []string{"genesis"}, ExitError, "usage: agtp genesis new"},
		{"unknown subcommand", []string{"genesis", "mint"}, ExitError, `unknown command "mint"`},
		{"unknown flag", []string{"genesis", "id", "--frob", "x"}, ExitError, "flag provided but not defined: -frob"},
		{"verify wants a file", []string{"genesis", "verify"}, ExitError, "name a GENESIS file"},
		{"register wants mTLS", []string{"genesis", "register", "g.json"}, ExitError, "--cacert .state/ca.pem --cert .state/admin.pem --key-tls .state/admin-key.pem"},
		{"register takes one way", []string{"genesis", "register", "--grpc", "h:1", "--admin", "https://h", "g.json"}, ExitError, "give one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", false, tc.args...)
			got := r.stderr
			if tc.code == ExitOK {
				got = r.stdout
			}
			if r.code != tc.code || !strings.Contains(got, tc.out) {
				t.Fatalf("exit %d (want %d), output does not say %q:\nstdout %s\nstderr %s", r.code, tc.code, tc.out, r.stdout, r.stderr)
			}
		})
	}
}
