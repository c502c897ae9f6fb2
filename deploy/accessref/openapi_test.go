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
	for selector, rt := range routes {
		for _, r := range rt.All() {
			key := r.Verb + " " + vars.ReplaceAllString(r.Path, "{}")
			served[key] = true
			if !described[key] {
				t.Errorf("%s (%s) is routed but not in the OpenAPI document: run make generate", r, selector)
			}
		}
	}
	for key := range described {
		if !served[key] {
			t.Errorf("the OpenAPI document describes %s, which no gateway rule serves", key)
		}
	}
}

// TestEveryRPCHasARoute: every RPC of every internal API is reachable
// over REST with the verb AIP-136 expects: a Get or List method (AIP-131,
// AIP-132) and a Watch stream by GET with its request in the path and
// query; a custom method (":verb") by POST, or GET when it only reads.
// A method without a rule would get grpc-gateway's unbound
// "POST /package.Service/Method" route, which no document describes.
func TestEveryRPCHasARoute(t *testing.T) {
	routes, err := ReadRoutes("../../proto/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	customVerb := regexp.MustCompile(`:([a-z][A-Za-z]*)$`)
	for _, a := range APIs() {
		for _, m := range a.Methods() {
			name := m[strings.LastIndex(m, "/")+1:]
			sel := a.Desc.ServiceName + "." + name
			rt, ok := routes[sel]
			if !ok {
				t.Errorf("%s (%s) has no REST route in proto/gateway.yaml", sel, a.Service)
				continue
			}
			for _, prefix := range []string{"Get", "List", "Watch"} {
				if strings.HasPrefix(name, prefix) && rt.Verb != "GET" {
					t.Errorf("%s is routed as %s; a %s method is GET", sel, rt, prefix)
				}
			}
			for _, r := range rt.All() {
				if strings.Contains(r.Path, ":") && !customVerb.MatchString(r.Path) {
					t.Errorf("%s: %s has a custom verb that is not :lowerCamel at the end", sel, r)
				}
				if customVerb.MatchString(r.Path) && r.Verb != "POST" && r.Verb != "GET" {
					t.Errorf("%s: custom method route %s is neither POST nor GET", sel, r)
				}
			}
		}
	}
}
