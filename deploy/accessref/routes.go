package accessref

import (
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Route is the REST route grpc-gateway serves for one RPC.
type Route struct {
	Verb string // GET, POST, ...
	Path string // with {variables}
}

func (r Route) String() string { return r.Verb + " " + r.Path }

// ReadRoutes reads the gateway rules file (proto/gateway.yaml): each
// RPC's selector ("package.Service.Method") to its route. A rule without
// a selector or verb, with two verbs, or a selector with two rules is an
// error.
func ReadRoutes(path string) (map[string]Route, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gateway rules: %w", err)
	}
	var doc struct {
		HTTP struct {
			Rules []map[string]string `yaml:"rules"`
		} `yaml:"http"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("gateway rules %s: %w", path, err)
	}
	routes := map[string]Route{}
	for _, rule := range doc.HTTP.Rules {
		sel := rule["selector"]
		var rt Route
		for _, verb := range []string{"get", "post", "put", "patch", "delete"} {
			if p, ok := rule[verb]; ok {
				if rt.Verb != "" {
					return nil, fmt.Errorf("gateway rules: %s has two verbs", sel)
				}
				rt = Route{Verb: strings.ToUpper(verb), Path: p}
			}
		}
		if sel == "" || rt.Verb == "" {
			return nil, fmt.Errorf("gateway rules: rule %v has no selector or verb", rule)
		}
		if _, dup := routes[sel]; dup {
			return nil, fmt.Errorf("gateway rules: %s has two routes", sel)
		}
		routes[sel] = rt
	}
	return routes, nil
}
