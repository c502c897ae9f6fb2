package catalogstate

import (
	"slices"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// TestMethodsFor: an agent's methods are those of the endpoints it may
// invoke (anonymous, or its scopes cover every required one), beyond the
// floor, sorted and once each.
func TestMethodsFor(t *testing.T) {
	ep := func(method string, anonymous bool, scopes ...string) *endpoint.Endpoint {
		return &endpoint.Endpoint{Def: &endpoint.Definition{Method: method, Path: "/" + method, Anonymous: anonymous, RequiredScopes: scopes}}
	}
	st := &State{Endpoints: []*endpoint.Endpoint{
		ep("QUOTE", true), ep("MONITOR", false), ep("QUERY", false, "orders:read"),
		ep("CREATE", false, "orders:write"), ep("CANCEL", false, "orders:write"), ep("PURCHASE", false, "orders:write", "payments:purchase"),
		ep("CREATE", false, "orders:write"),
	}}
	for _, tc := range []struct {
		name   string
		scopes []string
		want   []string
	}{
		{"no scopes", nil, []string{"MONITOR", "QUOTE"}},
		{"orders:write", []string{"orders:write"}, []string{"CANCEL", "CREATE", "MONITOR", "QUOTE"}},
		{"a wildcard covers both of PURCHASE's", []string{"*:*"}, []string{"CANCEL", "CREATE", "MONITOR", "PURCHASE", "QUOTE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := agtp.ParseScopeList(tc.scopes)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.MethodsFor(set); !slices.Equal(got, tc.want) {
				t.Fatalf("MethodsFor = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDocumentFollowsTheRevision: a document is built once per snapshot
// and served as the same bytes, and the next snapshot's requests get a
// document built from it, not the previous one's.
func TestDocumentFollowsTheRevision(t *testing.T) {
	var s Store
	builds := 0
	build := func(snap *catalogv1.Snapshot) ([]byte, error) {
		builds++
		return []byte(`{"catalog_version":"` + snap.GetCatalogVersion() + `"}`), nil
	}
	for i, version := range []string{"1.0.0", "1.1.0"} {
		if err := s.Set(&catalogv1.Snapshot{Revision: uint64(i + 1), CatalogVersion: version}); err != nil {
			t.Fatal(err)
		}
		want := `{"catalog_version":"` + version + `"}`
		for range 3 {
			body, err := s.Current().Document("doc", build)
			if err != nil || string(body) != want {
				t.Fatalf("revision %d: %s %v, want %s", i+1, body, err, want)
			}
		}
		if builds != i+1 {
			t.Fatalf("revision %d: built %d times, want once per revision", i+1, builds)
		}
	}
}

// TestMethodsForIsMemoizedPerState: repeated questions get the same
// answer, which the caller may change without changing the next one.
func TestMethodsForIsMemoizedPerState(t *testing.T) {
	st := &State{Endpoints: []*endpoint.Endpoint{
		{Def: &endpoint.Definition{Method: "QUOTE", Path: "/q", Anonymous: true}},
		{Def: &endpoint.Definition{Method: "CREATE", Path: "/c", RequiredScopes: []string{"orders:write"}}},
	}}
	set, err := agtp.ParseScopeList([]string{"orders:write"})
	if err != nil {
		t.Fatal(err)
	}
	first := st.MethodsFor(set)
	first[0] = "CHANGED"
	if got := st.MethodsFor(set); !slices.Equal(got, []string{"CREATE", "QUOTE"}) {
		t.Fatalf("second MethodsFor = %v", got)
	}
	if got := st.MethodsFor(nil); !slices.Equal(got, []string{"QUOTE"}) {
		t.Fatalf("MethodsFor(no scopes) = %v", got)
	}
}

// TestMayUse: a caller may use an endpoint whose method the method policy
// serves, that is anonymous unless the caller is identified, and whose
// required scopes its scopes cover.
func TestMayUse(t *testing.T) {
	const defs = `
endpoints:
  - {method: QUERY, path: /open, anonymous: true, description: d, semantic: {intent: i, actor: agent, outcome: o, capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}, input_schema: {type: object, additionalProperties: false}, output_schema: {type: object}, errors: [], handler: {type: registered_function, function: t.f}}
  - {method: QUERY, path: /orders, description: d, semantic: {intent: i, actor: agent, outcome: o, capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}, input_schema: {type: object, additionalProperties: false}, output_schema: {type: object}, errors: [], handler: {type: registered_function, function: t.f}, required_scopes: ["orders:read"]}
  - {method: CREATE, path: /orders, description: d, semantic: {intent: i, actor: agent, outcome: o, capability: transaction, confidence: 0.9, impact: reversible, is_idempotent: false}, input_schema: {type: object, additionalProperties: false}, output_schema: {type: object}, errors: [], handler: {type: registered_function, function: t.f}, required_scopes: ["orders:write"]}
  - {method: CANCEL, path: /orders, description: d, semantic: {intent: i, actor: agent, outcome: o, capability: transaction, confidence: 0.9, impact: irreversible, is_idempotent: false}, input_schema: {type: object, additionalProperties: false}, output_schema: {type: object}, errors: [], handler: {type: registered_function, function: t.f}}
`
	eps, err := endpoint.ParseAndCompile("e.yaml", []byte(defs), endpoint.FormatYAML, endpoint.Context{InheritCapability: true})
	if err != nil {
		t.Fatal(err)
	}
	snap := &catalogv1.Snapshot{Revision: 1, CatalogVersion: "1.0.0",
		Methods:      []*catalogv1.Method{{Name: "CREATE"}, {Name: "CANCEL"}},
		MethodPolicy: &catalogv1.MethodPolicy{Disallow: []string{"CANCEL"}}}
	for _, ep := range eps {
		snap.Endpoints = append(snap.Endpoints, ep.Proto(catalogv1.EndpointTier_ENDPOINT_TIER_B))
	}
	var store Store
	if err := store.Set(snap); err != nil {
		t.Fatal(err)
	}
	st := store.Current()
	for _, tc := range []struct {
		name       string
		identified bool
		scopes     []string
		want       []string
	}{
		{"anonymous", false, nil, []string{"QUERY /open"}},
		{"identified without scopes", true, nil, []string{"QUERY /open"}},
		{"orders:read", true, []string{"orders:read"}, []string{"QUERY /open", "QUERY /orders"}},
		{"every scope; CANCEL is disallowed", true, []string{"*:*"}, []string{"QUERY /open", "QUERY /orders", "CREATE /orders"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := agtp.ParseScopeList(tc.scopes)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ep := range st.Endpoints {
				if st.MayUse(ep, tc.identified, set) {
					got = append(got, ep.Def.Method+" "+ep.Def.Path)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("may use %v, want %v", got, tc.want)
			}
		})
	}
}
