package cli

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func completionScript(t *testing.T, shell string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"completion", shell}, Env{Stdout: &out, Stderr: &errOut}); code != ExitOK {
		t.Fatalf("agtp completion %s: exit %d: %s", shell, code, errOut.String())
	}
	return out.String()
}

// TestBashCompletion loads the script into a real bash and asks it what
// it offers, as a user pressing Tab would.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is needed to test the completion script:", err)
	}
	script := completionScript(t, "bash")
	cases := []struct {
		words       []string // the line, the last word being completed
		want, avoid []string
	}{
		{[]string{"agtp", "QU"}, []string{"QUERY"}, []string{"DISCOVER"}},
		{[]string{"agtp", "au"}, []string{"audit"}, nil},
		{[]string{"agtp", "genesis", ""}, []string{"new", "request-cert"}, []string{"QUERY"}},
		{[]string{"agtp", "completion", "f"}, []string{"fish"}, nil},
		{[]string{"agtp", "QUERY", "--ve"}, []string{"--verbose", "--verify-attribution"}, []string{"--json"}},
		{[]string{"agtp", "--re"}, []string{"--retry"}, nil},
		{[]string{"agtp", "QUERY", "ag"}, []string{"agtp://"}, nil},
		{[]string{"agtp", "--scope", ""}, nil, []string{"QUERY"}},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.words, " "), func(t *testing.T) {
			quoted := make([]string, len(tc.words))
			for i, w := range tc.words {
				quoted[i] = "'" + w + "'"
			}
			prog := script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
				strconv.Itoa(len(tc.words)-1) + "\n_agtp 2>/dev/null\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
			out, err := exec.Command(bash, "--norc", "--noprofile", "-c", prog).CombinedOutput()
			if err != nil {
				t.Fatalf("bash: %v\n%s", err, out)
			}
			got := strings.Fields(string(out))
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("offered %v, want %q among them", got, w)
				}
			}
			for _, w := range tc.avoid {
				if slices.Contains(got, w) {
					t.Errorf("offered %v, want no %q", got, w)
				}
			}
		})
	}
}

// TestZshAndFishCompletionCoverEveryFlag checks the other two scripts
// list every flag and command the command parses, and nothing breaks
// their quoting.
func TestZshAndFishCompletionCoverEveryFlag(t *testing.T) {
	fs, _ := requestFlags(io.Discard)
	for _, shell := range []string{"zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			script := completionScript(t, shell)
			for _, f := range fs.specs {
				for _, n := range f.names {
					var want string
					switch {
					case shell == "zsh":
						want = "'" + spelled(n) + "["
					case len(n) == 1:
						want = " -s " + n
					default:
						want = " -l " + n
					}
					if !strings.Contains(script, want) {
						t.Errorf("%s script lacks flag %s (%q)", shell, n, want)
					}
				}
			}
			for _, name := range commandOrder {
				if !strings.Contains(script, name) {
					t.Errorf("%s script lacks command %s", shell, name)
				}
			}
			for i, line := range strings.Split(script, "\n") {
				unescaped := strings.ReplaceAll(strings.ReplaceAll(line, `'\''`, ""), `\'`, "")
				if strings.Count(unescaped, "'")%2 != 0 {
					t.Errorf("%s line %d has unbalanced quotes: %s", shell, i+1, line)
				}
			}
		})
	}
	var errOut bytes.Buffer
	if code := Run(context.Background(), []string{"completion", "powershell"}, Env{Stdout: &bytes.Buffer{}, Stderr: &errOut}); code != ExitError || !strings.Contains(errOut.String(), "bash, zsh, fish") {
		t.Errorf("an unknown shell: exit %d, %q", code, errOut.String())
	}
}
