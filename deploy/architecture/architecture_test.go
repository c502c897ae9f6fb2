// Package architecture holds the test of the suite's import rule
// (docs/architecture.md): a service imports another service only through
// that service's published libraries, never its server (the root package
// that assembles it, its commands) or its internal packages.
package architecture

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/agtpsuite/agtp/"

// services are the independently run services; each owns the packages
// under its directory.
var services = []string{"frontdoor", "catalogsvc", "policysvc", "rcnssvc", "identitysvc", "auditsvc"}

// published are the packages of each service that agents, other systems
// and the other services may import. A new public package is added here
// and to docs/architecture.md, deliberately.
var published = map[string][]string{
	"frontdoor":   {"frontdoor/handler", "frontdoor/demo"},
	"catalogsvc":  {"catalogsvc/endpoint", "catalogsvc/route", "catalogsvc/watch", "catalogsvc/demo", "catalogsvc/intent"},
	"policysvc":   {"policysvc/agpkey", "policysvc/policyclient"},
	"rcnssvc":     {"rcnssvc/recipe", "rcnssvc/demo"},
	"identitysvc": {"identitysvc/agentcert", "identitysvc/callerpolicy", "identitysvc/demo", "identitysvc/genesis", "identitysvc/identitydoc", "identitysvc/reasons", "identitysvc/sessionbind"},
	"auditsvc":    {"auditsvc/attribution", "auditsvc/attribution/attributionpb", "auditsvc/auditclient", "auditsvc/inspect"},
}

// assemblers import every service's server on purpose: the one-process
// suite, and the repository's tests and tooling, which start services or
// read their access tables and settings.
var assemblers = []string{"services/suite", "e2e", "deploy"}

// pkg is what the rule reads of `go list -json`.
type pkg struct {
	ImportPath string
	Imports    []string
}

// owner is the service a package belongs to, "" for the shared libraries.
func owner(p string) string {
	first, _, _ := strings.Cut(p, "/")
	if slices.Contains(services, first) {
		return first
	}
	return ""
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// violations lists the imports that break the rule; paths are relative to
// the module.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		if slices.ContainsFunc(assemblers, func(a string) bool { return under(p.ImportPath, a) }) {
			continue
		}
		from := owner(p.ImportPath)
		for _, imp := range p.Imports {
			to := owner(imp)
			if to == "" || to == from || slices.Contains(published[to], imp) {
				continue
			}
			out = append(out, fmt.Sprintf("%s imports %s, which is not one of %s's published libraries %v", p.ImportPath, imp, to, published[to]))
		}
	}
	return out
}

// publicOf lists a service's packages outside internal/ and cmd/, other
// than its root: the ones that must be in published.
func publicOf(pkgs []pkg, svc string) []string {
	var out []string
	for _, p := range pkgs {
		if owner(p.ImportPath) != svc || p.ImportPath == svc || under(p.ImportPath, svc+"/cmd") ||
			strings.Contains("/"+p.ImportPath+"/", "/internal/") {
			continue
		}
		out = append(out, p.ImportPath)
	}
	return out
}

// listModule runs `go list -json` over the module from its root, once
// for the tests of this package, with paths relative to the module.
func listModule(t *testing.T) []pkg {
	t.Helper()
	pkgs, err := goList()
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 50 {
		t.Fatalf("go list found %d packages; is this the module root?", len(pkgs))
	}
	return pkgs
}

var goList = sync.OnceValues(func() ([]pkg, error) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		p.ImportPath = strings.TrimPrefix(p.ImportPath, module)
		var imps []string
		for _, imp := range p.Imports {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				imps = append(imps, rel)
			}
		}
		p.Imports = imps
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
})

func TestNoServiceImportsAnotherServicesServer(t *testing.T) {
	pkgs := listModule(t)
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// The published list is the truth: every public package of a service is
// on it, nothing on it is missing, and docs/architecture.md names each.
func TestPublishedLibrariesAreListedAndDocumented(t *testing.T) {
	pkgs := listModule(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range services {
		public := publicOf(pkgs, svc)
		for _, p := range public {
			if !slices.Contains(published[svc], p) {
				t.Errorf("%s is a public package of %s but not in published: add it (and to docs/architecture.md) or move it under %s/internal", p, svc, svc)
			}
		}
		for _, p := range published[svc] {
			if !slices.Contains(public, p) {
				t.Errorf("published names %s, which is not a public package of %s", p, svc)
			}
			if !bytes.Contains(doc, []byte("`"+p+"`")) {
				t.Errorf("docs/architecture.md does not name `%s`", p)
			}
		}
	}
}

// The rule itself, on made-up packages: each case is one import.
func TestViolations(t *testing.T) {
	for _, tc := range []struct {
		name, from, imp string
		broken          bool
	}{
		{"a published library of another service", "rcnssvc/internal/server", "catalogsvc/route", false},
		{"another service's root package (its server)", "rcnssvc/internal/server", "catalogsvc", true},
		{"another service's command", "policysvc/internal/tasks", "identitysvc/cmd/identitysvc", true},
		{"another service's internal package", "frontdoor/internal/pipeline", "auditsvc/internal/chain", true},
		{"a public package not published", "frontdoor", "policysvc/unlisted", true},
		{"a shared library importing a server", "services/kit", "auditsvc", true},
		{"a service's own packages", "auditsvc", "auditsvc/internal/chain", false},
		{"the shared libraries", "catalogsvc/internal/store", "services/rediskeys", false},
		{"the one-process suite assembles the servers", "services/suite", "frontdoor", false},
		{"e2e starts the servers", "e2e", "identitysvc", false},
		{"deploy reads the servers' settings", "deploy/configref", "policysvc", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := violations([]pkg{{ImportPath: tc.from, Imports: []string{tc.imp}}})
			if (len(got) > 0) != tc.broken {
				t.Fatalf("%s -> %s: violations %q, want broken=%v", tc.from, tc.imp, got, tc.broken)
			}
		})
	}
}
