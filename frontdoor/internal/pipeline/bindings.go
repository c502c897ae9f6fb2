package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/carried"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/composition"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Bindings are the executors of the handler kinds other than built-ins
// and registered functions (AGTP-API §12), and of carried framework
// payloads (core §8). docs/bindings.md describes them.
type Bindings struct {
	// Upstream runs external_service endpoints and forwards carried MCP
	// messages to MCP servers bound as external services.
	Upstream *upstream.Executor
	// Compositions runs composition endpoints.
	Compositions *composition.Runner
	// MaxDepth bounds nested invocations (a composition step that is a
	// composition, an MCP tool that is one, ...). Default 4.
	MaxDepth int
}

const (
	kindExternalService = endpoint.HandlerExternalService
	kindComposition     = endpoint.HandlerComposition
	defaultMaxDepth     = 4
)

// priorList is the exchange's prior_actions: composition steps and MCP
// tool calls made for the request, and what handlers report.
type priorList []attribution.PriorAction

// endpointOf is the matched endpoint's compiled definition.
func endpointOf(x *exchange) *endpoint.Endpoint {
	return x.state.Endpoints[x.decision.Endpoint.Index]
}

// bindFunc wraps a handler for one exchange: the call learns the
// Idempotency-Key, the result's prior actions go into the record, and an
// error name the endpoint does not declare is logged (the operator's
// contract says which errors a caller can meet, AGTP-API §6).
func (p *Pipeline) bindFunc(x *exchange, f handler.Func) handler.Func {
	def := endpointOf(x).Def
	return func(ctx context.Context, call *handler.Call) (*handler.Result, error) {
		call.IdempotencyKey = x.handlerKey()
		res, err := f(ctx, call)
		if res != nil {
			x.priors = append(x.priors, res.PriorActions...)
		}
		var he *handler.Error
		if errors.As(err, &he) && he.Status == 0 && !slices.Contains(def.Errors, he.Name) {
			p.Log.WarnContext(ctx, "handler returned an error its endpoint does not declare", "error_name", he.Name, "method", def.Method, "path", def.Path)
		}
		return res, err
	}
}

func (p *Pipeline) callExternal(x *exchange, input []byte) *agtp.Response {
	if p.Bindings == nil || p.Bindings.Upstream == nil {
		return x.fail(agtp.StatusNotImplemented, "handler-kind-unsupported", "this front door runs no external_service handlers", nil)
	}
	def := endpointOf(x).Def
	return p.callFunction(x, p.bindFunc(x, func(ctx context.Context, call *handler.Call) (*handler.Result, error) {
		return p.Bindings.Upstream.Call(ctx, def, call)
	}), input)
}

func (p *Pipeline) callComposition(x *exchange, input []byte) *agtp.Response {
	if p.Bindings == nil || p.Bindings.Compositions == nil {
		return x.fail(agtp.StatusNotImplemented, "handler-kind-unsupported", "this front door runs no composition handlers", nil)
	}
	name := endpointOf(x).Def.Handler.Recipe
	if _, err := p.Bindings.Compositions.Resolve(x.ctx, name); err != nil {
		if errors.Is(err, composition.ErrUnknownRecipe) {
			p.Log.ErrorContext(x.ctx, "endpoint bound to an unknown recipe", "recipe", name, "method", x.decision.Method, "path", endpointOf(x).Def.Path)
			return x.fail(agtp.StatusServerError, "handler-unbound", "this endpoint's recipe is not available on this front door", nil)
		}
		return p.dependencyFailure(x, "rcnssvc", err)
	}
	inv := &bindingInvoker{p: p, x: x}
	return p.callFunction(x, p.bindFunc(x, func(ctx context.Context, call *handler.Call) (*handler.Result, error) {
		return p.Bindings.Compositions.Run(ctx, name, call, inv)
	}), input)
}

// dispatchCarried dispatches an EXECUTE on its carried payload type (core
// §8.2). It runs after identity, Authority-Scope and policy, so the
// framework payload is handed over only to a caller AGTP admitted. done
// is false when the request carries no framework payload.
func (p *Pipeline) dispatchCarried(x *exchange, input []byte) (resp *agtp.Response, done bool) {
	ep := endpointOf(x)
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	kind, payloadType := carried.Detect(x.req.Header.Get(agtp.HeaderContentType), in)
	h := ep.Def.Handler
	gateway := h.Type == endpoint.HandlerRegisteredFunction && h.Function == carried.GatewayFunction
	supported := map[string]any{"supported_payload_types": []string{carried.MediaTypeMCPTools}}
	if kind == carried.None {
		if gateway {
			return x.fail(agtp.StatusUnprocessable, carried.ReasonUnsupported,
				"this endpoint takes MCP messages: send payload_type "+carried.MediaTypeMCPTools+" with the JSON-RPC message as payload", supported), true
		}
		return nil, false
	}
	p.logDisagreements(x)
	if kind == carried.Unsupported {
		supported["payload_type"] = payloadType
		return x.fail(agtp.StatusUnprocessable, carried.ReasonUnsupported,
			"this server does not dispatch "+payloadType+" payloads; it carries MCP ("+carried.MediaTypeMCPTools+")", supported), true
	}
	defaultID := x.req.Header.Get(agtp.HeaderTaskID)
	if defaultID == "" {
		defaultID = "1"
	}
	msg, mismatch, err := carried.MCPMessage(in, defaultID)
	if err != nil {
		return x.fail(agtp.StatusUnprocessable, carried.ReasonPayloadInvalid, err.Error(), nil), true
	}
	if mismatch != "" {
		p.Log.WarnContext(x.ctx, "EXECUTE action and carried MCP method disagree; the carried method is used", "disagreement", mismatch)
	}
	var f handler.Func
	switch {
	case gateway:
		gw := &carried.Gateway{
			Endpoints:  x.state.Endpoints,
			Invoker:    &bindingInvoker{p: p, x: x},
			Skip:       func(e *endpoint.Endpoint) bool { return strings.HasPrefix(e.HandlerName(), builtinPrefix) },
			ServerName: p.opts.ServerID,
		}
		f = func(ctx context.Context, _ *handler.Call) (*handler.Result, error) {
			out, err := gw.Serve(ctx, msg)
			if err != nil {
				return nil, err
			}
			b, err := json.Marshal(out)
			if err != nil {
				return nil, err
			}
			return &handler.Result{Output: b}, nil
		}
	case h.Type == endpoint.HandlerExternalService && p.Bindings != nil && p.Bindings.Upstream != nil:
		if !carried.Forwardable[msg.Method] {
			return x.fail(agtp.StatusUnprocessable, carried.ReasonMCPMethod,
				"EXECUTE carries MCP tools/list, tools/call and ping; "+msg.Method+" is not carried", map[string]any{"mcp_method": msg.Method}), true
		}
		raw, err := json.Marshal(msg)
		if err != nil {
			return x.fail(agtp.StatusUnprocessable, carried.ReasonPayloadInvalid, err.Error(), nil), true
		}
		f = func(ctx context.Context, call *handler.Call) (*handler.Result, error) {
			return p.Bindings.Upstream.CallMCP(ctx, ep.Def, raw, call.IdempotencyKey)
		}
	default:
		return x.fail(agtp.StatusUnprocessable, carried.ReasonUnsupported,
			"this endpoint does not take MCP payloads; MCP is carried to an EXECUTE endpoint bound to an MCP server or to "+carried.GatewayFunction, supported), true
	}
	resp = p.callFunction(x, p.bindFunc(x, f), input)
	if resp.Status >= 200 && resp.Status <= 299 {
		// core §8 example: the response carries the framework's type too.
		resp.Header.Set(agtp.HeaderContentType, carried.MediaTypeMCPTools)
	}
	return resp, true
}

// logDisagreements logs carried fields that contradict the AGTP headers
// (core §8.3: the headers win).
func (p *Pipeline) logDisagreements(x *exchange) {
	var body map[string]any
	if json.Unmarshal(x.req.Body, &body) != nil {
		return
	}
	if d := carried.Disagreements(body, x.req.Header.Get); len(d) > 0 {
		p.Log.WarnContext(x.ctx, "carried payload disagrees with the AGTP headers; the headers are used", "agent_id", x.agentID, "disagreements", d)
	}
}

// bindingInvoker runs other endpoints for one exchange's caller
// (bindings.Invoker): each invocation is a request of its own through the
// whole pipeline (structure, identity, session, input, policy, handler,
// output, Attribution-Record on the caller's chain), built from the
// parent's identity headers. Its Audit-ID becomes one of the parent's
// prior_actions.
type bindingInvoker struct {
	p *Pipeline
	x *exchange

	byTemplate map[string]*endpoint.Endpoint
}

var _ bindings.Invoker = (*bindingInvoker)(nil)

// Check admits or refuses a call of the endpoint declared at (method,
// template) from what the exchange already knows: anonymous callers only
// reach anonymous endpoints, and the effective scopes must cover the
// endpoint's required scopes (262 scope-required,
// docs/decisions.md#D-scope-262).
func (v *bindingInvoker) Check(method, template string) *bindings.Outcome {
	if v.byTemplate == nil {
		v.byTemplate = make(map[string]*endpoint.Endpoint, len(v.x.state.Endpoints))
		for _, ep := range v.x.state.Endpoints {
			v.byTemplate[ep.Def.Method+" "+ep.Def.Path] = ep
		}
	}
	ep := v.byTemplate[method+" "+template]
	if ep == nil {
		return nil
	}
	if !ep.Def.Anonymous && v.x.agentID == "" {
		return &bindings.Outcome{Status: agtp.StatusUnauthorized, Reason: "agent-unauthenticated",
			Explanation: method + " " + template + " is not anonymous"}
	}
	for _, need := range ep.Def.RequiredScopes {
		if !v.p.scopeHeld(v.x, need) {
			return &bindings.Outcome{Status: agtp.StatusAuthorizationRequired, Reason: "scope-required",
				Explanation: "the caller's authority does not cover " + need + ", which " + method + " " + template + " requires"}
		}
	}
	return nil
}

// Invoke runs one endpoint as the exchange's caller.
func (v *bindingInvoker) Invoke(ctx context.Context, in bindings.Invocation) (*bindings.Outcome, error) {
	maxDepth := defaultMaxDepth
	if v.p.Bindings != nil && v.p.Bindings.MaxDepth > 0 {
		maxDepth = v.p.Bindings.MaxDepth
	}
	if bindings.Depth(ctx) >= maxDepth {
		return &bindings.Outcome{Status: agtp.StatusUnprocessable, Reason: "invocation-depth-exceeded",
			Explanation: "invocations nest more than " + strconv.Itoa(maxDepth) + " deep"}, nil
	}
	req := &agtp.Request{Method: in.Method, Target: in.Path, Path: in.Path, Body: in.Input}
	if i := strings.IndexByte(in.Path, '?'); i >= 0 {
		req.Path, req.RawQuery = in.Path[:i], in.Path[i+1:]
	}
	for _, name := range answer.InheritedHeaders {
		if val, ok := v.x.req.Header.Lookup(name); ok {
			req.Header.Set(name, val)
		}
	}
	if key, ok := v.x.idempotencyKey(); ok && in.Key != "" {
		req.Header.Set(agtp.HeaderIdempotencyKey, answer.DerivedKey(key, in.Key))
	}
	if len(in.Input) > 0 {
		req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
		req.Header.Set(agtp.HeaderContentLength, strconv.Itoa(len(in.Input)))
	}
	resp := v.p.serveInner(bindings.Deeper(ctx), v.x.conn, req)
	o := outcomeOf(resp)
	if o.AuditID != "" {
		v.x.priors = append(v.x.priors, attribution.PriorAction{AgentID: v.x.agentID, AuditID: o.AuditID})
	}
	if err := ctx.Err(); errors.Is(err, context.Canceled) {
		return o, err
	}
	return o, nil
}

// outcomeOf reads an invocation's response: the result member of a
// success envelope (a built-in's document as itself), or the error body.
func outcomeOf(resp *agtp.Response) *bindings.Outcome {
	o := &bindings.Outcome{Status: resp.Status, AuditID: resp.Header.Get(agtp.HeaderAuditID)}
	if o.OK() {
		var env map[string]json.RawMessage
		if json.Unmarshal(resp.Body, &env) == nil && env["result"] != nil && env["status"] != nil {
			o.Output = env["result"]
		} else if len(bytes.TrimSpace(resp.Body)) > 0 && json.Valid(resp.Body) {
			o.Output = resp.Body
		}
		return o
	}
	var eb struct {
		Reason      string `json:"reason"`
		Explanation string `json:"explanation"`
	}
	_ = json.Unmarshal(resp.Body, &eb)
	o.Reason, o.Explanation, o.Body = eb.Reason, eb.Explanation, resp.Body
	return o
}
