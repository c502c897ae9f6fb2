package registry

import (
	"crypto/ed25519"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/internal/catalog"
	"github.com/agtpsuite/agtp/catalogsvc/internal/manifest"
	"github.com/agtpsuite/agtp/catalogsvc/route"
)

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
