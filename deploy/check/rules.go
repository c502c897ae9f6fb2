package check

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Services are the suite's services; each must have a Deployment, a
// Service, a HorizontalPodAutoscaler and a PodDisruptionBudget.
var Services = []string{"frontdoor", "catalogsvc", "policysvc", "rcnssvc", "identitysvc", "auditsvc"}

// DefaultTrustDomain is the SPIFFE trust domain of the suite's client
// identities when AGTP_TRUST_DOMAIN is not set (services/access).
const DefaultTrustDomain = "agtp.internal"

// PublicCertSecret is the Secret of the front door's public AGTP server
// certificate, which agents verify and which names no suite identity.
const PublicCertSecret = "agtp-frontdoor-public-tls"

// ClientIdentities are the suite's client certificates, by Secret, and the
// identity (kind/name) each must name with its SPIFFE ID: every service's
// own, the operator's and the internal system's (services/devpki.IdentityOf).
// Any other client certificate in the build must name one operator or
// internal system.
var ClientIdentities = func() map[string]string {
	m := map[string]string{
		"agtp-admin-tls":            "operator/admin",
		"agtp-system-reporting-tls": "system/reporting",
	}
	for _, s := range Services {
		m["agtp-"+s+"-tls"] = "service/" + s
	}
	return m
}()

// ExternalSecrets are the Secrets the manifests mount but do not contain:
// the operator creates them (deploy/k8s/README.md), deploy/devsecrets makes
// development ones, and the cert-manager component issues the certificate
// ones. Any other referenced Secret must be in the build.
var ExternalSecrets = []string{
	"agtp-signing-key", "agtp-redis", "agtp-frontdoor-public-tls",
	"agtp-frontdoor-tls", "agtp-catalogsvc-tls", "agtp-policysvc-tls",
	"agtp-rcnssvc-tls", "agtp-identitysvc-tls", "agtp-auditsvc-tls",
}

// pod is a workload's pod template with where it came from.
type pod struct {
	owner    string
	kind     string
	name     string
	labels   map[string]string
	spec     *corev1.PodSpec
	longRun  bool // Deployment or StatefulSet: needs probes
	replicas int32
}

// Rules checks the suite's own rules across the objects of one build (all
// already passed Validate). It returns every violation.
func Rules(objs []*Object) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	byKind := map[string][]*Object{}
	for _, o := range objs {
		byKind[o.GVK.Kind] = append(byKind[o.GVK.Kind], o)
	}
	has := func(kind, name string) bool {
		return slices.ContainsFunc(byKind[kind], func(o *Object) bool { return o.Name == name })
	}

	var pods []pod
	for _, o := range objs {
		switch x := o.External.(type) {
		case *appsv1.Deployment:
			pods = append(pods, pod{o.String(), "Deployment", x.Name, x.Spec.Template.Labels, &x.Spec.Template.Spec, true, deref(x.Spec.Replicas)})
		case *appsv1.StatefulSet:
			pods = append(pods, pod{o.String(), "StatefulSet", x.Name, x.Spec.Template.Labels, &x.Spec.Template.Spec, true, deref(x.Spec.Replicas)})
		case *batchv1.Job:
			pods = append(pods, pod{o.String(), "Job", x.Name, x.Spec.Template.Labels, &x.Spec.Template.Spec, false, 1})
		}
	}

	// Secrets a cert-manager Certificate in the build will create.
	issued := map[string]bool{}
	for _, o := range byKind["Certificate"] {
		var c Certificate
		if err := json.Unmarshal(o.JSON, &c); err == nil {
			issued[c.Spec.SecretName] = true
		}
	}

	for _, p := range pods {
		checkPod(p, fail)
		checkHostNetwork(p, fail)
		// References resolve.
		for _, v := range p.spec.Volumes {
			if v.ConfigMap != nil && !has("ConfigMap", v.ConfigMap.Name) {
				fail("%s: volume %s: ConfigMap %s is not in the build", p.owner, v.Name, v.ConfigMap.Name)
			}
			if v.Secret != nil {
				checkSecret(p.owner, v.Secret.SecretName, has, issued, fail)
			}
		}
		for _, c := range allContainers(p.spec) {
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil && !has("ConfigMap", ef.ConfigMapRef.Name) {
					fail("%s: container %s: envFrom ConfigMap %s is not in the build", p.owner, c.Name, ef.ConfigMapRef.Name)
				}
				if ef.SecretRef != nil {
					checkSecret(p.owner, ef.SecretRef.Name, has, issued, fail)
				}
			}
			for _, e := range c.Env {
				checkCredentialEnv(p.owner, c.Name, e, fail)
				if e.ValueFrom == nil {
					continue
				}
				if r := e.ValueFrom.ConfigMapKeyRef; r != nil && !has("ConfigMap", r.Name) {
					fail("%s: env %s: ConfigMap %s is not in the build", p.owner, e.Name, r.Name)
				}
				if r := e.ValueFrom.SecretKeyRef; r != nil {
					checkSecret(p.owner, r.Name, has, issued, fail)
				}
			}
		}
	}

	// ConfigMaps are plain configuration, readable by whoever may read the
	// namespace's configuration, and end up in the manifests themselves.
	for _, o := range byKind["ConfigMap"] {
		cm := o.External.(*corev1.ConfigMap)
		for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
			switch {
			case isCredentialName(k):
				fail("%s: data key %s is a credential: it must be in a Secret, never a ConfigMap", o, k)
			case hasURLPassword(cm.Data[k]):
				fail("%s: data key %s holds a URL with a password: it must be in a Secret, never a ConfigMap", o, k)
			}
		}
	}

	// Services: selectors match pods, named target ports exist, only the
	// front door is public (docs/operations.md): a Service that is a
	// LoadBalancer or NodePort, or takes traffic for an external or load
	// balancer IP, selects the front door's pods and no others. It goes by
	// the pods, not the Service's name: a Service named frontdoor pointed
	// at another service's pods would publish that service.
	for _, o := range byKind["Service"] {
		svc := o.External.(*corev1.Service)
		var reach []string
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer || svc.Spec.Type == corev1.ServiceTypeNodePort {
			reach = append(reach, "type "+string(svc.Spec.Type))
		}
		if len(svc.Spec.ExternalIPs) > 0 {
			reach = append(reach, fmt.Sprintf("externalIPs %v", svc.Spec.ExternalIPs))
		}
		if svc.Spec.LoadBalancerIP != "" {
			reach = append(reach, "loadBalancerIP "+svc.Spec.LoadBalancerIP)
		}
		if len(reach) > 0 && len(svc.Spec.Selector) > 0 {
			if others := notFrontDoor(selectPods(pods, labels.SelectorFromSet(svc.Spec.Selector))); len(others) > 0 {
				fail("%s: %s, selector %v selects %s: only the front door may be reachable from outside", o, strings.Join(reach, ", "), svc.Spec.Selector, strings.Join(others, ", "))
			}
		}
		if slices.Contains(Services, svc.Name) && svc.Name != "frontdoor" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			fail("%s: an internal service must be headless (clusterIP: None), so that the gRPC clients balance over every replica's address", o)
		}
		matched := matchPods(pods, svc.Spec.Selector)
		if len(matched) == 0 {
			fail("%s: selector %v matches no workload", o, svc.Spec.Selector)
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if sp.TargetPort.StrVal == "" {
				continue
			}
			for _, p := range matched {
				if !hasPort(p.spec, sp.TargetPort.StrVal, sp.Protocol) {
					fail("%s: port %s targets %s/%s, which %s does not declare", o, sp.Name, sp.TargetPort.StrVal, sp.Protocol, p.owner)
				}
			}
		}
	}

	// Client certificates name their identity; the public one names none.
	checkIdentities(byKind, pods, fail)

	// HPAs scale Deployments that exist; PDBs cover exactly one workload.
	for _, o := range byKind["HorizontalPodAutoscaler"] {
		h := o.External.(*autoscalingv2.HorizontalPodAutoscaler)
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || !has("Deployment", h.Spec.ScaleTargetRef.Name) {
			fail("%s: scales %s %s, which is not in the build", o, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
		}
		if len(h.Spec.Metrics) == 0 {
			fail("%s: no metrics", o)
		}
	}
	for _, o := range byKind["PodDisruptionBudget"] {
		pdb := o.External.(*policyv1.PodDisruptionBudget)
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			fail("%s: %v", o, err)
			continue
		}
		n := 0
		for _, p := range pods {
			if p.longRun && sel.Matches(labels.Set(p.labels)) {
				n++
			}
		}
		if n != 1 {
			fail("%s: selector matches %d workloads, want 1", o, n)
		}
	}

	// Every service has its four objects; the probes are the health ones.
	for _, name := range Services {
		for _, kind := range []string{"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"} {
			if !has(kind, name) {
				fail("service %s has no %s", name, kind)
			}
		}
		for _, p := range pods {
			if p.kind == "Deployment" && p.name == name {
				checkHealthProbes(p, fail)
				checkProcessors(p, fail)
			}
		}
	}

	// NetworkPolicies: everything is denied by default, every pod that a
	// Service fronts is selected by a policy that admits something, and
	// only the front door's pods are admitted from beyond the namespace's
	// own pods (docs/operations.md): an ingress rule with no from, or a
	// peer with an ipBlock or a namespaceSelector, may select nothing else.
	var defaultDeny bool
	var admitting []labels.Selector
	for _, o := range byKind["NetworkPolicy"] {
		np := o.External.(*networkingv1.NetworkPolicy)
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			fail("%s: %v", o, err)
			continue
		}
		for i, rule := range np.Spec.Ingress {
			if open := openPeers(rule); open != "" {
				if others := notFrontDoor(selectPods(pods, sel)); len(others) > 0 {
					fail("%s: ingress[%d] admits %s to %s: only the front door may be reachable from beyond the suite's pods", o, i, open, strings.Join(others, ", "))
				}
			}
		}
		if sel.Empty() && len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0 &&
			slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			defaultDeny = true
		}
		if len(np.Spec.Ingress) > 0 {
			admitting = append(admitting, sel)
		}
	}
	if !defaultDeny {
		fail("no default-deny NetworkPolicy (empty podSelector, Ingress and Egress, no rules)")
	}
	for _, o := range byKind["Service"] {
		svc := o.External.(*corev1.Service)
		for _, p := range matchPods(pods, svc.Spec.Selector) {
			if !slices.ContainsFunc(admitting, func(s labels.Selector) bool { return s.Matches(labels.Set(p.labels)) }) {
				fail("%s: its pods (%s) are selected by no NetworkPolicy that admits traffic", o, p.owner)
			}
		}
	}
	return errs
}

// checkIdentities holds the cert-manager Certificates in the build to the
// identities the services read from client certificates (services/access):
// a certificate for client use carries exactly one SPIFFE ID,
// spiffe://<trust domain>/<kind>/<name> in the trust domain the services
// are configured with, naming the identity its Secret stands for
// (ClientIdentities; another one must name an operator or internal
// system); the public AGTP server certificate carries none.
func checkIdentities(byKind map[string][]*Object, pods []pod, fail func(string, ...any)) {
	certs := byKind["Certificate"]
	if len(certs) == 0 {
		return
	}
	domain, ok := trustDomain(byKind, pods, fail)
	if !ok {
		return
	}
	for _, o := range certs {
		var c Certificate
		if err := json.Unmarshal(o.JSON, &c); err != nil {
			fail("%s: %v", o, err)
			continue
		}
		var spiffe []string
		for _, u := range c.Spec.URIs {
			if strings.HasPrefix(strings.ToLower(u), "spiffe:") {
				spiffe = append(spiffe, u)
			}
			if strings.HasPrefix(strings.ToLower(u), "agtp:") {
				fail("%s: URI SAN %s is an Agent-ID, which the suite CA never certifies", o, u)
			}
		}
		want, known := ClientIdentities[c.Spec.SecretName]
		switch {
		case c.Spec.SecretName == PublicCertSecret:
			if len(spiffe) > 0 {
				fail("%s: the public AGTP server certificate carries SPIFFE IDs %v; it must name no suite identity", o, spiffe)
			}
			continue
		case c.Spec.IsCA:
			if len(spiffe) > 0 {
				fail("%s: a CA certificate carries SPIFFE IDs %v", o, spiffe)
			}
			continue
		case !known && !slices.Contains(c.Spec.Usages, "client auth"):
			continue
		}
		if len(spiffe) != 1 {
			if known {
				fail("%s: carries %d SPIFFE IDs %v, want exactly one: %s", o, len(spiffe), spiffe, spiffeID(domain, want))
			} else {
				fail("%s: a client certificate carries %d SPIFFE IDs %v, want exactly one naming an operator or internal system in trust domain %s", o, len(spiffe), spiffe, domain)
			}
			continue
		}
		got, err := parseSPIFFE(spiffe[0], domain)
		switch {
		case err != nil:
			fail("%s: %v", o, err)
		case known && got != want:
			fail("%s: SPIFFE ID %s names %s, want %s (%s)", o, spiffe[0], got, want, spiffeID(domain, want))
		case !known && strings.HasPrefix(got, "service/"):
			fail("%s: SPIFFE ID %s names a service, but %s is not that service's certificate (agtp-<service>-tls)", o, spiffe[0], c.Spec.SecretName)
		}
		if known && !slices.Contains(c.Spec.Usages, "client auth") {
			fail("%s: the %s certificate needs the client auth usage", o, want)
		}
	}
}

// trustDomain is the SPIFFE trust domain the suite's services recognise:
// AGTP_TRUST_DOMAIN from each one's environment (its own env, else the
// ConfigMaps it loads), the default when unset. All must agree.
func trustDomain(byKind map[string][]*Object, pods []pod, fail func(string, ...any)) (string, bool) {
	configMaps := map[string]*corev1.ConfigMap{}
	for _, o := range byKind["ConfigMap"] {
		if cm, ok := o.External.(*corev1.ConfigMap); ok {
			configMaps[cm.Name] = cm
		}
	}
	seen := map[string][]string{}
	for _, p := range pods {
		if p.kind != "Deployment" || !slices.Contains(Services, p.name) || len(p.spec.Containers) == 0 {
			continue
		}
		c := p.spec.Containers[0]
		domain := DefaultTrustDomain
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef == nil {
				continue
			}
			if cm := configMaps[ef.ConfigMapRef.Name]; cm != nil {
				if v, ok := cm.Data[ef.Prefix+"AGTP_TRUST_DOMAIN"]; ok && v != "" {
					domain = v
				}
			}
		}
		for _, e := range c.Env {
			if e.Name == "AGTP_TRUST_DOMAIN" && e.ValueFrom == nil && e.Value != "" {
				domain = e.Value
			}
		}
		seen[domain] = append(seen[domain], p.name)
	}
	switch len(seen) {
	case 0:
		return DefaultTrustDomain, true
	case 1:
		for d := range seen {
			return d, true
		}
	}
	fail("the services disagree on AGTP_TRUST_DOMAIN: %v", seen)
	return "", false
}

// nameSyntax is services/access's syntax of an identity's name.
var nameSyntax = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// parseSPIFFE reads spiffe://<domain>/<kind>/<name> as kind/name.
func parseSPIFFE(s, domain string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "spiffe" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("SPIFFE ID %s is not spiffe://<trust domain>/<kind>/<name>", s)
	}
	if u.Host != domain {
		return "", fmt.Errorf("SPIFFE ID %s is not in the suite's trust domain %s", s, domain)
	}
	kind, name, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if !ok || (kind != "service" && kind != "operator" && kind != "system") || !nameSyntax.MatchString(name) {
		return "", fmt.Errorf("SPIFFE ID %s does not name <kind>/<name> with kind service, operator or system and a lower-case name", s)
	}
	return kind + "/" + name, nil
}

func spiffeID(domain, id string) string { return "spiffe://" + domain + "/" + id }

func checkSecret(owner, name string, has func(kind, name string) bool, issued map[string]bool, fail func(string, ...any)) {
	if !has("Secret", name) && !issued[name] && !slices.Contains(ExternalSecrets, name) {
		fail("%s: Secret %s is neither in the build, nor issued by a Certificate, nor one of check.ExternalSecrets", owner, name)
	}
}

// checkPod holds every container to deploy/k8s/README.md ("Notes"): non-root,
// a read-only root filesystem, no capabilities, the RuntimeDefault (or a
// Localhost) seccomp profile. runAsNonRoot, runAsUser and seccompProfile
// may be set on the pod and on the container, and the container's value
// wins (PodSecurityContext in the Kubernetes API), so each container is
// judged by its effective settings: a pod-level setting excuses only the
// containers that do not override it.
// checkCredentialEnv keeps credentials out of the manifests: the Redis URL
// (which carries the Redis password), any *_PASSWORD, *_TOKEN or *_SECRET,
// and any value that is a URL with a password come from a Secret through
// secretKeyRef (base/kustomization.yaml: Secrets are referenced, never
// included; deploy/k8s/README.md "Secrets"). The messages never repeat the
// value.
func checkCredentialEnv(owner, container string, e corev1.EnvVar, fail func(string, ...any)) {
	fromSecret := e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
	switch {
	case isCredentialName(e.Name) && !fromSecret:
		fail("%s: container %s: env %s is a credential: it must come from a Secret (valueFrom.secretKeyRef), never a literal value or a ConfigMap", owner, container, e.Name)
	case hasURLPassword(e.Value):
		fail("%s: container %s: env %s is a URL with a password: it must come from a Secret (valueFrom.secretKeyRef), never a literal value", owner, container, e.Name)
	}
}

// isCredentialName reports whether an environment variable (or a
// ConfigMap key, which envFrom turns into one) named name holds a
// credential.
func isCredentialName(name string) bool {
	n := strings.ToUpper(name)
	return n == "REDIS_URL" || strings.HasSuffix(n, "_PASSWORD") || strings.HasSuffix(n, "_TOKEN") || strings.HasSuffix(n, "_SECRET")
}

var (
	// urlPassword is scheme://user:password@ with a non-empty password.
	urlPassword = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s]*:[^/?#@\s]+@`)
	// varRef is a $(VAR) (Kubernetes) or ${VAR} (collector, endpoint
	// headers) reference, which keeps the credential itself elsewhere.
	varRef = regexp.MustCompile(`\$\([^)]*\)|\$\{[^}]*\}`)
)

// hasURLPassword reports whether s holds a URL whose userinfo carries a
// password written out rather than referenced.
func hasURLPassword(s string) bool {
	return urlPassword.MatchString(varRef.ReplaceAllString(s, ""))
}

func checkPod(p pod, fail func(string, ...any)) {
	ps := p.spec
	psc := ps.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if psc.RunAsNonRoot != nil && !*psc.RunAsNonRoot {
		fail("%s: pod securityContext.runAsNonRoot false: must run as non-root", p.owner)
	}
	if psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		fail("%s: pod securityContext.runAsUser 0: must run as non-root", p.owner)
	}
	for _, c := range allContainers(ps) {
		where := fmt.Sprintf("%s: container %s", p.owner, c.Name)
		img := c.Image
		if i := strings.LastIndex(img, "/"); i >= 0 {
			img = img[i+1:]
		}
		if !strings.Contains(img, ":") && !strings.Contains(c.Image, "@") || strings.HasSuffix(c.Image, ":latest") {
			fail("%s: image %q has no version (tag or digest)", where, c.Image)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			fail("%s: needs cpu and memory requests", where)
		}
		if c.Resources.Limits.Memory().IsZero() {
			fail("%s: needs a memory limit", where)
		}
		sc := c.SecurityContext
		switch {
		case sc == nil:
			fail("%s: needs a securityContext", where)
		default:
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				fail("%s: allowPrivilegeEscalation must be false", where)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				fail("%s: readOnlyRootFilesystem must be true", where)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				fail("%s: must drop ALL capabilities", where)
			}
			if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
				fail("%s: securityContext.capabilities.add %v: must run with no capabilities", where, sc.Capabilities.Add)
			}
			nonRoot := cmp.Or(sc.RunAsNonRoot, psc.RunAsNonRoot)
			switch {
			case sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot:
				fail("%s: securityContext.runAsNonRoot false: must run as non-root", where)
			case nonRoot == nil:
				fail("%s: must run as non-root (runAsNonRoot: true on the pod or the container)", where)
			}
			if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
				fail("%s: securityContext.runAsUser 0: must run as non-root", where)
			}
			switch seccomp := cmp.Or(sc.SeccompProfile, psc.SeccompProfile); {
			case seccomp == nil:
				fail("%s: needs the RuntimeDefault seccomp profile (on the pod or the container)", where)
			case seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost:
				fail("%s: seccomp profile %s: needs RuntimeDefault (or Localhost)", where, seccomp.Type)
			}
		}
		if p.longRun {
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				fail("%s: needs readiness and liveness probes", where)
			}
		}
		for _, pr := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
			if pr == nil {
				continue
			}
			if g := pr.HTTPGet; g != nil && g.Port.StrVal != "" && !hasPortIn(c, g.Port.StrVal, corev1.ProtocolTCP) {
				fail("%s: probe port %s is not a container port", where, g.Port.StrVal)
			}
		}
	}
}

// checkHostNetwork keeps every pod but the front door's off the node's
// own addresses: hostNetwork or a hostPort would make it reachable from
// outside the cluster, past its Service and the NetworkPolicies.
func checkHostNetwork(p pod, fail func(string, ...any)) {
	if isFrontDoor(p) {
		return
	}
	if p.spec.HostNetwork {
		fail("%s: hostNetwork: only the front door may be reachable from outside", p.owner)
	}
	for _, c := range allContainers(p.spec) {
		for _, cp := range c.Ports {
			if cp.HostPort != 0 {
				fail("%s: container %s: port %s hostPort %d: only the front door may be reachable from outside", p.owner, c.Name, cp.Name, cp.HostPort)
			}
		}
	}
}

// checkHealthProbes pins how each service reports health: internal
// services probe their gRPC health over mTLS with the binary's healthcheck
// command; the front door's HTTPS side answers /readyz and /healthz.
func checkHealthProbes(p pod, fail func(string, ...any)) {
	c := p.spec.Containers[0]
	if p.name == "frontdoor" {
		r, l := c.ReadinessProbe, c.LivenessProbe
		if r == nil || r.HTTPGet == nil || r.HTTPGet.Path != "/readyz" || r.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			fail("%s: readiness must be GET /readyz over HTTPS", p.owner)
		}
		if l == nil || l.HTTPGet == nil || l.HTTPGet.Path != "/healthz" || l.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			fail("%s: liveness must be GET /healthz over HTTPS", p.owner)
		}
		return
	}
	isCheck := func(pr *corev1.Probe, live bool) bool {
		if pr == nil || pr.Exec == nil || len(pr.Exec.Command) < 2 || pr.Exec.Command[1] != "healthcheck" {
			return false
		}
		return slices.Contains(pr.Exec.Command, "-liveness") == live
	}
	if !isCheck(c.ReadinessProbe, false) {
		fail("%s: readiness must be the exec probe `<binary> healthcheck` (gRPC health over mTLS)", p.owner)
	}
	if !isCheck(c.LivenessProbe, true) {
		fail("%s: liveness must be the exec probe `<binary> healthcheck -liveness`", p.owner)
	}
	grpcPort := ""
	for _, e := range c.Env {
		if e.Name == "GRPC_ADDR" {
			_, grpcPort, _ = strings.Cut(e.Value, ":")
		}
	}
	if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
		return cp.Name == "grpc" && fmt.Sprint(cp.ContainerPort) == grpcPort
	}) {
		fail("%s: GRPC_ADDR port %q is not the container port named grpc", p.owner, grpcPort)
	}
}

// checkProcessors pins GOMAXPROCS to the CPU the service requests: Go
// sizes it from a CPU limit only, and the services set none, so without it
// a service would run one P per core of its node (docs/performance.md,
// "Processors per service").
func checkProcessors(p pod, fail func(string, ...any)) {
	c := p.spec.Containers[0]
	for _, e := range c.Env {
		if e.Name != "GOMAXPROCS" {
			continue
		}
		if e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil || e.ValueFrom.ResourceFieldRef.Resource != "requests.cpu" {
			fail("%s: GOMAXPROCS must come from the container's requests.cpu", p.owner)
		}
		return
	}
	fail("%s: needs GOMAXPROCS from requests.cpu (Go sizes it from a CPU limit only)", p.owner)
}

// isFrontDoor reports whether p is the front door's pod, the only one
// meant to be reachable from outside the cluster.
func isFrontDoor(p pod) bool { return p.kind == "Deployment" && p.name == "frontdoor" }

// notFrontDoor names the pods in ps that are not the front door's.
func notFrontDoor(ps []pod) []string {
	var out []string
	for _, p := range ps {
		if !isFrontDoor(p) {
			out = append(out, p.owner)
		}
	}
	return out
}

// selectPods is every workload's pod that sel matches, Jobs included.
func selectPods(pods []pod, sel labels.Selector) []pod {
	var out []pod
	for _, p := range pods {
		if sel.Matches(labels.Set(p.labels)) {
			out = append(out, p)
		}
	}
	return out
}

// openPeers describes what an ingress rule admits beyond the namespace's
// own pods, or is empty when it admits only pods selected by podSelector.
// A rule with no from admits every source; an ipBlock admits addresses
// from anywhere; a namespaceSelector admits pods of other namespaces,
// unless it names one system: both the namespace and its pods by label
// (the way an overlay admits an internal system from another namespace,
// deploy/k8s/base/networkpolicies.yaml).
func openPeers(rule networkingv1.NetworkPolicyIngressRule) string {
	if len(rule.From) == 0 {
		return "every source (no from)"
	}
	var open []string
	for _, peer := range rule.From {
		switch {
		case peer.IPBlock != nil:
			open = append(open, "ipBlock "+peer.IPBlock.CIDR)
		case peer.NamespaceSelector != nil && !(names(peer.NamespaceSelector) && names(peer.PodSelector)):
			open = append(open, "a namespaceSelector that does not name both a namespace and its pods")
		}
	}
	return strings.Join(open, ", ")
}

// names reports whether a label selector selects by something: nil and
// the empty selector select everything.
func names(s *metav1.LabelSelector) bool {
	return s != nil && len(s.MatchLabels)+len(s.MatchExpressions) > 0
}

func allContainers(ps *corev1.PodSpec) []corev1.Container {
	return append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...)
}

func matchPods(pods []pod, selector map[string]string) []pod {
	if len(selector) == 0 {
		return nil
	}
	var out []pod
	for _, p := range pods {
		if p.longRun && labels.SelectorFromSet(selector).Matches(labels.Set(p.labels)) {
			out = append(out, p)
		}
	}
	return out
}

func hasPort(ps *corev1.PodSpec, name string, proto corev1.Protocol) bool {
	return slices.ContainsFunc(ps.Containers, func(c corev1.Container) bool { return hasPortIn(c, name, proto) })
}

func hasPortIn(c corev1.Container, name string, proto corev1.Protocol) bool {
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	return slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		pp := p.Protocol
		if pp == "" {
			pp = corev1.ProtocolTCP
		}
		return p.Name == name && pp == proto
	})
}

func deref(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
