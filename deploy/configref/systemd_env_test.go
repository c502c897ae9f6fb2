package configref

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/policysvc"
)

// systemdEnv reads the shipped /etc/agtp/common.env and <service>.env as
// agtp@<service>.service does (later files win).
func systemdEnv(t *testing.T, service string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, f := range []string{"common.env", service + ".env"} {
		b, err := os.ReadFile(filepath.Join(deployRoot, "systemd", "env", f))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, _ := strings.Cut(line, "=")
			env[k] = v
		}
	}
	return env
}

// TestSystemdPolicysvcAGPExecutePolicyIsNotOpen: docs/operations.md
// ("Settings that warn"): set AGTP_AGP_EXECUTE_POLICY=confirm (or strict)
// before exposing the suite. The systemd env files are the VM install's
// configuration, with the front door (AGP on by default) on 0.0.0.0.
func TestSystemdPolicysvcAGPExecutePolicyIsNotOpen(t *testing.T) {
	env := systemdEnv(t, "policysvc")
	cfg := policysvc.DefaultConfig()
	if err := cfg.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if p := cfg.AGP.ExecutePolicy; p != "confirm" && p != "strict" {
		t.Errorf("deploy/systemd/env/policysvc.env leaves the AGP execute policy %q: AGP executes need no confirmation token", p)
	}
}
