package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/frontdoor/internal/coreparam"
	"github.com/agtpsuite/agtp/services/agtp"
)

// The input stage (docs/decisions.md#D-decision-order step 10 and
// #D-input-form): query, path and body parameters merged into one object
// and validated against the endpoint's input schema, before any policy
// state is touched. The core per-method parameters (core §7.2, package
// coreparam, docs/decisions.md#D-core-parameters) are taken out first,
// checked by their own rules and left on the exchange for the handler.

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
	if x.quoteTarget {
		// QUOTE /path: the query string is the quoted call's
		// (structure.go, quoteOnPath).
		query = nil
	}
	var body map[string]any
	var envelopeContext any
	if len(x.req.Body) > 0 {
		if ct := x.req.Header.Get(agtp.HeaderContentType); !isJSON(ct) {
			return nil, x.fail(inputRefusal(ep), answer.ReasonUnsupportedContentType,
				"this endpoint takes "+agtp.MediaTypeJSON+" bodies, not "+ct, nil)
		}
		if body, envelopeContext, err = bodyParameters(x.req.Body, ep.Declares("parameters"), x.req.Method, ep.Def.Method); err != nil {
			return nil, x.fail(agtp.StatusBadRequest, "invalid-body", err.Error(), nil)
		}
	}
	if resp := refuseFreeForm(x, ep, query, body); resp != nil {
		return nil, resp
	}
	core, bad := coreparam.Split(ep.Def.Method, coreparam.RootForm(ep), ep.Declares, query, body)
	if bad != nil {
		return nil, x.fail(agtp.StatusUnprocessable, coreparam.Reason, (&endpoint.Report{Violations: bad}).Error(), map[string]any{"violations": bad})
	}
	if _, sent := core["context"]; !sent && envelopeContext != nil && !ep.Declares("context") {
		if core == nil {
			core = coreparam.Params{}
		}
		core["context"] = envelopeContext
	}
	x.core = core
	in, report := ep.BuildInput(params, query, body)
	if report != nil {
		return nil, x.fail(inputRefusal(ep), answer.ReasonInputInvalid, report.Error(), map[string]any{"violations": report.Violations})
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

// bodyParameters decodes a JSON body into its parameters object, and the
// envelope's context member when the body is a core §5.7 envelope.
//
// A body is an envelope when it has only envelope members, its parameters
// member is an object, and its method member, if any, names the request's
// method (methods: as sent, and as the endpoint has it after an alias):
// an envelope's method is the request's own (core §5.7, Appendix D). When
// the endpoint's input itself declares parameters (QUOTE: the arguments of
// the quoted call), the body is an envelope only when it names the
// request's method, so QUOTE's {"method": "QUERY", "parameters": {...}} is
// QUOTE's input, not an envelope around it.
func bodyParameters(body []byte, declaresParameters bool, methods ...string) (params map[string]any, envelopeContext any, err error) {
	v, err := answer.DecodeJSON(body)
	if err != nil {
		return nil, nil, fmt.Errorf("the body is %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, nil, errors.New("the body must be a JSON object")
	}
	params, ok = obj["parameters"].(map[string]any)
	if !ok {
		return obj, nil, nil
	}
	for k := range obj {
		if !envelopeMembers[k] {
			return obj, nil, nil
		}
	}
	_, hasMethod := obj["method"]
	named, _ := obj["method"].(string)
	if hasMethod && !slices.Contains(methods, named) || !hasMethod && declaresParameters {
		return obj, nil, nil
	}
	return params, obj["context"], nil
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
		member = freeFormMember(body)
	}
	if member == "" {
		return nil
	}
	return x.fail(agtp.StatusUnprocessable, ReasonFreeFormExecution,
		"RUN executes registered procedures only; a free-form execution string ("+member+") is never accepted (standard methods §8.8, §10.3)",
		map[string]any{"member": member})
}

// freeFormMember returns the first free-form member name found in v, at
// any depth: the walk has no cutoff for a member to hide below, and needs
// none, since v was decoded by encoding/json, which refuses documents
// nested deeper than 10,000 levels.
func freeFormMember(v any) string {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if endpoint.IsFreeFormMember(k) {
				return k
			}
			if m := freeFormMember(e); m != "" {
				return m
			}
		}
	case []any:
		for _, e := range t {
			if m := freeFormMember(e); m != "" {
				return m
			}
		}
	}
	return ""
}
