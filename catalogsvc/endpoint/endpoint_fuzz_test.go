package endpoint_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
)

// fuzzCategories is a small catalog: enough methods for the seeds, and a
// verb set for the verb-leak rule.
var fuzzCategories = map[string][]string{
	"BOOK": {"transaction"}, "QUERY": {"retrieval"}, "DISCOVER": {"discovery"},
	"SUMMARIZE": {"analysis"}, "CANCEL": {"transaction"},
}

func fuzzContext() endpoint.Context {
	verbs := route.VerbSet{}
	for v := range fuzzCategories {
		verbs[v] = struct{}{}
	}
	return endpoint.Context{
		Method:            func(m string) ([]string, bool) { c, ok := fuzzCategories[m]; return c, ok },
		Verbs:             verbs,
		InheritCapability: true,
		LookupEnv: func(n string) (string, bool) {
			return "t0ken", n == "BOOKING_API_TOKEN"
		},
	}
}

const fuzzBookRoom = `{
  "method": "BOOK", "path": "/rooms/{room_id}", "namespace": "reservations",
  "description": "Books a room for the named guest at the named property.",
  "semantic": {"intent": "Reserve a room for the named guest.", "actor": "agent",
    "outcome": "A confirmed reservation_id is returned.", "capability": "transaction",
    "confidence": 0.85, "impact": "irreversible", "is_idempotent": false,
    "parameter_hints": {"guest_id": ["from the conversation"]}, "mcp_tool_name": "book_room"},
  "input_schema": {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
    "properties": {"guest_id": {"type": "string"}, "room_id": {"type": "string"}, "nights": {"type": "integer", "minimum": 1}},
    "required": ["guest_id", "room_id"], "additionalProperties": false},
  "output_schema": {"type": "object", "properties": {"reservation_id": {"type": "string"}}},
  "errors": ["room_unavailable", "invalid_dates"],
  "handler": {"type": "registered_function", "function": "rooms.handlers.book_room"},
  "required_scopes": ["booking:room"], "max_body_bytes": 4096, "idempotency_key_required": true,
  "deprecated": {"deprecated_in": "2.1.0", "removed_in": "3.0.0", "successor": {"method": "BOOK", "path": "/reservations"}}
}`

const fuzzExternal = `{"endpoints": [{
  "method": "QUERY", "path": "/bookings/{booking_id}", "description": "Reads one booking.",
  "semantic": {"intent": "Read a booking by its id.", "actor": "agent", "outcome": "The booking is returned.",
    "confidence_guidance": 0.9, "impact_tier": "informational", "is_idempotent": true},
  "input_schema": {"type": "object", "properties": {"booking_id": {"type": "string"}}, "additionalProperties": false},
  "output_schema": {"type": "object"},
  "errors": ["upstream_timeout", "upstream_connection_error", "upstream_malformed_response", "upstream_authentication_failed", "upstream_error", "not_found"],
  "handler": {"type": "external_service", "url": "https://internal.acme.tld/booking", "method": "GET",
    "headers": {"Authorization": "Bearer ${BOOKING_API_TOKEN}"}, "error_map": {"404": "not_found"}, "timeout_seconds": 2.5},
  "anonymous": true
}, {
  "method": "SUMMARIZE", "path": "/audit", "description": "Summarises the audit trail.",
  "semantic": {"intent": "Summarise recent audit records.", "actor": "agent", "outcome": "A summary is returned.",
    "confidence": 0.7, "impact": "informational", "is_idempotent": true},
  "input_schema": {"type": "object", "additionalProperties": false}, "output_schema": {"type": "object"},
  "errors": ["composition_failed"], "handler": {"type": "composition", "recipe": "audit-via-query-and-summarize"}
}]}`

const fuzzYAML = `method: CANCEL
path: /rooms/{room_id}/reservation
description: Cancels the reservation of a room.
semantic:
  intent: Cancel the named room's reservation.
  actor: agent
  outcome: The reservation is cancelled.
  confidence: 0.9
  impact: reversible
  is_idempotent: true
  state_transition: ["status: reserved -> cancelled"]
input_schema:
  type: object
  properties:
    room_id: {type: string}
    refund: {type: boolean, default: true}
  additionalProperties: false
output_schema: {type: object}
errors: [not_found]
handler: {type: registered_function, function: rooms.cancel}
`

// FuzzParseAndCompile feeds an operator's or a PROPOSE caller's
// definition document through decoding, validation and schema
// compilation. Failures are the package's field errors; a definition
// that compiles normalises to JSON that compiles again, under the same
// context and through FromJSON, to the same normalised JSON; and its
// projections encode.
func FuzzParseAndCompile(f *testing.F) {
	for _, s := range []string{fuzzBookRoom, fuzzExternal} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(fuzzYAML), true)
	f.Add([]byte(strings.ReplaceAll(fuzzBookRoom, `"max_body_bytes": 4096`, `"max_body_bytes": -1`)), false)
	f.Add([]byte(strings.ReplaceAll(fuzzBookRoom, `"nights"`, `"room_id"`)), false)
	for _, s := range []string{
		"a: &x 1\nb: *x\n",
		"base: &b {x: 1}\nm:\n  <<: *b\n",
		"method: BOOK\n---\nmethod: QUERY\n",
		"method: !!binary aGVsbG8=\n",
		"? [a, b]\n: c\n",
		"x: 1e400\n",
		"x: 0x1F\n",
		strings.Repeat("- ", 80) + "x\n",
		"endpoints: 3\n",
	} {
		f.Add([]byte(s), true)
	}
	for _, s := range []string{`{"endpoints": []}`, `[]`, `{} {}`, `{"method": 1e999}`, `{"a":1,"a":2}`} {
		f.Add([]byte(s), false)
	}
	ctx := fuzzContext()
	// The valid seeds must compile, or the round trips below go unchecked.
	for name, s := range map[string]string{"book.json": fuzzBookRoom, "external.json": fuzzExternal, "cancel.yaml": fuzzYAML} {
		if _, err := endpoint.ParseAndCompile(name, []byte(s), endpoint.FormatAuto, ctx); err != nil {
			f.Fatalf("seed %s: %v", name, err)
		}
	}

	f.Fuzz(func(t *testing.T, data []byte, isYAML bool) {
		file := "def.json"
		if isYAML {
			file = "def.yaml"
		}
		if _, err := endpoint.DecodeValue(file, data); err != nil {
			checkFieldErrors(t, "DecodeValue", err, file)
		}
		eps, err := endpoint.ParseAndCompile(file, data, endpoint.FormatAuto, ctx)
		if err != nil {
			checkFieldErrors(t, "ParseAndCompile", err, file)
			return
		}
		for _, ep := range eps {
			checkCompiled(t, ep, ctx)
		}
	})
}

// checkFieldErrors requires a *FieldError or Errors naming the file.
func checkFieldErrors(t *testing.T, what string, err error, file string) {
	t.Helper()
	var es endpoint.Errors
	var fe *endpoint.FieldError
	switch {
	case errors.As(err, &es):
		if len(es) == 0 {
			t.Fatalf("%s: an empty error list", what)
		}
		for _, e := range es {
			if e == nil || e.File != file || e.Rule == "" {
				t.Fatalf("%s: field error %+v does not name the file and rule", what, e)
			}
		}
	case errors.As(err, &fe):
		if fe.File != file || fe.Rule == "" {
			t.Fatalf("%s: field error %+v does not name the file and rule", what, fe)
		}
	default:
		t.Fatalf("%s: %v is not a field error", what, err)
	}
}

// checkCompiled checks what the catalog and the front door rely on when
// they store and reload a compiled endpoint.
func checkCompiled(t *testing.T, ep *endpoint.Endpoint, ctx endpoint.Context) {
	t.Helper()
	if ep.Def == nil || ep.Template == nil || !json.Valid(ep.JSON) {
		t.Fatalf("compiled endpoint without definition, template or valid JSON: %+v", ep)
	}
	back, err := endpoint.FromJSON(ep.JSON)
	if err != nil {
		t.Fatalf("FromJSON refuses the normalised definition %s: %v", ep.JSON, err)
	}
	if !bytes.Equal(back.JSON, ep.JSON) || back.Def.Key() != ep.Def.Key() {
		t.Fatalf("normalisation is not a fixed point:\n %s\n %s", ep.JSON, back.JSON)
	}
	again, err := endpoint.ParseAndCompile("normalised.json", ep.JSON, endpoint.FormatJSON, ctx)
	if err != nil || len(again) != 1 || !bytes.Equal(again[0].JSON, ep.JSON) {
		t.Fatalf("the normalised definition does not compile under the same context to itself: %v", err)
	}
	if !reflect.DeepEqual(back.Warnings, ep.Warnings) && len(back.Warnings)+len(ep.Warnings) > 0 {
		t.Fatalf("warnings changed: %q, %q", ep.Warnings, back.Warnings)
	}
	proj := ep.Projection()
	if h, _ := proj["handler"].(map[string]any); len(h) != 1 || h["type"] != ep.Def.Handler.Type {
		t.Fatalf("the projection's handler is %v", proj["handler"])
	}
	if _, err := json.Marshal(proj); err != nil {
		t.Fatalf("the projection does not encode: %v", err)
	}
	pb := ep.Proto(catalogv1.EndpointTier_ENDPOINT_TIER_UNSPECIFIED)
	//lint:ignore SA1019 the first release's field must still carry the definition byte for byte
	if pb.GetMethod() != ep.Def.Method || pb.GetPath() != ep.Def.Path || !bytes.Equal(pb.GetDefinitionJson(), ep.JSON) || pb.GetDefinition() == nil {
		t.Fatalf("snapshot projection %v", pb)
	}
}
