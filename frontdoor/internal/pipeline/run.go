package pipeline

import (
	"errors"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// builtinPrefix names the registered functions of the protocol-native
// (Tier A) endpoints, which the front door implements itself.
const builtinPrefix = "agtp.builtin."

// kindRegisteredFunction is the handler binding the front door runs
// in-process.
const kindRegisteredFunction = "registered_function"

// maxPolicyInput is the largest input sent to policysvc for a budget
// check (AuthorizeRequest.input_json); policy refuses a body-read cost
// whose input it did not get.
const maxPolicyInput = 1 << 20

// run is the decision order of docs/decisions.md#D-decision-order after
// the wire checks the transport made, and, for a request indexed for
// RETRY, the report of how it ended (retry.go).
func (p *Pipeline) run(x *exchange) *agtp.Response {
	resp := p.decide(x)
	p.completeTaskRun(x, resp)
	return resp
}

func (p *Pipeline) decide(x *exchange) *agtp.Response {
	x.state = p.Catalog.Current()
	if x.state == nil {
		return x.fail(agtp.StatusUnavailable, "catalog-unavailable", "the front door has not received the method catalog yet; retry shortly", nil)
	}
	if _, ok := x.req.Header.Lookup(agtp.HeaderDelegationChain); ok && !p.opts.DelegationEnabled {
		return x.fail(agtp.StatusNotImplemented, "delegation-unsupported",
			"this server does not support Delegation-Chain (core §5.5.3); send the request without it", nil)
	}

	// Structure: 459, 460, 405, 404 or a match, from the local snapshot.
	x.state.Table.DecideInto(&x.decision, x.req.Method, x.req.Path)
	if x.decision.Outcome != route.Matched {
		if p.contractEligible(x) {
			if resp := p.contractRoute(x); resp != nil {
				return resp
			}
		}
		return p.structuralFailure(x)
	}
	x.matched = true
	ep := x.decision.Endpoint.Proto

	// Identity: the caller named by Agent-ID (core §5.5.3, §6.5.1), with
	// the manifest's anonymous_discovery and scope_required_for_invocation
	// toggles (AGTP-API §8.7) on either side of it.
	if resp := p.anonymousDiscoveryClosed(x, ep); resp != nil {
		return resp
	}
	if resp := p.identify(x, ep.GetAnonymous()); resp != nil {
		return resp
	}
	if resp := p.explicitScopeMissing(x, ep); resp != nil {
		return resp
	}

	// Input: parameters from body, query and path, validated before any
	// policy state (idempotency claims, rate-limit spend) is touched.
	input, resp := p.input(x)
	if resp != nil {
		return resp
	}

	// Policy: one round trip for scopes, rate limits, idempotency and
	// credentials.
	if resp := p.authorize(x, ep, x.decision.Method, input); resp != nil {
		return resp
	}
	if x.replayed {
		return p.replay(x)
	}
	if resp := p.intercept(x); resp != nil {
		return resp
	}

	return p.dispatch(x, input)
}

func (p *Pipeline) structuralFailure(x *exchange) *agtp.Response {
	d := &x.decision
	extra := map[string]any{}
	switch d.Outcome {
	case route.MethodViolation:
		extra["method"] = d.RequestedMethod
		extra["catalog_version"] = d.CatalogVersion
	case route.EndpointViolation:
		extra["segment"] = d.Segment
		extra["path"] = x.req.Path
	case route.MethodNotAllowed:
		extra["method"] = d.Method
		extra["path"] = d.Path
		extra["allowed_methods_for_path"] = d.AllowedMethods
		extra["redirects_for_path"] = d.Redirects
	case route.NotFound:
		extra["path"] = d.Path
	}
	return x.fail(d.Status(), d.Reason, d.Explanation(), extra)
}

// authorize asks policysvc for the decision. The Idempotency-Key it sends
// may be a REGISTER's idempotency_key parameter, and an allowed AUTHORIZE
// still has its grant checked against the caller's scopes (tier2.go). A
// request with a Task-ID is indexed for RETRY in the same call (retry.go).
func (p *Pipeline) authorize(x *exchange, ep *catalogv1.Endpoint, method string, input []byte) *agtp.Response {
	in := &policyv1.AuthorizeRequest{
		AgentId:                x.agentID,
		AgentScopes:            x.caller.GetScopes(),
		Method:                 method,
		PathTemplate:           ep.GetPath(),
		RequiredScopes:         ep.GetRequiredScopes(),
		EndpointIdempotent:     ep.GetIsIdempotent(),
		IdempotencyKeyRequired: ep.GetIdempotencyKeyRequired(),
		ClientIp:               clientIP(x.conn),
		Principal:              x.caller.GetOwner(),
	}
	in.AuthorityScope, in.AuthorityScopePresent = x.req.Header.Lookup(agtp.HeaderAuthorityScope)
	key, present, resp := requestKey(x, method, input)
	if resp != nil {
		return resp
	}
	x.idemKey, x.input, x.inputMethod = key, input, method
	if present && x.agentID != "" {
		in.IdempotencyKey = key
		in.RequestFingerprint = fingerprint(method, x.req.Path, input)
	}
	in.TaskRun = taskRun(x, ep)
	in.Authorization = x.req.Header.Get(agtp.HeaderAuthorization)
	in.TokenProvesAgent = x.tokenPending
	if peer := peerOf(x); peer != nil {
		in.ClientCertThumbprint = peer.Thumbprint
	}
	in.TrustTier = x.caller.GetTrustTier()
	in.BudgetLimit = x.req.Header.Get(agtp.HeaderBudgetLimit)
	if in.BudgetLimit != "" && len(input) <= maxPolicyInput {
		// Costs the operator reads from the body (a PURCHASE's amount)
		// are policy's to find; without a Budget-Limit nothing is read.
		in.InputJson = input
	}
	in.ZoneId = x.req.Header.Get(agtp.HeaderZoneID)
	in.MerchantId = x.req.Header.Get(agtp.HeaderMerchantID)
	in.MerchantManifestFingerprint = x.req.Header.Get(agtp.HeaderMerchantManifestFingerprint)
	out, err := p.Policy.Authorize(x.ctx, in)
	if err != nil {
		return p.dependencyFailure(x, "policysvc", err)
	}
	x.authz = out
	if x.tokenPending {
		if resp := p.settleTokenProof(x, out); resp != nil {
			return resp
		}
	}
	switch out.GetDecision() {
	case policyv1.Decision_DECISION_ALLOW:
		x.claim, x.idempotentEndpoint = out.GetClaim(), ep.GetIsIdempotent()
		return p.checkGrant(x, method, input)
	case policyv1.Decision_DECISION_REPLAY:
		x.replayed = true
		return nil
	case policyv1.Decision_DECISION_DENY:
		d := out.GetDenial()
		extra := map[string]any{}
		for k, v := range d.GetDetails() {
			extra[k] = v
		}
		if d.GetRetryAfterSeconds() > 0 {
			extra["retry_after_seconds"] = d.GetRetryAfterSeconds()
		}
		return x.fail(int(d.GetStatus()), d.GetReason(), d.GetExplanation(), extra)
	}
	return x.fail(agtp.StatusServerError, "internal", "policy returned no decision", nil)
}

// replay answers with the stored outcome of an earlier identical request.
func (p *Pipeline) replay(x *exchange) *agtp.Response {
	resp, err := decodeStored(x.authz.GetReplayResponse())
	if err != nil {
		p.Log.ErrorContext(x.ctx, "stored idempotent response does not parse", "error", err)
		return x.fail(agtp.StatusServerError, "internal", "the stored response for this Idempotency-Key is unreadable", nil)
	}
	// Per-response identifiers are set afresh by finish.
	for _, name := range [...]string{agtp.HeaderResponseID, agtp.HeaderAttributionRecord, agtp.HeaderAuditID} {
		resp.Header.Del(name)
	}
	resp.Header.Set(agtp.HeaderIdempotentReplayed, "true")
	return resp
}

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
		if strings.HasPrefix(ep.GetHandlerName(), builtinPrefix) {
			x.dispatched = true
			return p.builtin(x, input)
		}
		f, ok := p.Handlers.Lookup(ep.GetHandlerName())
		if !ok {
			p.Log.ErrorContext(x.ctx, "endpoint bound to an unregistered function", "handler", ep.GetHandlerName(), "method", ep.GetMethod(), "path", ep.GetPath())
			return x.fail(agtp.StatusServerError, "handler-unbound", "this endpoint's handler is not available on this front door", nil)
		}
		return p.callFunction(x, p.bindFunc(x, f), input)
	case kindExternalService:
		return p.callExternal(x, input)
	case kindComposition:
		return p.callComposition(x, input)
	}
	return x.fail(agtp.StatusNotImplemented, "handler-kind-unsupported",
		"this front door cannot run "+ep.GetHandlerKind()+" handlers yet", nil)
}

func (p *Pipeline) callFunction(x *exchange, f handler.Func, input []byte) *agtp.Response {
	ep := x.decision.Endpoint.Proto
	call := p.handlerCall(x, x.decision.Method, x.req.Path, ep.GetPath(), input, pathParams(&x.decision))
	started := time.Now()
	x.dispatched = true
	res, err := safeCall(x, f, call)
	p.costs.observe(x.decision.Method, ep.GetPath(), time.Since(started))
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
	if resp := p.validateOutput(x, res.Output); resp != nil {
		return resp
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

// settleTokenProof finishes identify for a caller whose bearer token
// policysvc has just checked: proven, it may bind a session; not proven,
// the refusal belongs on no agent's chain, least of all the one the
// request named.
func (p *Pipeline) settleTokenProof(x *exchange, out *policyv1.AuthorizeResponse) *agtp.Response {
	x.tokenPending = false
	if out.GetTokenIssuer() == "" {
		x.proof = callerproof.Proof{IgnoredClaim: x.agentID}
		x.caller, x.agentID = nil, ""
		return nil
	}
	x.proof.TokenIssuer = out.GetTokenIssuer()
	if out.GetDecision() == policyv1.Decision_DECISION_DENY {
		return nil
	}
	if resp := p.checkSession(x); resp != nil {
		if c := out.GetClaim(); c != nil {
			x.claim = c
			p.releaseClaim(x)
			x.claim = nil
		}
		return resp
	}
	return nil
}
