package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/services/agtp"
)

// The input stage (digest-api §7 item 12, docs/decisions.md#D-input-form):
// query, path and body parameters merged into one object and validated
// against the endpoint's input schema, before any policy state is
// touched.

// envelopeMembers are the members of core §5.7's request envelope; a body
// made only of these carries its input in "parameters".
var envelopeMembers = map[string]bool{"method": true, "task_id": true, "session_id": true, "parameters": true, "context": true}

// input builds the request's input object (query, path and body
// parameters merged as endpoint.BuildInput documents) and validates it
// against the endpoint's input schema: 400 for a body or query that does
// not parse, 422 with the violations for one that does not match (400 for
// PROPOSE, inputRefusal).
//
// The body's parameters are its "parameters" member when the body is a
// core §5.7 envelope, and otherwise the body object itself.
func (p *Pipeline) input(x *exchange) ([]byte, *agtp.Response) {
	in, resp := p.buildInput(x, x.state.Endpoints[x.decision.Endpoint.Index], x.decision.Params())
	if resp != nil {
		return nil, resp
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, x.fail(agtp.StatusBadRequest, "invalid-body", err.Error(), nil)
	}
	return b, nil
}

// buildInput merges and validates the input of a request for ep.
func (p *Pipeline) buildInput(x *exchange, ep *endpoint.Endpoint, params []route.Param) (map[string]any, *agtp.Response) {
	query, err := url.ParseQuery(x.req.RawQuery)
	if err != nil {
		return nil, x.fail(agtp.StatusBadRequest, "invalid-query", "the query string is not valid percent-encoded form data: "+err.Error(), nil)
	}
	var body map[string]any
	if len(x.req.Body) > 0 {
		if ct := x.req.Header.Get(agtp.HeaderContentType); !isJSON(ct) {
			return nil, x.fail(inputRefusal(ep), "unsupported-content-type",
				"this endpoint takes "+agtp.MediaTypeJSON+" bodies, not "+ct, nil)
		}
		if body, err = bodyParameters(x.req.Body); err != nil {
			return nil, x.fail(agtp.StatusBadRequest, "invalid-body", err.Error(), nil)
		}
	}
	if resp := refuseFreeForm(x, ep, query, body); resp != nil {
		return nil, resp
	}
	in, report := ep.BuildInput(params, query, body)
	if report != nil {
		return nil, x.fail(inputRefusal(ep), "input-invalid", report.Error(), map[string]any{"violations": report.Violations})
	}
	return in, nil
}

// inputRefusal is the status of input that does not fit ep: 422
// (AGTP-API §6.4), except for PROPOSE, whose own status set (core §7.2.7;
// AGTP-API §10.6 steps 3-4) answers a malformed proposal 400 with its
// violations and has no 422.
func inputRefusal(ep *endpoint.Endpoint) int {
	if ep.Def.Method == agtp.MethodPropose {
		return agtp.StatusBadRequest
	}
	return agtp.StatusUnprocessable
}

// bodyParameters decodes a JSON body into its parameters object.
func bodyParameters(body []byte) (map[string]any, error) {
	v, err := answer.DecodeJSON(body)
	if err != nil {
		return nil, fmt.Errorf("the body is %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("the body must be a JSON object")
	}
	if params, ok := obj["parameters"].(map[string]any); ok {
		envelope := true
		for k := range obj {
			if !envelopeMembers[k] {
				envelope = false
				break
			}
		}
		if envelope {
			return params, nil
		}
	}
	return obj, nil
}

func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	return mt == agtp.MediaTypeJSON || mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// refuseFreeForm answers a RUN request that carries a free-form execution
// string (a member named command, script, shell, exec, cmd or code, at
// any depth of the body, or in the query) with 422, before the input is
// validated, so the reason is specific even where the schema would have
// refused the member anyway (standard methods §8.8 "under any
// circumstances").
func refuseFreeForm(x *exchange, ep *endpoint.Endpoint, query url.Values, body map[string]any) *agtp.Response {
	if ep.Def.Method != "RUN" {
		return nil
	}
	member := ""
	for k := range query {
		if endpoint.IsFreeFormMember(k) {
			member = k
			break
		}
	}
	if member == "" {
		member = freeFormMember(body, 0)
	}
	if member == "" {
		return nil
	}
	return x.fail(agtp.StatusUnprocessable, ReasonFreeFormExecution,
		"RUN executes registered procedures only; a free-form execution string ("+member+") is never accepted (standard methods §8.8, §10.3)",
		map[string]any{"member": member})
}

// freeFormMember returns the first free-form member name found in v.
func freeFormMember(v any, depth int) string {
	if depth > maxFreeFormDepth {
		return ""
	}
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if endpoint.IsFreeFormMember(k) {
				return k
			}
			if m := freeFormMember(e, depth+1); m != "" {
				return m
			}
		}
	case []any:
		for _, e := range t {
			if m := freeFormMember(e, depth+1); m != "" {
				return m
			}
		}
	}
	return ""
}

// maxFreeFormDepth bounds the walk over a RUN body; JSON nesting is
// already bounded by the body size limit.
const maxFreeFormDepth = 64
