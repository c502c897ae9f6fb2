package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/idempotency"
)

// envelopeMembers are the members of core §5.7's request envelope; a body
// made only of these carries its input in "parameters".
var envelopeMembers = map[string]bool{"method": true, "task_id": true, "session_id": true, "parameters": true, "context": true}

// input builds the request's input object (query, path and body
// parameters merged as endpoint.BuildInput documents) and validates it
// against the endpoint's input schema: 400 for a body or query that does
// not parse, 422 with the violations for one that does not match.
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
			return nil, x.fail(agtp.StatusUnprocessable, "unsupported-content-type",
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
		return nil, x.fail(agtp.StatusUnprocessable, "input-invalid", report.Error(), map[string]any{"violations": report.Violations})
	}
	return in, nil
}

// validateOutput checks a handler's result against the endpoint's output
// schema; a mismatch is the handler's fault, so the caller gets a 500 and
// the operator a log line naming the violations.
func (p *Pipeline) validateOutput(x *exchange, output []byte) *agtp.Response {
	if !p.opts.OutputCheck.Due() {
		return nil
	}
	ep := x.state.Endpoints[x.decision.Endpoint.Index]
	v, err := decodeJSON(output)
	if err != nil {
		p.Log.ErrorContext(x.ctx, "handler output is not JSON", "handler", ep.HandlerName(), "error", err)
		return x.fail(agtp.StatusServerError, "output-invalid", "the handler produced an invalid result", nil)
	}
	if report := ep.ValidateOutput(v); report != nil {
		p.Log.ErrorContext(x.ctx, "handler output does not match the output schema", "handler", ep.HandlerName(), "violations", report.Error())
		return x.fail(agtp.StatusServerError, "output-invalid", "the handler produced a result that does not match the endpoint's output schema", nil)
	}
	return nil
}

func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	return mt == agtp.MediaTypeJSON || mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

// bodyParameters decodes a JSON body into its parameters object.
func bodyParameters(body []byte) (map[string]any, error) {
	v, err := decodeJSON(body)
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

// fingerprint binds an Idempotency-Key to the request.
func fingerprint(method, target string, input []byte) string {
	return idempotency.Fingerprint(method, target, input)
}

func clientIP(c *transport.ConnInfo) string {
	if c == nil || c.RemoteAddr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr.String())
	if err != nil {
		return c.RemoteAddr.String()
	}
	return host
}

// envelope wraps a handler's result in core §5.7's response envelope.
func envelope(x *exchange, status int, result json.RawMessage) *agtp.Response {
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	body := struct {
		Status int             `json:"status"`
		TaskID string          `json:"task_id,omitempty"`
		Result json.RawMessage `json:"result"`
	}{status, x.req.Header.Get(agtp.HeaderTaskID), result}
	b, err := json.Marshal(body)
	if err != nil {
		return x.fail(agtp.StatusServerError, "internal", "the result could not be encoded", nil)
	}
	return agtp.NewResponse(status, agtp.MediaTypeJSON, b)
}
