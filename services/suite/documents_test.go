package suite

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	identitydemo "github.com/agtpsuite/agtp/identitysvc/demo"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestRESTShowsDocumentsAsObjectsAndStrings reads, through each service's
// REST gateway, every document field that moved off bytes: a Struct is a
// JSON object, an exact-bytes document a string equal to the deprecated
// field's base64 (docs/operations.md, "Enums and documents"); and a
// client that sends only the first release's field is still served.
func TestRESTShowsDocumentsAsObjectsAndStrings(t *testing.T) {
	m := startMatrixSuite(t)
	var admin *caller
	for _, c := range callers(t, m.s.Layout()) {
		if c.label == "operator-admin" {
			admin = c
		}
	}
	if admin == nil {
		t.Fatal("no operator/admin caller")
	}
	demo, err := identitydemo.Ensure(filepath.Join(m.s.StateDir(), "demo-agent"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	call := func(t *testing.T, owner, verb, path string, body any) map[string]any {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			rd = bytes.NewReader(b)
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, verb, "https://"+m.gateways[owner]+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.http(admin).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", verb, path, res.StatusCode, raw)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %v", verb, path, err)
		}
		return out
	}
	object := func(t *testing.T, doc map[string]any, name string) map[string]any {
		t.Helper()
		o, ok := doc[name].(map[string]any)
		if !ok || len(o) == 0 {
			t.Fatalf("%s is %T %v, want a JSON object", name, doc[name], doc[name])
		}
		return o
	}
	// exact: the string field holds the document, byte for byte the
	// deprecated bytes field (base64 over REST, its name in lowerCamelCase
	// as the gateway writes it).
	exact := func(t *testing.T, doc map[string]any, name, old string) string {
		t.Helper()
		s, ok := doc[name].(string)
		if !ok || !json.Valid([]byte(s)) {
			t.Fatalf("%s is %T %v, want a string holding JSON", name, doc[name], doc[name])
		}
		b, err := base64.StdEncoding.DecodeString(doc[old].(string))
		if err != nil || string(b) != s {
			t.Fatalf("%s differs from %s (%v)", name, old, err)
		}
		return s
	}

	t.Run("catalog", func(t *testing.T) {
		mf := call(t, "catalogsvc", http.MethodGet, "/v1/catalog/manifest", nil)
		exact(t, mf, "manifest", "manifestJson")
		snap := object(t, call(t, "catalogsvc", http.MethodGet, "/v1/catalog/snapshot", nil), "snapshot")
		exact(t, snap, "manifest", "manifestJson")
		eps, _ := snap["endpoints"].([]any)
		if len(eps) == 0 {
			t.Fatal("no endpoints in the snapshot")
		}
		for _, e := range eps {
			ep := e.(map[string]any)
			if def := object(t, ep, "definition"); def["method"] != ep["method"] || def["path"] != ep["path"] {
				t.Fatalf("definition %v of %v %v", def, ep["method"], ep["path"])
			}
		}
		def := func(path string) map[string]any {
			return map[string]any{
				"method": "SUMMARIZE", "path": path, "description": "Summarizes one note.",
				"semantic":      map[string]any{"intent": "Summarize a note", "actor": "agent", "outcome": "A summary", "capability": "analysis", "confidence_guidance": 0.8, "impact_tier": "informational", "is_idempotent": true},
				"input_schema":  map[string]any{"type": "object", "additionalProperties": false},
				"output_schema": map[string]any{"type": "object", "additionalProperties": true},
				"errors":        []any{"note_not_found"},
				"handler":       map[string]any{"type": "registered_function", "function": "demo.notes.summarize"},
			}
		}
		// The current form: definition as an object.
		put := call(t, "catalogsvc", http.MethodPost, "/v1/catalog/endpoints", map[string]any{"definition": def("/rest-notes/summary")})
		if d := object(t, object(t, put, "endpoint"), "definition"); d["path"] != "/rest-notes/summary" {
			t.Fatalf("stored definition %v", d)
		}
		// A first-release client: definition_json as base64 only.
		b, _ := json.Marshal(def("/old-notes/summary"))
		put = call(t, "catalogsvc", http.MethodPost, "/v1/catalog/endpoints", map[string]any{"definition_json": base64.StdEncoding.EncodeToString(b)})
		if d := object(t, object(t, put, "endpoint"), "definition"); d["path"] != "/old-notes/summary" {
			t.Fatalf("definition sent as definition_json: %v", d)
		}
	})

	t.Run("identity", func(t *testing.T) {
		g := call(t, "identitysvc", http.MethodGet, "/v1/identity/agents/"+demo.AgentID+"/genesis", nil)
		if s := exact(t, g, "genesis", "genesisJson"); s != string(demo.Genesis.Bytes()) {
			t.Fatal("genesis is not the registered Genesis byte for byte")
		}
		exact(t, call(t, "identitysvc", http.MethodGet, "/v1/identity/namespace", nil), "document", "documentJson")
		exact(t, call(t, "identitysvc", http.MethodGet, "/v1/identity/agents/"+demo.AgentID+"/document?format=json", nil), "document", "documentJson")
	})

	t.Run("rcns", func(t *testing.T) {
		exact(t, call(t, "rcnssvc", http.MethodGet, "/v1/rcns/patterns", nil), "body", "bodyJson")
		r := call(t, "rcnssvc", http.MethodGet, "/v1/rcns/recipes/order-summary", nil)
		if rec := object(t, r, "recipe"); rec["recipe_name"] != "order-summary" {
			t.Fatalf("recipe %v", rec)
		}
	})

	t.Run("audit", func(t *testing.T) {
		jwks := object(t, call(t, "auditsvc", http.MethodGet, "/v1/audit/jwks", nil), "jwks")
		if keys, _ := jwks["keys"].([]any); len(keys) == 0 {
			t.Fatalf("jwks %v", jwks)
		}
	})
}
