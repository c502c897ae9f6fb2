package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// completeSignature builds the endpoint of a core §7.2.7 proposal: its
// intent, outcome and schemas over the rest of the pattern's contract.
func completeSignature(p *proposal, pat *recipe.Pattern) {
	sem := map[string]any{"actor": "agent", "capability": "domain_spanning", "confidence": 0.5, "impact": "reversible", "is_idempotent": false}
	in := any(map[string]any{"type": "object", "additionalProperties": false})
	out := any(map[string]any{"type": "object"})
	var errs any = []any{}
	description := ""
	if pat != nil {
		_ = json.Unmarshal(pat.Endpoint.Semantic, &sem)
		in, out = json.RawMessage(pat.Endpoint.InputSchema), json.RawMessage(pat.Endpoint.OutputSchema)
		list := make([]any, len(pat.Endpoint.Errors))
		for i, e := range pat.Endpoint.Errors {
			list[i] = e
		}
		errs = list
		description = pat.Endpoint.Description
	}
	sem["intent"] = p.intent
	if o, ok := p.signature["outcome"].(string); ok && o != "" {
		sem["outcome"] = o
	} else if _, ok := sem["outcome"]; !ok {
		sem["outcome"] = "The proposed operation has completed."
	}
	if v := firstOf(p.signature, "input_schema", "params", "input"); v != nil {
		in = schemaOf(v, true)
	}
	if v := firstOf(p.signature, "output_schema", "response", "output"); v != nil {
		out = schemaOf(v, false)
	}
	if description == "" {
		description = p.intent
	}
	if len(description) > 1000 {
		description = description[:1000]
	}
	p.def["description"] = description
	p.def["semantic"] = sem
	p.def["input_schema"] = in
	p.def["output_schema"] = out
	p.def["errors"] = errs
}

func firstOf(m map[string]any, names ...string) any {
	for _, n := range names {
		if v, ok := m[n]; ok && v != nil {
			return v
		}
	}
	return nil
}

// schemaOf reads a §7.2.7 signature member: a JSON Schema when it has a
// type, else a map of parameter names to their schemas.
func schemaOf(v any, input bool) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if _, isSchema := obj["type"]; isSchema {
		return obj
	}
	s := map[string]any{"type": "object", "properties": obj}
	if input {
		s["additionalProperties"] = false
	}
	return s
}

func cloneDef(d map[string]any) map[string]any {
	out := make(map[string]any, len(d)+2)
	for k, v := range d {
		out[k] = v
	}
	return out
}

// prepareDefinition fills what the server decides: the composition
// binding and its error, and a description from the intent when the
// proposer gave none.
func prepareDefinition(def map[string]any, recipeName string) {
	if _, ok := def["description"]; !ok {
		if sem, ok := def["semantic"].(map[string]any); ok {
			if intent, ok := sem["intent"].(string); ok {
				def["description"] = intent
			}
		}
	}
	var errs []string
	if arr, ok := def["errors"].([]any); ok {
		for _, e := range arr {
			if s, ok := e.(string); ok {
				errs = append(errs, s)
			} else {
				errs = nil
				def["errors"] = arr // leave a malformed list for validation to report
				break
			}
		}
		if errs != nil || len(arr) == 0 {
			def["errors"] = recipe.WithCompositionError(errs)
		}
	} else if v, ok := def["errors"]; !ok || v == nil {
		def["errors"] = recipe.WithCompositionError(nil)
	}
	def["handler"] = map[string]any{"type": endpoint.HandlerComposition, "recipe": recipeName}
}

// validateDefinition is steps 3 and 4: every failure of the definition,
// reported under the earliest step it belongs to. The schemas are
// checked against the bounds of catalogsvc/endpoint before they are
// compiled (docs/rcns.md "Schema bounds"); compilation itself cannot be
// interrupted, so the evaluation's deadline is checked on either side of
// it, and the bounds are what keep it short.
func (s *Server) validateDefinition(ctx context.Context, st *catalogState, def map[string]any, negID string) (*endpoint.Endpoint, *rcnsv1.ProposeResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, grpcerr.FromContext(err)
	}
	ep, err := recipe.CompileDefinition(def, endpoint.Context{
		Method: func(name string) ([]string, bool) { c, ok := st.methods[name]; return c, ok },
		Verbs:  st.table.Verbs(),
	})
	if cerr := ctx.Err(); cerr != nil {
		return nil, nil, grpcerr.FromContext(cerr)
	}
	if err == nil {
		return ep, nil, nil
	}
	var fes endpoint.Errors
	var fe *endpoint.FieldError
	switch {
	case errors.As(err, &fes):
	case errors.As(err, &fe):
		fes = endpoint.Errors{fe}
	default:
		return nil, invalid(agtp.StatusBadRequest, negID, "endpoint-invalid", err.Error(), nil), nil
	}
	stage := func(f string) int {
		switch {
		case f == "semantic" || strings.HasPrefix(f, "semantic."):
			return 3
		case strings.HasPrefix(f, "input_schema") || strings.HasPrefix(f, "output_schema"):
			return 4
		}
		return 5
	}
	first := 5
	for _, e := range fes {
		first = min(first, stage(e.Field))
	}
	var violations []map[string]string
	for _, e := range fes {
		if stage(e.Field) == first {
			violations = append(violations, map[string]string{"field": e.Field, "rule": e.Rule, "message": e.Msg})
		}
	}
	reason, what := "endpoint-invalid", "the proposed endpoint definition is invalid (AGTP-API §6)"
	switch first {
	case 3:
		reason, what = "semantic-invalid", "the semantic block is incomplete or has invalid values (AGTP-API §7.1, §10.6 step 3)"
	case 4:
		reason, what = "schema-invalid", "input_schema or output_schema is not a valid JSON Schema 2020-12 object as AGTP-API §6.4 requires (§10.6 step 4)"
	}
	return nil, invalid(agtp.StatusBadRequest, negID, reason, what, map[string]any{"violations": violations}), nil
}
