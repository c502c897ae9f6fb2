package builtin

import (
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/internal/catalog"
	"github.com/agtpsuite/agtp/catalogsvc/internal/catalogdata"
)

// TestBuiltinsCompileWithoutWarnings holds every built-in to the AGIS
// authoring rules an operator's endpoints meet: the registry drops
// built-ins' warnings, so a finding would go unseen.
func TestBuiltinsCompileWithoutWarnings(t *testing.T) {
	cat, err := catalog.Load(catalogdata.Default)
	if err != nil {
		t.Fatal(err)
	}
	ctx := endpoint.Context{
		Method: func(m string) ([]string, bool) {
			v, ok := cat.Lookup(m)
			return v.Categories, ok
		},
		InheritCapability: true,
		AllowReserved:     func(string) bool { return true },
	}
	eps, err := endpoint.ParseAndCompile("builtin", Definitions, endpoint.FormatJSON, ctx)
	if err != nil {
		t.Fatal(err)
	}
	tier2 := map[string]bool{"RETRY": true, "MONITOR": true}
	seen := map[string]bool{}
	for _, ep := range eps {
		seen[ep.Def.Method] = true
		if len(ep.Warnings) > 0 {
			t.Errorf("%s %s: %v", ep.Def.Method, ep.Def.Path, ep.Warnings)
		}
	}
	for m := range tier2 {
		if !seen[m] {
			t.Errorf("no %s built-in", m)
		}
	}
}
