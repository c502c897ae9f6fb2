package endpoint_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
)

// validateFuzzSchemas are input schemas that exercise every part of a
// validation: recursion by member and item, anyOf, patterns, formats,
// numbers and enums.
var validateFuzzSchemas = []string{
	`{"type":"object","additionalProperties":false,"properties":{"n":{"$ref":"#/$defs/node"}},"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"multipleOf":0.5},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":8}}}}}`,
	`{"type":"object","properties":{"x":{"anyOf":[{"type":"string","pattern":"^[a-z]{1,8}$"},{"type":"number","maximum":1e6},{"enum":[1,"two",null,true]}]},"re":{"type":"string","format":"regex"},"when":{"type":"string","format":"date-time"},"m":{"type":"object","additionalProperties":{"type":"string","maxLength":16}}},"additionalProperties":false}`,
	`{"type":"object","additionalProperties":false,"patternProperties":{"^a":{"type":"integer"},"b$":{"uniqueItems":true}},"propertyNames":{"maxLength":8}}`,
}

// FuzzValidateInput validates a caller's body, decoded as the front door
// decodes one, against schemas of every shape: whatever the body, the
// answer is a report or nothing, never a panic, and a body the number
// bound refuses is refused by validation too.
func FuzzValidateInput(f *testing.F) {
	for _, s := range []string{`{"n":{"v":1,"kids":[{"v":2}]}}`, `{"x":"abc","re":"^a+$","when":"2026-01-01T00:00:00Z"}`,
		`{"a1":1,"zb":[1,1]}`, `{"x":1e999999}`, `{"re":"` + strings.Repeat("a{1000}", 20) + `"}`, `{"n":{"kids":[[[[[]]]]]}}`} {
		f.Add([]byte(s), uint8(0))
	}
	var eps []*endpoint.Endpoint
	for _, s := range validateFuzzSchemas {
		def, err := json.Marshal(map[string]any{
			"method": "QUERY", "path": "/things", "description": "Returns the matching things.",
			"semantic": map[string]any{
				"intent": "Return the things that match.", "actor": "agent", "outcome": "The caller holds the matching things.",
				"capability": "retrieval", "confidence": 0.9, "impact": "informational", "is_idempotent": true,
			},
			"input_schema": json.RawMessage(s), "output_schema": map[string]any{"type": "object"}, "errors": []any{},
			"handler": map[string]any{"type": "registered_function", "function": "demo.things"},
		})
		if err != nil {
			f.Fatal(err)
		}
		ep, err := endpoint.FromJSON(def)
		if err != nil {
			f.Fatalf("schema %s: %v", s, err)
		}
		eps = append(eps, ep)
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.UseNumber()
		var v map[string]any
		if dec.Decode(&v) != nil || v == nil {
			return
		}
		r := eps[int(which)%len(eps)].ValidateInput(v)
		if endpoint.CheckNumbers(v) != nil && r == nil {
			t.Fatalf("a body with a number beyond the bound validated: %s", body)
		}
	})
}
