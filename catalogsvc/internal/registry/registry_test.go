package registry

import (
	"crypto/ed25519"
	"encoding/json"
	"io/fs"
	"regexp"
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

// TestManifestDigestAPI pins api assertions 54-64 on the
// manifest of the demo configuration.
func TestManifestDigestAPI(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	signer, err := manifest.NewSigner(priv, "suite-1")
	if err != nil {
		t.Fatal(err)
	}
	st := build(t, testConfig(t), demoFiles(t), nil, signer)
	m := decodeManifest(t, st.Manifest)

	t.Run("54 version fields are strings and catalog_versions_supported holds catalog_version", func(t *testing.T) {
		for _, k := range []string{"agtp_version", "agtp_api_version", "document_version", "catalog_version"} {
			if _, ok := m[k].(string); !ok {
				t.Errorf("%s = %v", k, m[k])
			}
		}
		sup, _ := m["catalog_versions_supported"].([]any)
		if !slices.Contains(sup, m["catalog_version"]) {
			t.Errorf("supported %v lacks %v", sup, m["catalog_version"])
		}
		if m["document_version"] != "v3" || m["catalog_version"] != "1.0.0" {
			t.Errorf("document_version %v catalog_version %v", m["document_version"], m["catalog_version"])
		}
	})
	t.Run("55 exactly one supported catalog version", func(t *testing.T) {
		if sup := m["catalog_versions_supported"].([]any); len(sup) != 1 {
			t.Errorf("%v", sup)
		}
	})
	eps := m["endpoints"].([]any)
	t.Run("56 handler projections carry only type", func(t *testing.T) {
		for _, e := range eps {
			h := e.(map[string]any)["handler"].(map[string]any)
			if len(h) != 1 || h["type"] == nil {
				t.Errorf("handler %v", h)
			}
		}
		if strings.Contains(string(st.Manifest), "demo.orders") {
			t.Error("function names leak into the manifest")
		}
	})
	t.Run("57-59 every endpoint is complete, semantic valid, input strict", func(t *testing.T) {
		for _, e := range eps {
			em := e.(map[string]any)
			for _, k := range []string{"method", "path", "description", "semantic", "input_schema", "output_schema", "errors", "handler"} {
				if _, ok := em[k]; !ok {
					t.Errorf("%v %v lacks %s", em["method"], em["path"], k)
				}
			}
			s := em["semantic"].(map[string]any)
			if len(s) < 7 {
				t.Errorf("semantic %v", s)
			}
			c, _ := s["confidence"].(float64)
			if _, ok := s["is_idempotent"].(bool); !ok || c < 0 || c > 1 ||
				!slices.Contains([]string{"informational", "reversible", "irreversible"}, s["impact"].(string)) ||
				!slices.Contains(catalog.Categories, s["capability"].(string)) {
				t.Errorf("semantic %v", s)
			}
			in := em["input_schema"].(map[string]any)
			if in["type"] != "object" || in["additionalProperties"] != false {
				t.Errorf("input_schema %v", in)
			}
		}
	})
	t.Run("61 policies toggles", func(t *testing.T) {
		p := m["policies"].(map[string]any)
		for _, k := range []string{"wildcards_accepted", "anonymous_discovery", "scope_required_for_invocation", "synthesis_enabled"} {
			if _, ok := p[k].(bool); !ok {
				t.Errorf("%s = %v", k, p[k])
			}
		}
		if d, _ := p["max_synthesis_depth"].(float64); d < 1 {
			t.Errorf("max_synthesis_depth %v", p["max_synthesis_depth"])
		}
		meth := p["methods"].(map[string]any)
		if meth["allow"] != "*" || meth["legacy"] != "NONE" || meth["aliases"].(map[string]any)["GET"] != "FETCH" {
			t.Errorf("methods %v", meth)
		}
	})
	t.Run("62 agent_disclosure", func(t *testing.T) {
		if !slices.Contains([]any{"public", "authenticated", "private"}, m["agent_disclosure"]) {
			t.Errorf("%v", m["agent_disclosure"])
		}
	})
	t.Run("63 signature is a JWS compact string that verifies", func(t *testing.T) {
		sig, _ := m["manifest_signature"].(string)
		if !regexp.MustCompile(`^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+$`).MatchString(sig) {
			t.Fatalf("signature %q", sig)
		}
		kid, err := manifest.Verify(st.Manifest, pub)
		if err != nil || kid != "suite-1" {
			t.Fatalf("verify: kid=%q err=%v", kid, err)
		}
		tampered := strings.Replace(string(st.Manifest), `"operator":"Example"`, `"operator":"Evil"`, 1)
		if _, err := manifest.Verify([]byte(tampered), pub); err == nil {
			t.Fatal("tampered manifest verifies")
		}
	})
	t.Run("64 endpoints include the built-in DISCOVER /methods and the demo endpoints", func(t *testing.T) {
		var keys []string
		for _, e := range eps {
			em := e.(map[string]any)
			keys = append(keys, em["method"].(string)+" "+em["path"].(string))
		}
		for _, k := range []string{"DISCOVER /methods", "DISCOVER /", "QUERY /orders/{order_id}", "CREATE /orders", "SUMMARIZE /documents", "EXECUTE /reports/{report_id}"} {
			if !slices.Contains(keys, k) {
				t.Errorf("manifest endpoints lack %s: %v", k, keys)
			}
		}
	})
	t.Run("server block and embedded methods", func(t *testing.T) {
		srv := m["server"].(map[string]any)
		for _, k := range []string{"server_id", "domain", "operator", "contact", "supported_features", "issued", "updated"} {
			if _, ok := srv[k]; !ok {
				t.Errorf("server lacks %s", k)
			}
		}
		if srv["updated"] != "2026-05-01T12:00:00Z" || srv["issued"] != "2026-05-01T11:00:00Z" {
			t.Errorf("times %v %v", srv["issued"], srv["updated"])
		}
		if len(m["embedded_methods"].([]any)) != 18 {
			t.Errorf("embedded_methods %v", m["embedded_methods"])
		}
		for _, k := range []string{"hosted_agents", "agent_disclosure_notice", "apis", "hosted_protocols"} {
			if _, ok := m[k]; !ok {
				t.Errorf("manifest lacks %s", k)
			}
		}
	})
	t.Run("snapshot carries version, etag and policies", func(t *testing.T) {
		s := st.Snapshot
		if s.GetRevision() != 3 || s.GetApiVersion() != "1.0.3" || s.GetDocumentVersion() != "v3" || s.GetManifestEtag() != manifest.ETag(st.Manifest) || !s.GetPolicies().GetAnonymousDiscovery() {
			t.Errorf("snapshot %v %v %v %v", s.GetRevision(), s.GetApiVersion(), s.GetDocumentVersion(), s.GetManifestEtag())
		}
		if d := st.Table.Decide("QUERY", "/orders/o-1"); d.Outcome != route.Matched {
			t.Errorf("demo route: %+v", d)
		}
		if d := st.Table.Decide("FETCH", "/order-history/o-1"); d.EndpointWarning != "deprecated; successor=QUERY /orders/{order_id}; removed_in=2.0" {
			t.Errorf("deprecated demo endpoint warning %q", d.EndpointWarning)
		}
	})
}

func TestUnsignedManifestHasNullSignature(t *testing.T) {
	st := build(t, testConfig(t), nil, nil, nil)
	m := decodeManifest(t, st.Manifest)
	if v, ok := m["manifest_signature"]; !ok || v != nil {
		t.Fatalf("manifest_signature = %v (present %v)", v, ok)
	}
}

// Test62PrivateDisclosureEmptiesHostedAgents is api assertion 62 (AGTP-API
// §8.5).
func Test62PrivateDisclosureEmptiesHostedAgents(t *testing.T) {
	cfg := testConfig(t)
	cfg.Manifest.AgentDisclosure = "private"
	cfg.Manifest.HostedAgents = []any{map[string]any{"agent_id": strings.Repeat("a", 64)}}
	m := decodeManifest(t, build(t, cfg, nil, nil, nil).Manifest)
	if len(m["hosted_agents"].([]any)) != 0 {
		t.Fatalf("hosted_agents %v", m["hosted_agents"])
	}
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

func TestServiceFileOverridesPolicy(t *testing.T) {
	svc := []byte("policies:\n  methods:\n    allow: [BOOK]\n    disallow: [SEARCH, QUERY, NOSUCHVERB]\n    legacy: [GET]\n    aliases: {}\n    redirects:\n      - {from_method: BOOK, from_path: /room, to_method: RESERVE}\n  anonymous_discovery: false\n")
	d, err := Build(testConfig(t), []File{{"_service.yaml", svc}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.Finalize(Version{Counter: 1, Updated: time.Now(), Issued: time.Now()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := st.Snapshot.GetMethodPolicy()
	if !slices.Equal(p.GetAllow(), []string{"BOOK"}) || !slices.Equal(p.GetDisallow(), []string{"SEARCH"}) || !slices.Equal(p.GetLegacy(), []string{"GET"}) || len(p.GetAliases()) != 0 {
		t.Fatalf("policy %v", p)
	}
	joined := strings.Join(d.Warnings(), "\n")
	if !strings.Contains(joined, "QUERY skipped: the floor methods are mandatory") || !strings.Contains(joined, "NOSUCHVERB skipped") {
		t.Fatalf("warnings %v", d.Warnings())
	}
	if st.Snapshot.GetPolicies().GetAnonymousDiscovery() {
		t.Fatal("anonymous_discovery not overridden")
	}
	for _, ep := range st.Snapshot.GetEndpoints() {
		if ep.GetAnonymous() {
			t.Fatalf("%s %s anonymous with anonymous_discovery off", ep.GetMethod(), ep.GetPath())
		}
	}
	if dd := st.Table.Decide("GET", "/"); dd.Outcome == route.MethodViolation {
		t.Fatal("legacy GET not admitted")
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
