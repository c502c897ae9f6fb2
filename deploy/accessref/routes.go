package accessref

import (
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"
)

// Route is the REST route grpc-gateway serves for one RPC.
type Route struct {
	Verb string // GET, POST, ...
	Path string // with {variables}
	// Also are the rule's additional bindings: further routes to the
	// same RPC, kept for clients of an earlier route.
	Also []Route
}

// String is the route and its additional bindings, comma-separated.
func (r Route) String() string {
	s := r.Verb + " " + r.Path
	for _, a := range r.Also {
		s += ", " + a.String()
	}
	return s
}

// All is the route followed by its additional bindings.
func (r Route) All() []Route {
	out := []Route{{Verb: r.Verb, Path: r.Path}}
	for _, a := range r.Also {
		out = append(out, a.All()...)
	}
	return out
}

// rule is one HTTP rule of the rules file (google.api.HttpRule's YAML
// form).
type rule struct {
	Selector string `yaml:"selector"`
	Get      string `yaml:"get"`
	Post     string `yaml:"post"`
	Put      string `yaml:"put"`
	Patch    string `yaml:"patch"`
	Delete   string `yaml:"delete"`
	Body     string `yaml:"body"`
	Also     []rule `yaml:"additional_bindings"`
}

func (r rule) route() (Route, error) {
	var rt Route
	for _, v := range []struct{ verb, path string }{{"GET", r.Get}, {"POST", r.Post}, {"PUT", r.Put}, {"PATCH", r.Patch}, {"DELETE", r.Delete}} {
		if v.path == "" {
			continue
		}
		if rt.Verb != "" {
			return Route{}, fmt.Errorf("gateway rules: %s has two verbs", r.Selector)
		}
		rt = Route{Verb: v.verb, Path: v.path}
	}
	if rt.Verb == "" {
		return Route{}, fmt.Errorf("gateway rules: rule %+v has no verb", r)
	}
	for _, a := range r.Also {
		if a.Selector != "" || len(a.Also) > 0 {
			return Route{}, fmt.Errorf("gateway rules: an additional binding of %s names a selector or nests bindings", r.Selector)
		}
		a.Selector = r.Selector
		b, err := a.route()
		if err != nil {
			return Route{}, err
		}
		rt.Also = append(rt.Also, b)
	}
	return rt, nil
}

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
			Rules []rule `yaml:"rules"`
		} `yaml:"http"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("gateway rules %s: %w", path, err)
	}
	routes := map[string]Route{}
	for _, r := range doc.HTTP.Rules {
		if r.Selector == "" {
			return nil, fmt.Errorf("gateway rules: rule %+v has no selector", r)
		}
		rt, err := r.route()
		if err != nil {
			return nil, err
		}
		if _, dup := routes[r.Selector]; dup {
			return nil, fmt.Errorf("gateway rules: %s has two routes", r.Selector)
		}
		routes[r.Selector] = rt
	}
	return routes, nil
}
