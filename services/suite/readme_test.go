package suite

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeWalkthroughRunsAsWritten runs the commands of the README's
// "Try it" block, as a newcomer pastes them into a shell, against the
// suite started as make run starts it: the embedded Redis, the
// development PKI and the demo agent in .state/. Only the suite's two
// public addresses differ (free ports, so the test can run beside a
// make run), and with them where the CLI fetches the server's JWKS
// (AGTP_JWKS_URL, as its default is the README's HTTPS port). When a
// security default tightens, or a command or file the walkthrough names
// changes, this fails until the README says what now works.
func TestReadmeWalkthroughRunsAsWritten(t *testing.T) {
	for _, tool := range []string{"bash", "go", "curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the README's walkthrough needs %s (make test installs curl and python3): %v", tool, err)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	script := readmeShellBlock(t, filepath.Join(root, "README.md"), "### Try it")

	// The walkthrough runs in the checkout (it builds bin/agtp and reads
	// .state/); a directory that links everything else of the checkout
	// gives it its own bin/ and .state/ without touching the real ones.
	work := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case ".git", ".state", "bin":
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(work, e.Name())); err != nil {
			t.Fatal(err)
		}
	}

	s := startTestSuite(t, Config{StateDir: filepath.Join(work, ".state"), RedisURL: embeddedRedis})
	const readmeAGTP, readmeHTTPS = "127.0.0.1:4480", "127.0.0.1:4443"
	for _, addr := range []string{readmeAGTP, readmeHTTPS} {
		if !strings.Contains(script, addr) {
			t.Fatalf("the walkthrough no longer uses %s; update this test's addresses", addr)
		}
	}
	script = strings.NewReplacer(readmeAGTP, s.AGTPAddr(), readmeHTTPS, s.HTTPSAddr()).Replace(script)

	// Every command that fails is written down, with its status, rather
	// than stopping the walk: one of them is meant to fail.
	failures := filepath.Join(work, "failures")
	cmd := exec.Command("bash", "-o", "pipefail", "-c",
		`trap 'echo "$? $BASH_COMMAND" >> "$WALK_FAILURES"' ERR`+"\n"+script)
	cmd.Dir = work
	cmd.Env = append(walkthroughEnv(), "WALK_FAILURES="+failures,
		"AGTP_JWKS_URL=https://"+s.HTTPSAddr()+"/.well-known/jwks.json")
	out, err := cmd.CombinedOutput()
	t.Logf("walkthrough output:\n%s", out)
	if err != nil {
		t.Fatalf("walkthrough: %v", err)
	}

	failed, err := os.ReadFile(failures)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	wantFailed := "4 bin/agtp $C --agent-id $AGENT QUERY agtp://" + s.AGTPAddr() + "/orders/ord-1001\n"
	if string(failed) != wantFailed {
		t.Errorf("failed commands (status and command):\n%s\nwant only the bare Agent-ID header's 4xx:\n%s", failed, wantFailed)
	}
	for _, want := range []string{
		"< AGTP/1.0 200 OK",      // DISCOVER -v shows the wire
		"* attribution verified", // --verify-attribution
		`"status":401,"reason":"agent-unauthenticated"`,
		"X-Idempotent-Replayed: true",
		"records verified, head",   // audit verify
		`"content":{"hello":"me"}`, // the inbox holds the notification
		`"agtp_version"`,           // the well-known document over HTTPS
		`"status":"paid"`,          // the PURCHASE within its budget
		`"methods":["AUTHORIZE"`,   // AGP discover
		`"status":"succeeded"`,     // AGP query
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the walkthrough's output lacks %q", want)
		}
	}
}

// readmeShellBlock is the first ```sh block after the heading.
func readmeShellBlock(t *testing.T, path, heading string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b strings.Builder
	inSection, inBlock := false, false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		switch {
		case !inSection:
			inSection = line == heading
		case !inBlock:
			inBlock = line == "```sh"
		case line == "```":
			return b.String()
		default:
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	t.Fatalf("%s has no ```sh block after %q", path, heading)
	return ""
}

// walkthroughEnv is the test's environment without the AGTP_ settings a
// reader may have exported from make run's banner, which would change
// what the walkthrough's commands present.
func walkthroughEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGTP_") {
			env = append(env, kv)
		}
	}
	return env
}
