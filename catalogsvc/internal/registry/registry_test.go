package registry

import (
	"encoding/json"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/demo"
	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/internal/catalog"
	"github.com/agtpsuite/agtp/catalogsvc/internal/catalogdata"
	"github.com/agtpsuite/agtp/catalogsvc/internal/manifest"
	"github.com/agtpsuite/agtp/catalogsvc/internal/policy"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
)

func testConfig(t testing.TB) Config {
	t.Helper()
	cat, err := catalog.Load(catalogdata.Default)
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Catalog: cat,
		Service: Service{Toggles: DefaultToggles()},
		Manifest: ManifestInfo{AgtpVersion: "1.0", AgtpAPIVersion: "1.0", ServerID: "agents.example.test", Operator: "Example",
			Contact: "ops@example.test", AgentDisclosure: "public", DocumentVersionPrefix: "v"},
	}
}

func demoFiles(t testing.TB) []File {
	t.Helper()
	var out []File
	entries, _ := fs.ReadDir(demo.FS, ".")
	for _, e := range entries {
		b, _ := fs.ReadFile(demo.FS, e.Name())
		out = append(out, File{Name: e.Name(), Data: b})
	}
	return out
}

func build(t *testing.T, cfg Config, files []File, rt []Runtime, signer *manifest.Signer) *State {
	t.Helper()
	d, err := Build(cfg, files, rt)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	st, err := d.Finalize(Version{Counter: 3, Updated: now, Issued: now.Add(-time.Hour)}, signer)
	if err != nil {
		t.Fatalf("Finalize: %v", err)
	}
	return st
}

func decodeManifest(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Test14CustomMethod is api assertion 14 (AGTP-API §3.3, §8.4): a custom
// method declared in policies.methods, bound to an endpoint, routes and is
// listed.
func Test14CustomMethod(t *testing.T) {
	cfg := testConfig(t)
	cfg.Service.Methods = policy.Methods{Custom: []string{"FROBNICATE"}}
	def := strings.Replace(string(demoFile(t, "documents-summarize.yaml")), "method: SUMMARIZE", "method: FROBNICATE", 1)
	def = strings.Replace(def, "capability: analysis", "capability: mechanics", 1)
	st := build(t, cfg, []File{{Name: "frob.yaml", Data: []byte(def)}}, nil, nil)
	m := decodeManifest(t, st.Manifest)
	if !slices.Contains(m["custom_methods"].([]any), any("FROBNICATE")) {
		t.Fatalf("custom_methods %v", m["custom_methods"])
	}
	if d := st.Table.Decide("FROBNICATE", "/documents"); d.Outcome != route.Matched {
		t.Fatalf("decide %+v", d)
	}
	// Without the declaration the file is refused, naming file and field.
	cfg.Service.Methods = policy.Methods{}
	_, err := Build(cfg, []File{{Name: "frob.yaml", Data: []byte(def)}}, nil)
	if err == nil || !strings.Contains(err.Error(), "frob.yaml:2: method:") || !strings.Contains(err.Error(), "method-not-in-catalog") {
		t.Fatalf("err = %v", err)
	}
}

func demoFile(t *testing.T, name string) []byte {
	b, err := fs.ReadFile(demo.FS, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBuildRefusals(t *testing.T) {
	summarize := demoFile(t, "documents-summarize.yaml")
	tests := []struct {
		name  string
		mut   func(*Config)
		files []File
		want  string
	}{
		{"duplicate endpoint across files", nil, []File{{"a.yaml", summarize}, {"b.yaml", summarize}}, "duplicate-endpoint"},
		{"reserved DISCOVER path without override", nil, []File{{"d.yaml", []byte(strings.NewReplacer("method: SUMMARIZE", "method: DISCOVER", "path: /documents", "path: /methods", "capability: analysis", "capability: discovery").Replace(string(summarize)))}}, "reserved-discover-path"},
		{"ambiguous templates", nil, []File{
			{"a.yaml", []byte(strings.NewReplacer("path: /documents", "path: /docs/{doc_id}", "text: {", "doc_id: {type: string}\n    text: {").Replace(string(summarize)))},
			{"b.yaml", []byte(strings.NewReplacer("path: /documents", "path: /{kind}/latest", "text: {", "kind: {type: string}\n    text: {").Replace(string(summarize)))},
		}, "ambiguity"},
		{"14 vocabulary declares an unused verb", nil, []File{{"_service.yaml", []byte("vocabulary:\n  declared_verbs: [SUMMARIZE, BOOK]\n")}, {"s.yaml", summarize}}, "BOOK is declared but no endpoint uses it"},
		{"14 vocabulary misses a used verb", nil, []File{{"_service.yaml", []byte("vocabulary:\n  declared_verbs: []\n")}, {"s.yaml", summarize}}, "SUMMARIZE used by an endpoint but not declared"},
		{"15 negotiable without data_manifest", nil, []File{{"_service.yaml", []byte("vocabulary:\n  declared_verbs: [SUMMARIZE]\n  negotiable: true\n")}, {"s.yaml", summarize}}, "data-manifest-required"},
		{"16 data_manifest with record counts", nil, []File{{"_service.yaml", []byte("data_manifest:\n  available_data:\n    - class: orders\n      record_count: 12000\n")}}, "record_count"},
		{"16 pre-auth discovery with anonymous discovery off", nil, []File{{"_service.yaml", []byte("policies:\n  anonymous_discovery: false\ndata_manifest:\n  available_data: [{class: orders}]\n  pre_auth_discovery: true\n")}}, "pre-auth-discovery"},
		{"legacy typo is a hard error", func(c *Config) { c.Service.Methods.Legacy = policy.List("GET", "FETCH") }, nil, "legacy-value"},
		{"alias chain is a hard error", func(c *Config) { c.Service.Methods.Aliases = map[string]string{"GET": "FETCH", "GRAB": "GET"} }, nil, "alias"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			if tc.mut != nil {
				tc.mut(&cfg)
			}
			_, err := Build(cfg, tc.files, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRuntimeLayering(t *testing.T) {
	cfg := testConfig(t)
	files := demoFiles(t)
	// A tombstone hides a file endpoint; a runtime definition overrides
	// one; a runtime definition on a verb the catalog lacks is skipped
	// with a warning rather than failing the configuration.
	d0, err := Build(cfg, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := d0.Context()
	override := strings.Replace(string(demoFile(t, "documents-summarize.yaml")), "Summarizes the given text", "Summarizes text (runtime)", 1)
	rtEps, err := endpoint.ParseAndCompile("x.yaml", []byte(override), endpoint.FormatAuto, ctx)
	if err != nil {
		t.Fatal(err)
	}
	rtEp := rtEps[0]
	bad := strings.Replace(string(rtEp.JSON), `"method":"SUMMARIZE"`, `"method":"FROBNICATE"`, 1)
	d, err := Build(cfg, files, []Runtime{
		{Key: "CANCEL /orders/{order_id}", Deleted: true},
		{Key: "SUMMARIZE /documents", Tier: catalogv1.EndpointTier_ENDPOINT_TIER_B, Definition: rtEp.JSON},
		{Key: "FROBNICATE /documents", Definition: []byte(bad)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.Origin("CANCEL /orders/{order_id}") != "" || d.Origin("SUMMARIZE /documents") != "runtime" || !d.IsBase("SUMMARIZE /documents") {
		t.Fatalf("origins: cancel=%q summarize=%q", d.Origin("CANCEL /orders/{order_id}"), d.Origin("SUMMARIZE /documents"))
	}
	if !slices.ContainsFunc(d.Warnings(), func(w string) bool { return strings.Contains(w, "FROBNICATE /documents refused") }) {
		t.Fatalf("warnings %v", d.Warnings())
	}
	if d.ContentHash == d0.ContentHash {
		t.Fatal("content hash did not change")
	}
}
