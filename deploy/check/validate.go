// Package check validates the suite's Kubernetes manifests offline: every
// overlay under deploy/k8s/overlays is built with kustomize (the krusty
// library kustomize itself runs), every object is decoded strictly into the
// Kubernetes API types (an unknown or misspelt field, a wrong type or an
// unknown kind is an error), defaulted and converted the way the API server
// does, and checked with the API server's own validation code
// (k8s.io/kubernetes/pkg/apis/*/validation). The suite's own rules come on
// top (rules.go): probes, resources and a non-root, read-only container for
// every workload; a Service, HorizontalPodAutoscaler, PodDisruptionBudget
// for every service; references that resolve; only the front door public;
// credentials only from Secrets; every suite client certificate naming its
// own identity.
//
// It is a separate module so that the Kubernetes dependencies stay out of
// the suite's go.mod. Nothing is downloaded at run time: no JSON schemas,
// no cluster. Run it with `make deploy-check`.
package check

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/apps"
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	appsvalidation "k8s.io/kubernetes/pkg/apis/apps/validation"
	"k8s.io/kubernetes/pkg/apis/autoscaling"
	_ "k8s.io/kubernetes/pkg/apis/autoscaling/install"
	autoscalingvalidation "k8s.io/kubernetes/pkg/apis/autoscaling/validation"
	"k8s.io/kubernetes/pkg/apis/batch"
	_ "k8s.io/kubernetes/pkg/apis/batch/install"
	batchvalidation "k8s.io/kubernetes/pkg/apis/batch/validation"
	"k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/apis/networking"
	_ "k8s.io/kubernetes/pkg/apis/networking/install"
	networkingvalidation "k8s.io/kubernetes/pkg/apis/networking/validation"
	"k8s.io/kubernetes/pkg/apis/policy"
	_ "k8s.io/kubernetes/pkg/apis/policy/install"
	policyvalidation "k8s.io/kubernetes/pkg/apis/policy/validation"
	"k8s.io/kubernetes/pkg/apis/rbac"
	_ "k8s.io/kubernetes/pkg/apis/rbac/install"
	rbacvalidation "k8s.io/kubernetes/pkg/apis/rbac/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Object is one built manifest: its JSON, its kind, and the internal
// (validated) API object when the kind is a Kubernetes one.
type Object struct {
	GVK       schema.GroupVersionKind
	Name      string
	Namespace string
	JSON      []byte
	// External is the versioned object as decoded (e.g. *appsv1.Deployment),
	// after defaulting; nil for custom resources.
	External runtime.Object
}

func (o *Object) String() string {
	return fmt.Sprintf("%s %s/%s", o.GVK.Kind, o.Namespace, o.Name)
}

// Build runs kustomize on dir, as `kustomize build dir` would.
func Build(dir string) ([]*Object, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*Object
	for _, r := range m.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.CurId(), err)
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(b, &meta); err != nil {
			return nil, fmt.Errorf("%s: %w", r.CurId(), err)
		}
		out = append(out, &Object{
			GVK:  schema.FromAPIVersionAndKind(meta.APIVersion, meta.Kind),
			Name: meta.Metadata.Name, Namespace: meta.Metadata.Namespace, JSON: b,
		})
	}
	return out, nil
}

// strict decodes into the registered API types and refuses unknown or
// duplicated fields.
var strict = serializer.NewCodecFactory(legacyscheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// Validate decodes o strictly, defaults it, converts it to the internal
// version and runs the API server's validation for its kind. Custom
// resources the suite uses (cert-manager) are decoded strictly into local
// types. Any other kind is an error: nothing passes unchecked.
func Validate(o *Object) error {
	if o.GVK.Group == certManagerGroup {
		return validateCertManager(o)
	}
	ext, gvk, err := strict.Decode(o.JSON, nil, nil)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	legacyscheme.Scheme.Default(ext)
	o.External = ext
	internal, err := legacyscheme.Scheme.ConvertToVersion(ext.DeepCopyObject(), schema.GroupVersion{Group: gvk.Group, Version: runtime.APIVersionInternal})
	if err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	prepareForCreate(internal)
	var errs field.ErrorList
	switch x := internal.(type) {
	case *core.Namespace:
		errs = corevalidation.ValidateNamespace(x)
	case *core.ConfigMap:
		errs = corevalidation.ValidateConfigMap(x)
	case *core.Secret:
		errs = corevalidation.ValidateSecret(x)
	case *core.Service:
		errs = corevalidation.ValidateServiceCreate(x)
	case *core.ServiceAccount:
		errs = corevalidation.ValidateServiceAccount(x)
	case *apps.Deployment:
		errs = appsvalidation.ValidateDeployment(x, podutil.GetValidationOptionsFromPodTemplate(&x.Spec.Template, nil))
	case *apps.StatefulSet:
		errs = appsvalidation.ValidateStatefulSet(x, podutil.GetValidationOptionsFromPodTemplate(&x.Spec.Template, nil))
	case *batch.Job:
		errs = batchvalidation.ValidateJob(x, batchvalidation.JobValidationOptions{
			PodValidationOptions:  podutil.GetValidationOptionsFromPodTemplate(&x.Spec.Template, nil),
			RequirePrefixedLabels: true,
		})
	case *autoscaling.HorizontalPodAutoscaler:
		errs = autoscalingvalidation.ValidateHorizontalPodAutoscaler(x, autoscalingvalidation.HorizontalPodAutoscalerSpecValidationOptions{MinReplicasLowerBound: 1})
	case *policy.PodDisruptionBudget:
		errs = policyvalidation.ValidatePodDisruptionBudget(x, policyvalidation.PodDisruptionBudgetValidationOptions{})
	case *networking.NetworkPolicy:
		errs = networkingvalidation.ValidateNetworkPolicy(x, networkingvalidation.NetworkPolicyValidationOptions{})
	case *rbac.Role:
		errs = rbacvalidation.ValidateRole(x)
	case *rbac.RoleBinding:
		errs = rbacvalidation.ValidateRoleBinding(x)
	default:
		return fmt.Errorf("no validation for %T: add it to check.Validate", internal)
	}
	if agg := errs.ToAggregate(); agg != nil {
		return agg
	}
	return nil
}

// prepareForCreate does what the API server does to an object between
// decoding and validation on create: it allocates a Service's cluster IPs
// and health-check node port, and generates a Job's selector and labels
// (the registry strategies and allocators of kube-apiserver).
func prepareForCreate(obj runtime.Object) {
	switch x := obj.(type) {
	case *core.Service:
		if x.Spec.ClusterIP == core.ClusterIPNone {
			x.Spec.ClusterIPs = []string{core.ClusterIPNone}
		} else if x.Spec.Type != core.ServiceTypeExternalName {
			x.Spec.ClusterIP, x.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
			x.Spec.IPFamilies = []core.IPFamily{core.IPv4Protocol}
		}
		if x.Spec.Type == core.ServiceTypeLoadBalancer || x.Spec.Type == core.ServiceTypeNodePort {
			for i := range x.Spec.Ports {
				if x.Spec.Ports[i].NodePort == 0 {
					x.Spec.Ports[i].NodePort = 30000 + int32(i)
				}
			}
			if x.Spec.ExternalTrafficPolicy == core.ServiceExternalTrafficPolicyLocal && x.Spec.HealthCheckNodePort == 0 {
				x.Spec.HealthCheckNodePort = 32000
			}
		}
	case *batch.Job:
		if x.Spec.ManualSelector == nil || !*x.Spec.ManualSelector {
			const uid = "00000000-0000-4000-8000-000000000001"
			x.UID = uid
			gen := map[string]string{
				batch.ControllerUidLabel: uid, batch.JobNameLabel: x.Name,
				batch.LegacyControllerUidLabel: uid, batch.LegacyJobNameLabel: x.Name,
			}
			if x.Spec.Template.Labels == nil {
				x.Spec.Template.Labels = map[string]string{}
			}
			for k, v := range gen {
				x.Spec.Template.Labels[k] = v
			}
			x.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{batch.ControllerUidLabel: uid}}
		}
	}
}

// --- cert-manager (cert-manager.io/v1), the fields the suite uses. ---

const certManagerGroup = "cert-manager.io"

type cmMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

type cmIssuerRef struct {
	Group string `json:"group,omitempty"`
	Kind  string `json:"kind"`
	Name  string `json:"name"`
}

// Certificate is cert-manager's Certificate, reduced to what the suite
// sets (https://cert-manager.io/docs/reference/api-docs/#cert-manager.io/v1.Certificate).
type Certificate struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   cmMeta `json:"metadata"`
	Spec       struct {
		SecretName  string   `json:"secretName"`
		CommonName  string   `json:"commonName,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		URIs        []string `json:"uris,omitempty"`
		IsCA        bool     `json:"isCA,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef cmIssuerRef `json:"issuerRef"`
	} `json:"spec"`
}

// Issuer is cert-manager's Issuer with the selfSigned and ca kinds.
type Issuer struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   cmMeta `json:"metadata"`
	Spec       struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

var cmUsages = map[string]bool{"digital signature": true, "key encipherment": true, "server auth": true, "client auth": true, "cert sign": true}

func validateCertManager(o *Object) error {
	dec := func(v any) error {
		d := json.NewDecoder(strings.NewReader(string(o.JSON)))
		d.DisallowUnknownFields()
		return d.Decode(v)
	}
	var errs []string
	switch o.GVK.Kind {
	case "Certificate":
		var c Certificate
		if err := dec(&c); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		if c.Spec.SecretName == "" {
			errs = append(errs, "spec.secretName is required")
		}
		if c.Spec.IssuerRef.Name == "" || (c.Spec.IssuerRef.Kind != "Issuer" && c.Spec.IssuerRef.Kind != "ClusterIssuer") {
			errs = append(errs, "spec.issuerRef needs a name and kind Issuer or ClusterIssuer")
		}
		if !c.Spec.IsCA && len(c.Spec.DNSNames) == 0 && !contains(c.Spec.Usages, "client auth") {
			errs = append(errs, "a server certificate needs spec.dnsNames")
		}
		for _, u := range c.Spec.URIs {
			if parsed, err := url.Parse(u); err != nil || parsed.Scheme == "" {
				errs = append(errs, fmt.Sprintf("spec.uris: %q is not an absolute URI", u))
			}
		}
		for _, u := range c.Spec.Usages {
			if !cmUsages[u] {
				errs = append(errs, fmt.Sprintf("spec.usages: unknown usage %q", u))
			}
		}
		if p := c.Spec.PrivateKey; p != nil {
			switch {
			case p.Algorithm != "" && p.Algorithm != "RSA" && p.Algorithm != "ECDSA" && p.Algorithm != "Ed25519":
				errs = append(errs, "spec.privateKey.algorithm: "+p.Algorithm)
			case p.Algorithm == "ECDSA" && p.Size != 0 && p.Size != 256 && p.Size != 384 && p.Size != 521:
				errs = append(errs, fmt.Sprintf("spec.privateKey.size %d is not an ECDSA curve size", p.Size))
			case p.RotationPolicy != "" && p.RotationPolicy != "Always" && p.RotationPolicy != "Never":
				errs = append(errs, "spec.privateKey.rotationPolicy: "+p.RotationPolicy)
			}
		}
	case "Issuer", "ClusterIssuer":
		var i Issuer
		if err := dec(&i); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		if (i.Spec.SelfSigned == nil) == (i.Spec.CA == nil) {
			errs = append(errs, "spec needs exactly one of selfSigned and ca")
		}
		if i.Spec.CA != nil && i.Spec.CA.SecretName == "" {
			errs = append(errs, "spec.ca.secretName is required")
		}
	default:
		return fmt.Errorf("no validation for cert-manager kind %s", o.GVK.Kind)
	}
	if o.GVK.Version != "v1" {
		errs = append(errs, "apiVersion must be cert-manager.io/v1")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
