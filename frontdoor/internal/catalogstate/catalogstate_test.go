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
