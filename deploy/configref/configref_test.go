package configref

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/policysvc"
)

var update = flag.Bool("update", false, "rewrite the generated tables in docs/operations.md")

const (
	docPath    = "../../docs/operations.md"
	beginMark  = "<!-- BEGIN GENERATED: go test ./deploy/configref -update -->\n"
	endMark    = "<!-- END GENERATED -->\n"
	deployRoot = ".."
)

// TestOperationsDocListsEverySetting keeps the configuration reference in
// docs/operations.md equal to what the services' Config types bind and read.
func TestOperationsDocListsEverySetting(t *testing.T) {
	want, problems := Markdown()
	for _, p := range problems {
		t.Error(p)
	}
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", docPath, beginMark, endMark)
	}
	got := s[i+len(beginMark) : j]
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(s[:i+len(beginMark)]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("the configuration reference in docs/operations.md is stale: run go test ./deploy/configref -update\n--- want\n%s", want)
}

// TestReferenceSeesEverySetting pins the derivation itself on settings
// that exist, so a broken reader cannot produce an empty, "up to date" doc.
func TestReferenceSeesEverySetting(t *testing.T) {
	find := func(ref Reference, flagName, env string) bool {
		return slices.ContainsFunc(ref.Settings, func(s Setting) bool { return s.Flag == flagName && s.Env == env })
	}
	common := Common()
	for _, c := range [][2]string{{"grpc-addr", "GRPC_ADDR"}, {"redis-url", "REDIS_URL"}, {"ca", "AGTP_CA_FILE"}, {"shutdown-timeout", "SHUTDOWN_TIMEOUT"}, {"", "OTEL_EXPORTER_OTLP_ENDPOINT"}} {
		if !find(common, c[0], c[1]) {
			t.Errorf("common settings lack -%s / %s", c[0], c[1])
		}
	}
	byName := map[string]Reference{}
	for _, s := range Services() {
		byName[s.Name] = Read(s.Config)
	}
	for svc, c := range map[string][2]string{
		"frontdoor": {"agtp-addr", "AGTP_ADDR"}, "catalogsvc": {"endpoints-dir", "AGTP_ENDPOINTS_DIR"},
		"policysvc": {"options", "AGTP_POLICY_FILE"}, "auditsvc": {"verify-key", "AGTP_VERIFY_KEY_FILES"},
		"identitysvc": {"lifecycle-auth", "AGTP_LIFECYCLE_AUTH"},
	} {
		if !find(byName[svc], c[0], c[1]) {
			t.Errorf("%s lacks -%s / %s", svc, c[0], c[1])
		}
	}
	if !find(byName["identitysvc"], "", "AGTP_OPERATOR_FINGERPRINTS") {
		t.Error("identitysvc lacks the environment-only AGTP_OPERATOR_FINGERPRINTS")
	}
}

// known reports whether a service reads name; OTEL_* variables are read by
// the OpenTelemetry SDK itself, and goRuntimeEnv by the Go runtime.
func known(env map[string]bool, name string) bool {
	return env[name] || strings.HasPrefix(name, "OTEL_") || goRuntimeEnv[name]
}

// goRuntimeEnv are the Go runtime's settings a deployment may tune.
var goRuntimeEnv = map[string]bool{"GOMAXPROCS": true, "GOGC": true, "GOMEMLIMIT": true}

// TestKubernetesManifestsUseOnlyRealSettings reads every suite Deployment in
// deploy/k8s (bases and overlay patches) and checks that its environment
// and its flags are ones the service reads, that the shared ConfigMap holds
// only variables some service reads, and that the policy options and
// endpoint definitions shipped in ConfigMaps load.
func TestKubernetesManifestsUseOnlyRealSettings(t *testing.T) {
	svcs := map[string]Service{}
	anyEnv := map[string]bool{}
	for _, s := range Services() {
		svcs[s.Name] = s
		for e := range KnownEnv(s) {
			anyEnv[e] = true
		}
	}
	deployments := 0
	err := filepath.WalkDir(filepath.Join(deployRoot, "k8s"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" || filepath.Base(path) == "kustomization.yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc manifest
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Errorf("%s: %v", path, err)
				break
			}
			switch {
			case doc.Kind == "Deployment":
				svc, ok := svcs[doc.Metadata.Name]
				if !ok {
					continue
				}
				deployments++
				env, flags := KnownEnv(svc), KnownFlags(svc)
				for _, c := range doc.Spec.Template.Spec.Containers {
					for _, e := range c.Env {
						if !known(env, e.Name) {
							t.Errorf("%s: %s sets %s, which %s does not read", path, svc.Name, e.Name, svc.Name)
						}
					}
					for _, a := range c.Args {
						name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
						if !strings.HasPrefix(a, "-") || !flags[name] {
							t.Errorf("%s: %s is started with %q, which is not one of its flags", path, svc.Name, a)
						}
					}
				}
			case doc.Kind == "ConfigMap" && doc.Metadata.Name == "agtp-common":
				for k := range doc.Data {
					if !known(anyEnv, k) {
						t.Errorf("%s: agtp-common sets %s, which no service reads", path, k)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if deployments < len(svcs) {
		t.Fatalf("found %d suite Deployments under deploy/k8s, want at least %d", deployments, len(svcs))
	}

	t.Run("policy options load strictly", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(deployRoot, "k8s", "base", "policy.json"))
		if err != nil {
			t.Fatal(err)
		}
		var cfg policysvc.Config
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg.Options); err != nil {
			t.Fatalf("policy.json: %v", err)
		}
		if err := cfg.Options.WithDefaults().Validate(); err != nil {
			t.Fatalf("policy.json: %v", err)
		}
		if len(cfg.Options.RateLimits.Tiers) == 0 {
			t.Fatal("policy.json sets no rate-limit tiers")
		}
	})

	t.Run("endpoint definitions compile", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(deployRoot, "k8s", "overlays", "*", "endpoints", "*.yaml"))
		n := 0
		for _, f := range files {
			if strings.HasPrefix(filepath.Base(f), "_") {
				continue // the _service document, not an endpoint
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			eps, err := endpoint.ParseAndCompile(filepath.Base(f), b, endpoint.FormatAuto, endpoint.Context{InheritCapability: true})
			if err != nil || len(eps) == 0 {
				t.Errorf("%s: %v", f, err)
			}
			n++
		}
		if n == 0 {
			t.Fatal("no endpoint definitions found in the overlays")
		}
	})
}

// manifest is the part of a Kubernetes object the test reads.
type manifest struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Args []string `yaml:"args"`
					Env  []struct {
						Name string `yaml:"name"`
					} `yaml:"env"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

var envLine = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=`)

// TestSystemdEnvFilesUseOnlyRealSettings checks deploy/systemd/env: each
// <service>.env sets only variables that service reads, and common.env only
// variables every service reads.
func TestSystemdEnvFilesUseOnlyRealSettings(t *testing.T) {
	dir := filepath.Join(deployRoot, "systemd", "env")
	common := map[string]bool{}
	for _, e := range Common().Env {
		common[e] = true
	}
	check := func(file string, env map[string]bool) int {
		t.Helper()
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		n := 0
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			m := envLine.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("%s: %q is not NAME=value", file, line)
				continue
			}
			if !known(env, m[1]) {
				t.Errorf("%s: %s is not read by the service", file, m[1])
			}
			n++
		}
		return n
	}
	if check("common.env", common) == 0 {
		t.Error("common.env sets nothing")
	}
	for _, s := range Services() {
		if check(s.Name+".env", KnownEnv(s)) == 0 {
			t.Errorf("%s.env sets nothing", s.Name)
		}
	}
}
