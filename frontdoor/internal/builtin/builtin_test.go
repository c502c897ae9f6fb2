package builtin

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
)

// Every built-in endpoint the catalog defines has an entry in the table,
// by its method and path or its method's AnyPath.
func TestEveryCatalogBuiltinIsRegistered(t *testing.T) {
	raw, err := os.ReadFile("../../../catalogsvc/internal/builtin/builtins.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Endpoints []struct{ Method, Path string } `json:"endpoints"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc.Endpoints) == 0 {
		t.Fatalf("builtins.json: %v (%d endpoints)", err, len(doc.Endpoints))
	}
	bi := New(Deps{})
	for _, ep := range doc.Endpoints {
		if _, ok := bi.Lookup(ep.Method, ep.Path); !ok {
			t.Errorf("%s %s has no built-in", ep.Method, ep.Path)
		}
	}
}

func TestLookup(t *testing.T) {
	bi := New(Deps{})
	for _, tc := range []struct {
		method, template string
		found            bool
		status           int // of the built-in, for those that answer without a dependency
	}{
		{"DISCOVER", "/tools", true, agtp.StatusOK},
		{"DISCOVER", "/elsewhere", true, agtp.StatusNotFound}, // DISCOVER's AnyPath entry
		{"QUERY", "/inbox", true, 0},
		{"QUERY", "/elsewhere", false, 0}, // QUERY has no AnyPath entry
		{"EXECUTE", "/", true, 0},
		{"EXECUTE", "/orders", false, 0}, // EXECUTE has no AnyPath entry
	} {
		f, ok := bi.Lookup(tc.method, tc.template)
		if ok != tc.found {
			t.Errorf("Lookup(%s %s) found %v, want %v", tc.method, tc.template, ok, tc.found)
			continue
		}
		if tc.status != 0 {
			resp := f(context.Background(), &Call{Method: tc.method, Template: tc.template, Header: &agtp.Header{}})
			if resp.Status != tc.status {
				t.Errorf("%s %s answered %d, want %d", tc.method, tc.template, resp.Status, tc.status)
			}
		}
	}
}
