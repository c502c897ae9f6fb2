package check

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestProdAGPExecutePolicyIsNotOpen: the prod overlay is the
// configuration meant to be exposed, and its front door serves AGP, so an
// AGP execute needs a confirmation token there (docs/operations.md,
// "Settings that warn": confirm or strict before exposing the suite).
func TestProdAGPExecutePolicyIsNotOpen(t *testing.T) {
	objs, err := Build(filepath.Join("..", "k8s", "overlays", "prod"))
	if err != nil {
		t.Fatal(err)
	}
	cms := map[string]*corev1.ConfigMap{}
	var dep *appsv1.Deployment
	for _, o := range objs {
		if err := Validate(o); err != nil {
			t.Fatal(err)
		}
		switch x := o.External.(type) {
		case *corev1.ConfigMap:
			cms[x.Name] = x
		case *appsv1.Deployment:
			if x.Name == "policysvc" {
				dep = x
			}
		}
	}
	if dep == nil {
		t.Fatal("no policysvc Deployment")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	policy := "open" // policysvc.DefaultConfig
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil && cms[ef.ConfigMapRef.Name] != nil {
			if v := cms[ef.ConfigMapRef.Name].Data["AGTP_AGP_EXECUTE_POLICY"]; v != "" {
				policy = v
			}
		}
	}
	for _, e := range c.Env {
		if e.Name == "AGTP_AGP_EXECUTE_POLICY" && e.Value != "" {
			policy = e.Value
		}
	}
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "agp-execute-policy="); ok {
			policy = v
		}
	}
	if !slices.Contains([]string{"confirm", "strict"}, policy) {
		t.Errorf("prod policysvc runs with AGTP_AGP_EXECUTE_POLICY=%s: AGP executes need no confirmation token (docs/operations.md: set confirm or strict before exposing the suite)", policy)
	}
}
