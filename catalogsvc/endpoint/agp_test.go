package endpoint

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// stockOrder is an order endpoint declared for AGP's SDK example request
// (agp-gateway-protocol §21.4): items of productId and quantity, an
// amount the strict policy reads.
func stockOrder(t *testing.T) *AGPMapping {
	t.Helper()
	m := bookRoom()
	m["agp"] = map[string]any{
		"requires": []any{"items"},
		"rename":   map[string]any{"items": "lines", "items[].productId": "sku"},
		"ignore":   []any{"amount_cents"},
	}
	return mustCompile(t, m).Def.AGP
}

func TestAGPMappingSelects(t *testing.T) {
	order := stockOrder(t)
	echo := &AGPMapping{Match: map[string]string{"serviceId": "order"}, Requires: []string{"items"}}
	tests := []struct {
		name string
		m    *AGPMapping
		req  string
		ok   bool
		spec int
	}{
		{"required member present", order, `{"items": [], "amount_cents": 2995}`, true, 1},
		{"required member absent", order, `{"category": "entrees"}`, false, 0},
		{"required member null", order, `{"items": null}`, false, 0},
		{"match and requires", echo, `{"serviceId": "order", "items": []}`, true, 2},
		{"match of another value", echo, `{"serviceId": "catalog", "items": []}`, false, 0},
		{"match not a string", echo, `{"serviceId": 1, "items": []}`, false, 0},
		{"no declaration", nil, `{"items": []}`, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req map[string]any
			if err := json.Unmarshal([]byte(tc.req), &req); err != nil {
				t.Fatal(err)
			}
			spec, ok := tc.m.Selects(req)
			if ok != tc.ok || spec != tc.spec {
				t.Fatalf("Selects = %d, %v; want %d, %v", spec, ok, tc.spec, tc.ok)
			}
		})
	}
}

func TestAGPMappingInput(t *testing.T) {
	order := stockOrder(t)
	echo := &AGPMapping{Match: map[string]string{"serviceId": "order"}, Rename: map[string]string{"items[].productId": "sku"}}
	tests := []struct {
		name    string
		m       *AGPMapping
		req     string
		want    string
		wantErr string
	}{
		{"SDK example", order, `{"items": [{"productId": "steak-01", "quantity": 1}], "amount_cents": 2995}`,
			`{"lines": [{"sku": "steak-01", "quantity": 1}]}`, ""},
		{"matched member dropped, nested rename under a kept name", echo, `{"serviceId": "order", "items": [{"productId": "w", "quantity": 2}]}`,
			`{"items": [{"sku": "w", "quantity": 2}]}`, ""},
		{"unnamed members kept", order, `{"items": [], "customer_ref": "c-1"}`, `{"lines": [], "customer_ref": "c-1"}`, ""},
		{"a rename onto a member the request also has", order, `{"items": [], "lines": []}`, "", "both become input member lines"},
		{"a nested rename onto a sibling", order, `{"items": [{"productId": "a", "sku": "b"}]}`, "", "both become input member sku"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req map[string]any
			if err := json.Unmarshal([]byte(tc.req), &req); err != nil {
				t.Fatal(err)
			}
			got, err := tc.m.Input(req)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want map[string]any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Input = %v, want %v", got, want)
			}
		})
	}
}
