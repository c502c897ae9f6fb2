package e2e

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/agtpsuite/agtp/services/devpki"
)

// cpuRequests reads the first container's requests.cpu of every Deployment
// in a manifest file, by Deployment name.
func cpuRequests(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Resources struct {
								Requests struct {
									CPU string `yaml:"cpu"`
								} `yaml:"requests"`
							} `yaml:"resources"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc.Kind == "Deployment" && len(doc.Spec.Template.Spec.Containers) > 0 {
			if cpu := doc.Spec.Template.Spec.Containers[0].Resources.Requests.CPU; cpu != "" {
				out[doc.Metadata.Name] = cpu
			}
		}
	}
}

// wholeCPUs is a Kubernetes CPU quantity rounded up to whole CPUs, as a
// resourceFieldRef with divisor 1 gives it.
func wholeCPUs(q string) (int, error) {
	if m, ok := strings.CutSuffix(q, "m"); ok {
		n, err := strconv.Atoi(m)
		return (n + 999) / 1000, err
	}
	f, err := strconv.ParseFloat(q, 64)
	return int(math.Ceil(f)), err
}

// The benchmark runs each service with the Ps the production overlay's
// CPU requests give it through GOMAXPROCS, so that its figures are those of
// the suite as deployed.
func TestDeployedProcessorsFollowTheManifests(t *testing.T) {
	k8s := filepath.Join("..", "deploy", "k8s")
	requests := map[string]string{}
	for _, n := range devpki.ServiceNames {
		for name, cpu := range cpuRequests(t, filepath.Join(k8s, "base", n+".yaml")) {
			requests[name] = cpu
		}
	}
	// The overlay's patches win over the base.
	for name, cpu := range cpuRequests(t, filepath.Join(k8s, "overlays", "prod", "resources.yaml")) {
		requests[name] = cpu
	}
	for _, n := range devpki.ServiceNames {
		q, ok := requests[n]
		if !ok {
			t.Errorf("%s: no CPU request in the manifests", n)
			continue
		}
		want, err := wholeCPUs(q)
		if err != nil {
			t.Fatalf("%s: CPU request %q: %v", n, q, err)
		}
		if got := DeployedProcessors[n]; got != want {
			t.Errorf("%s: the benchmark runs %d Ps, the production overlay requests %s CPU (%d)", n, got, q, want)
		}
	}
}
