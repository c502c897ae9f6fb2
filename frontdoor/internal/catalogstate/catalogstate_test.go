package catalogstate

import (
	"slices"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
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
