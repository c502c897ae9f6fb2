package accessref

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestOpenAPIDescribesEveryRoute checks the committed OpenAPI document
// (make generate) has an operation for every REST route of
// proto/gateway.yaml and none besides, so a client generated from it
// reaches exactly what the gateways serve.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	routes, err := ReadRoutes("../../proto/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../proto/openapi/agtp.swagger.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Swagger string                                `json:"swagger"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Swagger != "2.0" {
		t.Fatalf("swagger %q", doc.Swagger)
	}
	// Path variables are named in JSON form in the document
	// ({agent_id} becomes {agentId}); the names do not change the URL.
	vars := regexp.MustCompile(`\{[^}]*\}`)
	described := map[string]bool{}
	for path, ops := range doc.Paths {
		for verb := range ops {
			if verb == "parameters" {
				continue
			}
			described[strings.ToUpper(verb)+" "+vars.ReplaceAllString(path, "{}")] = true
		}
	}
	served := map[string]bool{}
	for selector, r := range routes {
		key := r.Verb + " " + vars.ReplaceAllString(r.Path, "{}")
		served[key] = true
		if !described[key] {
			t.Errorf("%s (%s) is routed but not in the OpenAPI document: run make generate", r, selector)
		}
	}
	for key := range described {
		if !served[key] {
			t.Errorf("the OpenAPI document describes %s, which no gateway rule serves", key)
		}
	}
}
