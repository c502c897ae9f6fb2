package pipeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"slices"
	"strings"

	"github.com/agtpsuite/agtp/frontdoor/internal/builtin"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/idempotency"
)

// The policy stage (docs/decisions.md#D-decision-order step 11,
// docs/policy.md): one Authorize round trip to policysvc decides scopes,
// rate limits, budgets, idempotency and bearer tokens, and indexes a
// request with a Task-ID for RETRY. What policysvc grants that must be
// settled once the response is known (an idempotency claim, a RETRY index
// entry) the stage leaves as record hooks. The suite-level rules of the
// Tier 2 methods whose security notes bind every endpoint of the method
// (standard methods §5.2, §5.4, §5.6, §8.8, §10) sit here and in the input
// stage; the method scopes (authorization:grant, activation:run,
// payments:purchase) are added to each endpoint's required_scopes when the
// catalog compiles it (catalogsvc/endpoint MethodScopes), so policysvc
// refuses them like any endpoint scope.

// maxPolicyInput is the largest input sent to policysvc for a budget
// check (AuthorizeRequest.input_json); policy refuses a body-read cost
// whose input it did not get.
const maxPolicyInput = 1 << 20

// authorize asks policysvc for the decision. The Idempotency-Key it sends
// may be a REGISTER's idempotency_key parameter, and an allowed AUTHORIZE
// still has its grant checked against the caller's scopes (tier2.go). A
// request with a Task-ID is indexed for RETRY in the same call (retry.go).
func (p *Pipeline) authorize(x *exchange, ep *catalogv1.Endpoint, method string, input []byte) *agtp.Response {
	in := callerAuthorize(x, method, ep.GetPath())
	in.RequiredScopes = ep.GetRequiredScopes()
	in.EndpointIdempotent, in.IdempotencyKeyRequired = ep.GetIsIdempotent(), ep.GetIdempotencyKeyRequired()
	in.AuthorityScope, in.AuthorityScopePresent = x.req.Header.Lookup(agtp.HeaderAuthorityScope)
	key, present, resp := requestKey(x, method, input)
	if resp != nil {
		return resp
	}
	x.idemKey, x.input, x.inputMethod = key, input, method
	switch {
	case method == "TRANSFER" || method == "RUN":
		x.onRecord(&tier2Hook)
	case method == "RETRY" && builtin.RetryOf(x.ctx) == "":
		x.onRecord(&retryLinkHook)
	}
	if present && x.agentID != "" {
		in.IdempotencyKey = key
		in.RequestFingerprint = x.bound.idempotencyFingerprint(fingerprint(x, method, input))
	}
	in.TaskRun = taskRun(x, ep)
	in.Authorization = x.req.Header.Get(agtp.HeaderAuthorization)
	in.TokenProvesAgent = x.tokenPending
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
	if out.GetTaskRunToken() != "" {
		x.onRecord(&taskRunHook)
	}
	if x.tokenPending {
		if resp := p.settleTokenProof(x, out); resp != nil {
			return resp
		}
	}
	switch out.GetDecision() {
	case policyv1.Decision_DECISION_ALLOW:
		x.claim, x.idempotentEndpoint = out.GetClaim(), ep.GetIsIdempotent()
		if x.claim != nil {
			x.onRecord(&idempotencyHook)
		}
		return p.checkGrant(x, method, input)
	case policyv1.Decision_DECISION_REPLAY:
		x.replayed = true
		return nil
	case policyv1.Decision_DECISION_DENY:
		return denied(x, out.GetDenial())
	}
	return x.fail(agtp.StatusServerError, "internal", "policy returned no decision", nil)
}

// callerAuthorize is the part of an Authorize request that says who calls
// what: the caller's identity, scopes, owner and trust tier, where it
// connects from and with which certificate, and the method and path
// template its limits are looked up by.
func callerAuthorize(x *exchange, method, pathTemplate string) *policyv1.AuthorizeRequest {
	in := &policyv1.AuthorizeRequest{
		AgentId:      x.agentID,
		AgentScopes:  x.caller.GetScopes(),
		Method:       method,
		PathTemplate: pathTemplate,
		ClientIp:     clientIP(x.conn),
		Principal:    x.caller.GetOwner(),
		TrustTier:    x.caller.GetTrustTier(),
	}
	if peer := peerOf(x); peer != nil {
		in.ClientCertThumbprint = peer.Thumbprint
	}
	return in
}

// denied answers policysvc's denial d: its status, reason and
// explanation, with its details and Retry-After seconds in the body.
func denied(x *exchange, d *policyv1.Denial) *agtp.Response {
	extra := map[string]any{}
	for k, v := range d.GetDetails() {
		extra[k] = v
	}
	if d.GetRetryAfterSeconds() > 0 {
		extra["retry_after_seconds"] = d.GetRetryAfterSeconds()
	}
	return x.fail(int(d.GetStatus()), d.GetReason(), d.GetExplanation(), extra)
}

// Reasons of the Tier 2 refusals.
const (
	ReasonFreeFormExecution      = "free-form-execution-refused"
	ReasonIdempotencyKeyMismatch = "idempotency-key-mismatch"
	ReasonGrantScopeInvalid      = "authority-scope-invalid"
)

// requestKey is the request's Idempotency-Key. A REGISTER may carry it as
// its idempotency_key parameter instead (standard methods §5.2); a header
// and a different parameter are a 400, as they name two requests.
func requestKey(x *exchange, method string, input []byte) (key string, present bool, resp *agtp.Response) {
	key, present = x.req.Header.Lookup(agtp.HeaderIdempotencyKey)
	if method != "REGISTER" {
		return key, present, nil
	}
	var in struct {
		Key *string `json:"idempotency_key"`
	}
	if json.Unmarshal(input, &in) != nil || in.Key == nil || *in.Key == "" {
		return key, present, nil
	}
	switch {
	case key == "":
		return *in.Key, true, nil
	case key != *in.Key:
		return "", false, x.fail(agtp.StatusBadRequest, ReasonIdempotencyKeyMismatch,
			"the Idempotency-Key header and the idempotency_key parameter differ; send one key, or the same key in both", nil)
	}
	return key, present, nil
}

// checkGrant applies AUTHORIZE's anti-laundering rule (standard methods
// §5.4, §10.2; core §10.4.2 for DELEGATE): every scope of the requested
// grant must be covered by the caller's effective Authority-Scope. A
// refusal is logged, and its Attribution-Record is signed onto the
// caller's chain like every response's.
func (p *Pipeline) checkGrant(x *exchange, method string, input []byte) *agtp.Response {
	if method != "AUTHORIZE" {
		return nil
	}
	var in struct {
		Scope json.RawMessage `json:"scope"`
	}
	_ = json.Unmarshal(input, &in)
	granted, ok := grantScopes(in.Scope)
	if !ok {
		return x.fail(agtp.StatusBadRequest, ReasonGrantScopeInvalid,
			"scope must be a non-empty list of scope tokens: a JSON array, or one string with the tokens separated by commas", nil)
	}
	own, err := agtp.ParseScopeList(p.effectiveScopes(x))
	if err != nil {
		own = nil
	}
	if bad, ok := own.CoversAll(granted); !ok {
		p.Log.WarnContext(x.ctx, "authorization refused: scope escalation", "agent_id", x.agentID, "path", x.req.Path, "scope", granted.String())
		return x.fail(agtp.StatusAuthorizationRequired, agtp.ReasonScopeRequired,
			"the granted scope "+string(bad)+" is not within the authorizing agent's own Authority-Scope (standard methods §10.2)",
			map[string]any{"scope": string(bad)})
	}
	return nil
}

// grantScopes parses AUTHORIZE's scope parameter: an array of tokens or
// one Authority-Scope-style string.
func grantScopes(raw json.RawMessage) (agtp.ScopeSet, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		set, err := agtp.ParseScopes(s)
		return set, err == nil
	}
	var list []string
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return nil, false
	}
	set, err := agtp.ParseScopeList(list)
	return set, err == nil
}

// settleTokenProof finishes identify for a caller whose bearer token
// policysvc has just checked: proven, it may bind a session; not proven,
// the refusal belongs on no agent's chain, least of all the one the
// request named.
func (p *Pipeline) settleTokenProof(x *exchange, out *policyv1.AuthorizeResponse) *agtp.Response {
	x.tokenPending = false
	if out.GetTokenIssuer() == "" {
		x.forgetCaller(callerproof.Proof{IgnoredClaim: x.agentID})
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

// decodeStored parses a stored response.
func decodeStored(b []byte) (*agtp.Response, error) {
	return agtp.ReadResponse(bufio.NewReader(bytes.NewReader(b)), agtp.Limits{MaxBody: 64 << 20})
}

// taskRun is what policysvc indexes for a RETRY of this request, nil
// when it is not indexed: no Task-ID, anonymous, a built-in, or a body
// or target over the bounds.
func taskRun(x *exchange, ep *catalogv1.Endpoint) *policyv1.TaskRun {
	taskID, ok := x.req.Header.Lookup(agtp.HeaderTaskID)
	if !ok || taskID == "" || len(taskID) > maxTaskIDLen || x.agentID == "" {
		return nil
	}
	if strings.HasPrefix(ep.GetHandlerName(), builtinPrefix) || len(x.req.Body) > maxTaskRunBody {
		return nil
	}
	target := x.req.Path
	if x.req.RawQuery != "" {
		target += "?" + x.req.RawQuery
	}
	if len(target) > maxTaskRunTarget || !strings.HasPrefix(target, "/") {
		return nil
	}
	return &policyv1.TaskRun{
		TaskId: taskID, Method: x.req.Method, Target: target, Body: x.req.Body,
		ContentType: x.req.Header.Get(agtp.HeaderContentType), IdempotencyKey: x.idemKey,
		EndpointIdempotent: ep.GetIsIdempotent(),
	}
}

// Bounds of what is indexed for RETRY: a larger request is not indexed,
// and a RETRY naming it gets 404. maxTaskIDLen is also the bound of Task-ID
// and Request-ID on every request (echoedFields, wire.go).
const (
	maxTaskRunBody   = 64 << 10
	maxTaskRunTarget = 8 << 10
	maxTaskIDLen     = 256
)

// fingerprint is what an Idempotency-Key is bound to: the method, the
// path, the input and the core parameters the input stage took out of it
// (EXECUTE's action, QUERY's intent, ..., from the body, its envelope's
// context or the query), which the handler gets as well: the same key
// with another action is another request, not a replay of the first.
func fingerprint(x *exchange, method string, input []byte) string {
	if core := x.core.JSON(); core != nil {
		input = slices.Concat([]byte(`{"core":`), core, []byte(`,"input":`), orNull(input), []byte(`}`))
	}
	return idempotency.Fingerprint(method, x.req.Path, input)
}

func clientIP(c *transport.ConnInfo) string {
	if c == nil || c.RemoteAddr == nil {
		return ""
	}
	// The transports' own addresses: the host part of String, without
	// formatting the port only to split it off again.
	switch a := c.RemoteAddr.(type) {
	case *net.TCPAddr:
		return addrHost(a.IP, a.Zone)
	case *net.UDPAddr:
		return addrHost(a.IP, a.Zone)
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr.String())
	if err != nil {
		return c.RemoteAddr.String()
	}
	return host
}

// addrHost is the host that net.TCPAddr.String and net.UDPAddr.String
// join with the port: the IP ("" when absent) and its zone.
func addrHost(ip net.IP, zone string) string {
	host := ""
	if len(ip) > 0 {
		host = ip.String()
	}
	if zone != "" {
		host += "%" + zone
	}
	return host
}
