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
		{"an internal service made public", `[{"op":"replace","path":"/spec/type","value":"LoadBalancer"},{"op":"remove","path":"/spec/clusterIP"}]`, "Service", "catalogsvc", "only the front door"},
		{"an internal service behind a virtual IP", `[{"op":"remove","path":"/spec/clusterIP"}]`, "Service", "policysvc", "headless"},
		{"a PDB that selects nothing", `[{"op":"replace","path":"/spec/selector/matchLabels/app.kubernetes.io~1name","value":"nothing"}]`, "PodDisruptionBudget", "catalogsvc", "matches 0 workloads"},
		{"no default deny", `[{"op":"replace","path":"/spec/policyTypes","value":["Ingress"]}]`, "NetworkPolicy", "agtp-default-deny", "default-deny"},
		{"readiness not on gRPC health", `[{"op":"replace","path":"/spec/template/spec/containers/0/readinessProbe/exec/command","value":["/usr/local/bin/service","-h"]}]`, "Deployment", "policysvc", "healthcheck"},
		{"GOMAXPROCS from the node's cores", `[{"op":"remove","path":"/spec/template/spec/containers/0/env/0"}]`, "Deployment", "identitysvc", "GOMAXPROCS"},
		{"GOMAXPROCS from the limit", `[{"op":"replace","path":"/spec/template/spec/containers/0/env/0/valueFrom/resourceFieldRef/resource","value":"limits.cpu"}]`, "Deployment", "", "GOMAXPROCS"},
		{"an internal service on the host's network", `[{"op":"add","path":"/spec/template/spec/hostNetwork","value":true}]`, "Deployment", "catalogsvc", "hostNetwork"},
		{"an internal service on a host port", `[{"op":"add","path":"/spec/template/spec/containers/0/ports/0/hostPort","value":7102}]`, "Deployment", "policysvc", "hostPort 7102"},
		{"an internal service with an external IP", `[{"op":"remove","path":"/spec/clusterIP"},{"op":"add","path":"/spec/externalIPs","value":["203.0.113.7"]}]`, "Service", "rcnssvc", "externalIPs"},
		{"an internal service with a load balancer IP", `[{"op":"replace","path":"/spec/type","value":"LoadBalancer"},{"op":"remove","path":"/spec/clusterIP"},{"op":"add","path":"/spec/loadBalancerIP","value":"203.0.113.8"}]`, "Service", "identitysvc", "loadBalancerIP"},
		{"GRPC_ADDR off the grpc port", `[{"op":"replace","path":"/spec/template/spec/containers/0/ports/0/containerPort","value":9999}]`, "Deployment", "auditsvc", "GRPC_ADDR"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.target
			if name == "" {
				name = "frontdoor"
			}
			if all := brokenCopy(t, "dev", tc.kind, name, tc.patch); !strings.Contains(all, tc.want) {
				t.Fatalf("want an error mentioning %q, got:\n%s", tc.want, all)
			}
		})
	}
}

// TestChecksRefuseWeakenedManifests breaks the dev overlay in ways that
// leave every other check passing but undo what the manifests promise:
// every container non-root, with no capabilities and the RuntimeDefault
// seccomp profile (deploy/k8s/README.md "Notes"); only the front door
// reachable from outside, the internal ports admitted only from the
// suite's pods (docs/operations.md); Secrets referenced, never included
// (base/kustomization.yaml).
func TestChecksRefuseWeakenedManifests(t *testing.T) {
	cases := []struct {
		name   string
		patch  string // a JSON6902 patch on the target
		kind   string
		target string
		want   string
	}{
		{"a container overriding the pod's runAsNonRoot", `[{"op":"add","path":"/spec/template/spec/containers/0/securityContext/runAsNonRoot","value":false},{"op":"add","path":"/spec/template/spec/containers/0/securityContext/runAsUser","value":0}]`, "Deployment", "policysvc", "container policysvc: securityContext.runAsNonRoot false: must run as non-root"},
		{"a container running as uid 0", `[{"op":"add","path":"/spec/template/spec/containers/0/securityContext/runAsUser","value":0}]`, "Deployment", "catalogsvc", "container catalogsvc: securityContext.runAsUser 0: must run as non-root"},
		{"a pod running as uid 0", `[{"op":"add","path":"/spec/template/spec/securityContext/runAsUser","value":0}]`, "Deployment", "rcnssvc", "pod securityContext.runAsUser 0: must run as non-root"},
		{"a container overriding the pod's seccomp profile", `[{"op":"add","path":"/spec/template/spec/containers/0/securityContext/seccompProfile","value":{"type":"Unconfined"}}]`, "Deployment", "identitysvc", "container identitysvc: seccomp profile Unconfined"},
		{"a capability added back after drop ALL", `[{"op":"add","path":"/spec/template/spec/containers/0/securityContext/capabilities/add","value":["NET_RAW","NET_BIND_SERVICE"]}]`, "Deployment", "auditsvc", "container auditsvc: securityContext.capabilities.add [NET_RAW NET_BIND_SERVICE]"},
		{"the internal ports admitted from anywhere", `[{"op":"add","path":"/spec/ingress/-","value":{"from":[{"ipBlock":{"cidr":"0.0.0.0/0"}}]}}]`, "NetworkPolicy", "agtp-internal-ingress", "NetworkPolicy agtp-dev/agtp-internal-ingress: ingress[1] admits ipBlock 0.0.0.0/0 to"},
		{"the internal ports admitted from every namespace", `[{"op":"add","path":"/spec/ingress/0/from/-","value":{"namespaceSelector":{}}}]`, "NetworkPolicy", "agtp-internal-ingress", "ingress[0] admits a namespaceSelector that does not name both a namespace and its pods to"},
		{"the internal ports admitted from a namespace's every pod", `[{"op":"add","path":"/spec/ingress/0/from/-","value":{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"billing"}}}}]`, "NetworkPolicy", "agtp-internal-ingress", "ingress[0] admits a namespaceSelector that does not name both"},
		{"the gateways admitted from every source", `[{"op":"remove","path":"/spec/ingress/0/from"}]`, "NetworkPolicy", "agtp-gateway-ingress", "admits every source (no from) to Deployment agtp-dev/catalogsvc"},
		{"the public policy widened to the internal pods", `[{"op":"replace","path":"/spec/podSelector","value":{"matchLabels":{"app.kubernetes.io/part-of":"agtp"}}}]`, "NetworkPolicy", "frontdoor-public", "to Deployment agtp-dev/catalogsvc"},
		{"the public Service fronting an internal service", `[{"op":"replace","path":"/spec/selector","value":{"app.kubernetes.io/name":"policysvc"}},{"op":"replace","path":"/spec/ports","value":[{"name":"gateway","port":443,"targetPort":8102,"protocol":"TCP"}]}]`, "Service", "frontdoor", "selects Deployment agtp-dev/policysvc: only the front door may be reachable from outside"},
		{"an internal service on a node port", `[{"op":"replace","path":"/spec/type","value":"NodePort"},{"op":"remove","path":"/spec/clusterIP"}]`, "Service", "auditsvc", "type NodePort, selector map[app.kubernetes.io/name:auditsvc] selects Deployment agtp-dev/auditsvc"},
		{"the Redis password as a plain env value", `[{"op":"replace","path":"/spec/template/spec/containers/0/env/8","value":{"name":"REDIS_URL","value":"redis+cluster://:hunter2@redis-cluster-0.redis-cluster-headless:6379"}}]`, "Deployment", "policysvc", "container policysvc: env REDIS_URL is a credential: it must come from a Secret"},
		{"a token from a ConfigMap", `[{"op":"add","path":"/spec/template/spec/containers/0/env/-","value":{"name":"UPSTREAM_TOKEN","valueFrom":{"configMapKeyRef":{"name":"agtp-common","key":"AGTP_TRUST_DOMAIN"}}}}]`, "Deployment", "frontdoor", "container frontdoor: env UPSTREAM_TOKEN is a credential"},
		{"a URL with a password under another name", `[{"op":"add","path":"/spec/template/spec/containers/0/env/-","value":{"name":"BACKEND","value":"https://svc:s3cret@backend.example"}}]`, "Deployment", "catalogsvc", "container catalogsvc: env BACKEND is a URL with a password"},
		{"a password in the shared ConfigMap", `[{"op":"add","path":"/data/REDIS_PASSWORD","value":"hunter2"}]`, "ConfigMap", "agtp-common", "ConfigMap agtp-dev/agtp-common: data key REDIS_PASSWORD is a credential"},
		{"a URL with a password in the shared ConfigMap", `[{"op":"add","path":"/data/AGTP_UPSTREAM","value":"redis://default:hunter2@redis:6379"}]`, "ConfigMap", "agtp-common", "data key AGTP_UPSTREAM holds a URL with a password"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			all := brokenCopy(t, "dev", tc.kind, tc.target, tc.patch)
			if all == "" {
				all = "(no error: the checks pass it)"
			}
			if !strings.Contains(all, tc.want) {
				t.Fatalf("want an error mentioning %q, got:\n%s", tc.want, all)
			}
			if strings.Contains(all, "hunter2") || strings.Contains(all, "s3cret") {
				t.Errorf("a message repeats the credential:\n%s", all)
			}
		})
	}
}

// An overlay may admit one internal system from another namespace to the
// gateways, naming both the namespace and its pods
// (deploy/k8s/base/networkpolicies.yaml says how).
func TestOneSystemFromAnotherNamespaceMayReachTheGateways(t *testing.T) {
	patch := `[{"op":"add","path":"/spec/ingress/0/from/-","value":{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"billing"}},"podSelector":{"matchLabels":{"app.kubernetes.io/name":"billing-agent"}}}}]`
	if all := brokenCopy(t, "dev", "NetworkPolicy", "agtp-gateway-ingress", patch); all != "" {
		t.Fatalf("the checks refuse one named system from another namespace:\n%s", all)
	}
}

// TestURLPasswordOnlyWhenWrittenOut: a URL carries a credential when its
// userinfo has a password written out; a referenced one ($(VAR), ${VAR})
// stays in its Secret.
func TestURLPasswordOnlyWhenWrittenOut(t *testing.T) {
	for s, want := range map[string]bool{
		"redis+cluster://:hunter2@redis:6379":     true,
		"https://svc:s3cret@backend.example/path": true,
		"url: https://u:p@h\nother: x":            true,
		"redis+cluster://redis:6379":              false,
		"https://user@backend.example":            false,
		"https://backend.example:8443/a@b":        false,
		"redis://:$(REDIS_PASSWORD)@redis:6379":   false,
		"https://u:${env:BACKEND_PASSWORD}@h":     false,
	} {
		if got := hasURLPassword(s); got != want {
			t.Errorf("hasURLPassword(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestIdentityChecksCatchMistakes breaks the client identities of the prod
// overlay's cert-manager Certificates: each client certificate names
// exactly its own identity as a SPIFFE ID in the suite's trust domain, and
// the public AGTP server certificate names none.
func TestIdentityChecksCatchMistakes(t *testing.T) {
	cases := []struct {
		name   string
		patch  string // a JSON6902 patch on the target
		kind   string
		target string
		want   string
	}{
		{"a service certificate without its SPIFFE ID", `[{"op":"remove","path":"/spec/uris"}]`, "Certificate", "agtp-catalogsvc-tls", "want exactly one: spiffe://agtp.internal/service/catalogsvc"},
		{"a service certificate naming another service", `[{"op":"replace","path":"/spec/uris","value":["spiffe://agtp.internal/service/policysvc"]}]`, "Certificate", "agtp-catalogsvc-tls", "names service/policysvc, want service/catalogsvc"},
		{"a service certificate naming an operator", `[{"op":"replace","path":"/spec/uris","value":["spiffe://agtp.internal/operator/frontdoor"]}]`, "Certificate", "agtp-frontdoor-tls", "want service/frontdoor"},
		{"a service certificate with two SPIFFE IDs", `[{"op":"add","path":"/spec/uris/-","value":"spiffe://agtp.internal/operator/admin"}]`, "Certificate", "agtp-auditsvc-tls", "carries 2 SPIFFE IDs"},
		{"a SPIFFE ID in another trust domain", `[{"op":"replace","path":"/spec/uris","value":["spiffe://corp.example/service/rcnssvc"]}]`, "Certificate", "agtp-rcnssvc-tls", "not in the suite's trust domain agtp.internal"},
		{"an operator certificate without its SPIFFE ID", `[{"op":"remove","path":"/spec/uris"}]`, "Certificate", "agtp-admin-tls", "want exactly one: spiffe://agtp.internal/operator/admin"},
		{"an operator certificate naming a service", `[{"op":"replace","path":"/spec/uris","value":["spiffe://agtp.internal/service/admin"]}]`, "Certificate", "agtp-admin-tls", "want operator/admin"},
		{"the internal system's certificate naming an operator", `[{"op":"replace","path":"/spec/uris","value":["spiffe://agtp.internal/operator/reporting"]}]`, "Certificate", "agtp-system-reporting-tls", "want system/reporting"},
		{"an unknown kind", `[{"op":"replace","path":"/spec/uris","value":["spiffe://agtp.internal/agent/reporting"]}]`, "Certificate", "agtp-system-reporting-tls", "kind service, operator or system"},
		{"another client certificate claiming a service", `[{"op":"replace","path":"/spec/secretName","value":"agtp-deployer-tls"},{"op":"replace","path":"/spec/uris","value":["spiffe://agtp.internal/service/catalogsvc"]}]`, "Certificate", "agtp-admin-tls", "names a service"},
		{"a SPIFFE ID on the public certificate", `[{"op":"add","path":"/spec/uris","value":["spiffe://agtp.internal/service/frontdoor"]}]`, "Certificate", "agtp-frontdoor-public-tls", "public AGTP server certificate carries SPIFFE IDs"},
		{"a trust domain the certificates are not in", `[{"op":"add","path":"/data/AGTP_TRUST_DOMAIN","value":"corp.example"}]`, "ConfigMap", "agtp-common", "not in the suite's trust domain corp.example"},
		{"the services in different trust domains", `[{"op":"add","path":"/spec/template/spec/containers/0/env/-","value":{"name":"AGTP_TRUST_DOMAIN","value":"corp.example"}}]`, "Deployment", "policysvc", "disagree on AGTP_TRUST_DOMAIN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if all := brokenCopy(t, "prod", tc.kind, tc.target, tc.patch); !strings.Contains(all, tc.want) {
				t.Fatalf("want an error mentioning %q, got:\n%s", tc.want, all)
			}
		})
	}
}

// brokenCopy builds an overlay with patch applied to the kind named
// target, and returns every message of the checks, joined.
func brokenCopy(t *testing.T, overlay, kind, target, patch string) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	abs, err := filepath.Abs(filepath.Join("..", "k8s", "overlays", overlay))
	if err != nil {
		t.Fatal(err)
	}
	// Kustomize refuses files outside the root, but accepts
	// another kustomization directory as a resource.
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	write("patch.json", patch)
	write("kustomization.yaml", "resources:\n  - "+rel+"\npatches:\n  - path: patch.json\n    target:\n      kind: "+kind+"\n      name: "+target+"\n")
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
	return strings.Join(msgs, "\n")
}
