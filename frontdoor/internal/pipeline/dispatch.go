package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/frontdoor/internal/builtin"
	"github.com/agtpsuite/agtp/services/agtp"
)

// The dispatch stage (docs/decisions.md#D-decision-order step 12): the
// endpoint's handler runs and its answer becomes the response. Built-ins
// are looked up in package builtin's table by method and path template;
// registered functions in the handler registry by name; external_service
// and composition endpoints and carried framework payloads go to the
// bindings (bindings.go).

// builtinPrefix names the registered functions of the protocol-native
// (Tier A) endpoints, which the front door implements itself.
const builtinPrefix = builtin.FunctionPrefix

// kindRegisteredFunction is the handler binding the front door runs
// in-process.
const kindRegisteredFunction = "registered_function"

// dispatch runs the endpoint's handler.
func (p *Pipeline) dispatch(x *exchange, input []byte) *agtp.Response {
	ep := x.decision.Endpoint.Proto
	// EXECUTE dispatches on a carried framework payload first (core §8.2;
	// bindings.go).
	if x.decision.Method == agtp.MethodExecute {
		if resp, done := p.dispatchCarried(x, input); done {
			return resp
		}
	}
	switch ep.GetHandlerKind() {
	case kindRegisteredFunction, "":
		if builtinEndpoint(x) {
			x.dispatched = true
			return p.builtin(x, input)
		}
		f, ok := p.Handlers.Lookup(ep.GetHandlerName())
		if !ok {
			p.Log.ErrorContext(x.ctx, "endpoint bound to an unregistered function", "handler", ep.GetHandlerName(), "method", ep.GetMethod(), "path", ep.GetPath())
			return x.fail(agtp.StatusServerError, "handler-unbound", "this endpoint's handler is not available on this front door", nil)
		}
		return p.callRegistered(x, p.bindFunc(x, f), input)
	case kindExternalService:
		return p.callExternal(x, input)
	case kindComposition:
		return p.callComposition(x, input)
	}
	return x.fail(agtp.StatusNotImplemented, "handler-kind-unsupported",
		"this front door cannot run "+ep.GetHandlerKind()+" handlers yet", nil)
}

// builtin runs a protocol-native (Tier A) endpoint: the built-in
// registered for its method and path template, given a builtin.Call of
// the request. What the built-in leaves in the call (the agent it
// addressed, a contract it issued, requests it ran) goes on the exchange
// for the record.
func (p *Pipeline) builtin(x *exchange, input []byte) *agtp.Response {
	ep := x.decision.Endpoint.Proto
	f, ok := p.builtins.Lookup(ep.GetMethod(), ep.GetPath())
	if !ok {
		return x.fail(agtp.StatusNotImplemented, "builtin-unsupported", ep.GetMethod()+" "+ep.GetPath()+" is not implemented by this front door", nil)
	}
	call := &builtin.Call{
		Method: ep.GetMethod(), Template: ep.GetPath(), Path: x.req.Path, RawQuery: x.req.RawQuery,
		Input: input, Params: map[string]any{}, Core: x.core,
		Header: &x.req.Header, Conn: x.conn, Peer: peerOf(x), State: x.state,
		AgentID: x.agentID, Caller: x.caller, ProofLevel: x.proof.Level, Scopes: p.effectiveScopes(x),
	}
	_ = json.Unmarshal(input, &call.Params)
	resp := f(x.ctx, call)
	if call.Target != nil {
		x.target = call.Target
	}
	if s := call.Synthesis; s != (builtin.Synthesis{}) {
		x.synthesisID, x.contractHash, x.negotiationOrigin = s.ID, s.ContractHash, s.NegotiationOrigin
	}
	x.priors = append(x.priors, call.Priors...)
	x.rejection = call.Rejection
	return resp
}

// callRegistered runs one of the suite's registered functions. Its result
// is validated when AGTP_OUTPUT_VALIDATION says so (sampled by default),
// a performance setting for code built into the front door
// (docs/frontdoor.md "Output validation").
func (p *Pipeline) callRegistered(x *exchange, f handler.Func, input []byte) *agtp.Response {
	return p.runHandler(x, f, input, false)
}

// callFunction runs a binding's handler (bindings.go: external_service,
// composition, carried MCP). Its result is validated every time, whatever
// AGTP_OUTPUT_VALIDATION says: docs/bindings.md promises the check for
// whatever a binding returns, and no test of the suite's covers what an
// upstream, a recipe or an MCP server answers.
func (p *Pipeline) callFunction(x *exchange, f handler.Func, input []byte) *agtp.Response {
	return p.runHandler(x, f, input, true)
}

// runHandler runs f and answers with its result, validated when always is
// set or the output check samples it.
func (p *Pipeline) runHandler(x *exchange, f handler.Func, input []byte, always bool) *agtp.Response {
	ep := x.decision.Endpoint.Proto
	call := p.handlerCall(x, x.decision.Method, x.req.Path, ep.GetPath(), input, pathParams(&x.decision))
	started := time.Now()
	x.dispatched = true
	res, err := safeCall(x, f, call)
	p.costs.Observe(x.decision.Method, ep.GetPath(), time.Since(started))
	if err != nil {
		x.transient = bindings.IsTransient(err)
		if errors.Is(err, upstream.ErrBinding) {
			// The binding could not be used: no upstream was called, so
			// a retry may run once the operator fixed it.
			x.dispatched = false
		}
		var he *handler.Error
		if errors.As(err, &he) {
			return namedError(x, he)
		}
		if x.ctx.Err() != nil {
			return x.fail(agtp.StatusUnavailable, "handler-timeout", "the handler did not finish within the request deadline", nil)
		}
		p.Log.ErrorContext(x.ctx, "handler failed", "handler", ep.GetHandlerName(), "error", err)
		return x.fail(agtp.StatusServerError, "internal", "the handler failed", nil)
	}
	if always || p.opts.OutputCheck.Due() {
		if resp := p.validateOutput(x, res.Output); resp != nil {
			return resp
		}
	}
	status := res.Status
	if status == 0 {
		status = agtp.StatusOK
	}
	return envelope(x, status, res.Output)
}

// namedError answers a handler's declared error: 422 unless the handler
// says otherwise (a binding's transient failure is 502 or 504), with the
// error's name as the reason and as "error"; the handler's Details are
// members of the body (the bindings put theirs under "details", as
// docs/decisions.md#D-named-error-body has it).
func namedError(x *exchange, he *handler.Error) *agtp.Response {
	status := he.Status
	if status == 0 {
		status = agtp.StatusUnprocessable
	}
	extra := map[string]any{"error": he.Name}
	for k, v := range he.Details {
		extra[k] = v
	}
	return x.fail(status, he.Name, he.Message, extra)
}

// handlerCall describes one handler invocation for the request's caller.
func (p *Pipeline) handlerCall(x *exchange, method, path, template string, input []byte, params map[string]string) *handler.Call {
	return &handler.Call{
		Method:       method,
		Path:         path,
		PathTemplate: template,
		Input:        input,
		CoreParams:   x.core.JSON(),
		PathParams:   params,
		Caller: handler.Caller{
			AgentID:           x.agentID,
			Owner:             x.caller.GetOwner(),
			Scopes:            p.effectiveScopes(x),
			ActingPrincipalID: x.authz.GetActingPrincipalId(),
		},
		SessionID:   x.req.Header.Get(agtp.HeaderSessionID),
		TaskID:      x.req.Header.Get(agtp.HeaderTaskID),
		RequestID:   x.req.Header.Get(agtp.HeaderRequestID),
		ContentType: x.req.Header.Get(agtp.HeaderContentType),
	}
}

// safeCall recovers a handler panic into an error, so one handler cannot
// take the connection down.
func safeCall(x *exchange, f handler.Func, call *handler.Call) (res *handler.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("handler panicked")
		}
	}()
	res, err = f(x.ctx, call)
	if err == nil && res == nil {
		err = errors.New("handler returned no result")
	}
	return res, err
}

func pathParams(d *route.Decision) map[string]string {
	ps := d.Params()
	if len(ps) == 0 {
		return nil
	}
	m := make(map[string]string, len(ps))
	for _, p := range ps {
		m[p.Name] = p.Value
	}
	return m
}

// validateOutput checks a handler's result against the endpoint's output
// schema; a mismatch is the handler's fault, so the caller gets a 500 and
// the operator a log line naming the violations.
func (p *Pipeline) validateOutput(x *exchange, output []byte) *agtp.Response {
	ep := x.state.Endpoints[x.decision.Endpoint.Index]
	v, err := answer.DecodeJSON(output)
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

// envelope wraps a handler's result in core §5.7's response envelope.
func envelope(x *exchange, status int, result json.RawMessage) *agtp.Response {
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	b, err := appendEnvelope(nil, status, x.req.Header.Get(agtp.HeaderTaskID), result)
	if err != nil {
		return x.fail(agtp.StatusServerError, "internal", "the result could not be encoded", nil)
	}
	return agtp.NewResponse(status, agtp.MediaTypeJSON, b)
}

// envelopeBody is the response envelope as encoding/json writes it.
type envelopeBody struct {
	Status int             `json:"status"`
	TaskID string          `json:"task_id,omitempty"`
	Result json.RawMessage `json:"result"`
}

// appendEnvelope appends the envelope's JSON to dst: the bytes
// json.Marshal writes for envelopeBody, and its error for a result that
// is not JSON. A result from a handler is valid JSON as a rule, and
// its task ID a plain token, so the envelope is written around the
// compacted result directly, without reflection, in one allocation; what
// json.Marshal would escape (HTML characters, U+2028 and U+2029, anything
// in the task ID that is not printable ASCII) goes through json.Marshal.
func appendEnvelope(dst []byte, status int, taskID string, result json.RawMessage) ([]byte, error) {
	if !plainJSONString(taskID) || htmlEscaped(result) {
		b, err := json.Marshal(envelopeBody{status, taskID, result})
		if err != nil || dst == nil {
			return b, err
		}
		return append(dst, b...), nil
	}
	if dst == nil {
		dst = make([]byte, 0, len(`{"status":000,"task_id":"","result":}`)+len(taskID)+len(result))
	}
	dst = append(dst, `{"status":`...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	if taskID != "" {
		dst = append(dst, `,"task_id":"`...)
		dst = append(dst, taskID...)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"result":`...)
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, result); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// plainJSONString reports whether json.Marshal writes s as it is between
// quotes: printable ASCII with nothing it escapes.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// htmlEscaped reports whether raw JSON holds what json.Marshal escapes
// when it copies a json.RawMessage: <, >, & and U+2028, U+2029 (whose
// UTF-8 encoding starts with 0xE2).
func htmlEscaped(raw []byte) bool {
	for _, c := range raw {
		if c == '<' || c == '>' || c == '&' || c == 0xE2 {
			return true
		}
	}
	return false
}
