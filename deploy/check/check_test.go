package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// overlays are the deployable kustomizations; each must build and pass.
func overlays(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("..", "k8s", "overlays", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no overlays under deploy/k8s/overlays: %v", err)
	}
	return dirs
}

func TestOverlaysBuildAndValidate(t *testing.T) {
	for _, dir := range overlays(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			objs, err := Build(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if err := Validate(o); err != nil {
					t.Errorf("%s: %v", o, err)
				}
			}
			if t.Failed() {
				return
			}
			for _, err := range Rules(objs) {
				t.Error(err)
			}
			t.Logf("%d objects", len(objs))
		})
	}
}

// TestChecksCatchMistakes runs the checks on broken copies of the dev
// overlay, so that a check that stopped checking fails here.
func TestChecksCatchMistakes(t *testing.T) {
	cases := []struct {
		name   string
		patch  string // a JSON6902 patch on the target
		kind   string
		target string // the target's name; empty means frontdoor
		want   string
	}{
		{"misspelt field", `[{"op":"add","path":"/spec/template/spec/containers/0/readinessProbe/periodSecond","value":5}]`, "Deployment", "", "unknown field"},
		{"selector does not match the template", `[{"op":"replace","path":"/spec/selector/matchLabels/app.kubernetes.io~1name","value":"other"}]`, "Deployment", "", "selector"},
		{"port out of range", `[{"op":"replace","path":"/spec/template/spec/containers/0/ports/0/containerPort","value":70000}]`, "Deployment", "", "containerPort"},
		{"no readiness probe", `[{"op":"remove","path":"/spec/template/spec/containers/0/readinessProbe"}]`, "Deployment", "", "readiness"},
		{"running as root", `[{"op":"replace","path":"/spec/template/spec/securityContext/runAsNonRoot","value":false}]`, "Deployment", "", "non-root"},
		{"writable root filesystem", `[{"op":"replace","path":"/spec/template/spec/containers/0/securityContext/readOnlyRootFilesystem","value":false}]`, "Deployment", "", "readOnlyRootFilesystem"},
		{"no memory limit", `[{"op":"remove","path":"/spec/template/spec/containers/0/resources/limits"}]`, "Deployment", "", "memory limit"},
		{"missing ConfigMap", `[{"op":"replace","path":"/spec/template/spec/containers/0/envFrom/0/configMapRef/name","value":"nope"}]`, "Deployment", "", "ConfigMap nope"},
		{"unknown Secret", `[{"op":"replace","path":"/spec/template/spec/volumes/0/secret/secretName","value":"nope"}]`, "Deployment", "", "Secret nope"},
		{"HPA below one replica", `[{"op":"replace","path":"/spec/minReplicas","value":0}]`, "HorizontalPodAutoscaler", "", "minReplicas"},
		{"an internal service made public", `[{"op":"replace","path":"/spec/type","value":"LoadBalancer"}]`, "Service", "catalogsvc", "only the front door"},
		{"the admin listener on the public Service", `[{"op":"add","path":"/spec/ports/-","value":{"name":"admin","port":4444,"targetPort":"admin","protocol":"TCP"}}]`, "Service", "", "admin listener"},
		{"the admin listener on the public Service by number", `[{"op":"add","path":"/spec/ports/-","value":{"name":"ops","port":8444,"targetPort":4444,"protocol":"TCP"}}]`, "Service", "", "admin listener"},
		{"a PDB that selects nothing", `[{"op":"replace","path":"/spec/selector/matchLabels/app.kubernetes.io~1name","value":"nothing"}]`, "PodDisruptionBudget", "catalogsvc", "matches 0 workloads"},
		{"no default deny", `[{"op":"replace","path":"/spec/policyTypes","value":["Ingress"]}]`, "NetworkPolicy", "agtp-default-deny", "default-deny"},
		{"readiness not on gRPC health", `[{"op":"replace","path":"/spec/template/spec/containers/0/readinessProbe/exec/command","value":["/usr/local/bin/service","-h"]}]`, "Deployment", "policysvc", "healthcheck"},
		{"GRPC_ADDR off the grpc port", `[{"op":"replace","path":"/spec/template/spec/containers/0/ports/0/containerPort","value":9999}]`, "Deployment", "auditsvc", "GRPC_ADDR"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, content string) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			abs, err := filepath.Abs(filepath.Join("..", "k8s", "overlays", "dev"))
			if err != nil {
				t.Fatal(err)
			}
			// Kustomize refuses files outside the root, but accepts
			// another kustomization directory as a resource.
			rel, err := filepath.Rel(dir, abs)
			if err != nil {
				t.Fatal(err)
			}
			write("patch.json", tc.patch)
			name := tc.target
			if name == "" {
				name = "frontdoor"
			}
			write("kustomization.yaml", "resources:\n  - "+rel+"\npatches:\n  - path: patch.json\n    target:\n      kind: "+tc.kind+"\n      name: "+name+"\n")
			objs, err := Build(dir)
			if err != nil {
				t.Fatal(err)
			}
			var msgs []string
			for _, o := range objs {
				if err := Validate(o); err != nil {
					msgs = append(msgs, err.Error())
				}
			}
			if len(msgs) == 0 {
				for _, err := range Rules(objs) {
					msgs = append(msgs, err.Error())
				}
			}
			all := strings.Join(msgs, "\n")
			if !strings.Contains(all, tc.want) {
				t.Fatalf("want an error mentioning %q, got:\n%s", tc.want, all)
			}
		})
	}
}
