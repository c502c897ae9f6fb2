package pipeline

import (
	"cmp"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/agtpsuite/agtp/frontdoor/internal/builtin"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/sessionbind"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// The caller stage (docs/decisions.md#D-decision-order, "identity"): who the
// request is from, and how that was proven (docs/identity.md, "Proven
// callers"). Facts about the caller come from what it proved: an Agent
// Certificate or the Genesis issuer key at the handshake, a bearer token
// policysvc verifies, or an API key a binding checked. A bare Agent-ID
// header is a claim (core §10.2 Level 1) and counts only as the caller_proof
// policy allows (docs/decisions.md#D-caller-proof). A Session-ID is bound
// to the proven caller here too.

// forgetCaller drops a caller the request named but never proved (its
// bearer token refused or never checked, or no agent found for a contract
// lookup), so that the answer goes on no agent's chain; proof says what
// the record keeps of the claim. The other stages that learn a caller was
// not proven call it, so the caller fields have one writer.
func (x *exchange) forgetCaller(proof callerproof.Proof) {
	x.caller, x.agentID, x.proof, x.tokenPending = nil, "", proof, false
}

// caller establishes the caller for the matched endpoint ep
// (docs/decisions.md#D-decision-order step 9): the manifest's
// anonymous_discovery and scope_required_for_invocation toggles (AGTP-API
// §8.7) on either side of the caller named by Agent-ID (core §5.5.3,
// §6.5.1).
func (p *Pipeline) caller(x *exchange, ep *catalogv1.Endpoint) *agtp.Response {
	if resp := p.anonymousDiscoveryClosed(x, ep); resp != nil {
		return resp
	}
	if resp := p.identify(x, ep.GetAnonymous()); resp != nil {
		return resp
	}
	return p.explicitScopeMissing(x, ep)
}

// peerOf is what the connection's client certificate proved, nil without
// one.
func peerOf(x *exchange) *callerproof.Peer {
	if x.conn == nil {
		return nil
	}
	p, _ := x.conn.Peer.(*callerproof.Peer)
	return p
}

// delegatedTo is the delegation a sub-request of a verified DELEGATE runs
// under, nil for every request read off the wire.
func delegatedTo(x *exchange) *callerproof.Delegated {
	if x.conn == nil {
		return nil
	}
	d, _ := x.conn.Peer.(*callerproof.Delegated)
	return d
}

// namesAgent reports whether the request names a caller at all: an
// Agent-ID header, or a certificate that presents itself as an Agent
// Certificate.
func namesAgent(x *exchange) bool {
	if _, ok := x.req.Header.Lookup(agtp.HeaderAgentID); ok {
		return true
	}
	peer := peerOf(x)
	return peer != nil && (peer.AgentID != "" || peer.Err != nil)
}

// identify resolves the caller. An agent that proved itself but is
// unknown or not active is refused even on anonymous endpoints: a caller
// that names itself must be who it says.
func (p *Pipeline) identify(x *exchange, anonymousOK bool) *agtp.Response {
	header, present := x.req.Header.Lookup(agtp.HeaderAgentID)
	peer := peerOf(x)
	var id string
	switch {
	case delegatedTo(x) != nil && present && header == delegatedTo(x).AgentID:
		id, x.proof = header, callerproof.Proof{Level: delegatedTo(x).Level, By: callerproof.ByDelegation}
	case x.bound != nil && present:
		// A binding (AGP) authenticated the caller with its own
		// credential and named it in the synthesized request.
		id, x.proof = header, callerproof.Proof{Level: callerproof.LevelToken, By: "agp-api-key"}
	case peer != nil && (peer.AgentID != "" || peer.Err != nil):
		if peer.Err != nil {
			return x.fail(agtp.StatusUnauthorized, peer.Err.Reason, peer.Err.Explanation, nil)
		}
		if present && header != peer.AgentID {
			return x.fail(agtp.StatusUnauthorized, callerpolicy.ReasonAgentUnauthenticated,
				"the Agent-ID header names another agent than the client certificate does; send the certificate's Agent-ID or none", nil)
		}
		id = peer.AgentID
		x.proof = callerproof.Proof{Level: callerproof.LevelCertificate, By: callerproof.ByCertificate, CertFingerprint: peer.CertFingerprint}
	case !present:
		if anonymousOK {
			return nil
		}
		return x.fail(agtp.StatusUnauthorized, callerpolicy.ReasonAgentUnauthenticated,
			"this endpoint is not anonymous: present your Agent Certificate (or a token naming your Agent-ID) with Agent-ID", nil)
	default:
		if !agtp.IsCanonicalID(header) {
			if anonymousOK && p.opts.CallerProof == callerproof.Required {
				x.proof.IgnoredClaim = "malformed"
				return nil
			}
			return x.fail(agtp.StatusUnauthorized, callerpolicy.ReasonAgentUnauthenticated,
				"Agent-ID must be a canonical Agent-ID: 64 lowercase hexadecimal characters", nil)
		}
		id = header
	}

	rec, err := p.Agents.Lookup(x.ctx, id)
	if err != nil {
		return p.dependencyFailure(x, "identitysvc", err)
	}
	if x.proof.Level == 0 {
		// A header without a certificate for it: proven by the Genesis
		// issuer key at the handshake, by a token policysvc will check,
		// or not at all.
		switch {
		case peer != nil && rec != nil && rec.GetIssuerFingerprint() != "" && peer.KeyFingerprint == rec.GetIssuerFingerprint():
			x.proof = callerproof.Proof{Level: callerproof.LevelCertificate, By: callerproof.ByGenesisIssuerKey, CertFingerprint: peer.CertFingerprint}
		case rec != nil && delegationSignedBy(x, id, rec.GetIssuerPublicKey()):
			// A DELEGATE from another server: the delegator's token,
			// signed with its Genesis issuer key, is its proof; the
			// handler checks the rest of the token.
			x.proof = callerproof.Proof{Level: callerproof.LevelCertificate, By: callerproof.ByDelegationToken}
		case peer != nil && peer.PeerServer != "" && x.decision.Method == agtp.MethodNotify && builtinEndpoint(x):
			// Another suite's server delivers its agent's NOTIFY; the
			// operator trusts its word for that, and only that: its
			// certificate cannot tell which of the agents registered
			// here are its own, so it speaks for none of them on any
			// other call (a DELEGATE hop carries the delegator's token).
			x.proof = callerproof.Proof{Level: callerproof.LevelToken, By: callerproof.ByPeerServer, PeerServer: peer.PeerServer}
		case x.req.Header.Get(agtp.HeaderAuthorization) != "" && p.opts.CallerProof != callerproof.Off:
			x.proof = callerproof.Proof{Level: callerproof.LevelToken, By: callerproof.ByToken}
			x.tokenPending = true
		default:
			if resp := p.unprovenClaim(x, id, anonymousOK); resp != nil || x.proof.IgnoredClaim != "" {
				return resp
			}
		}
	}
	d := callerpolicy.Caller(rec)
	if !d.Allowed {
		return x.fail(d.Status, d.Reason, d.Explanation, d.Fields())
	}
	if x.proof.By == callerproof.ByCertificate {
		if e := peer.VerifyAgent(rec, time.Now()); e != nil {
			return x.fail(agtp.StatusUnauthorized, e.Reason, e.Explanation, nil)
		}
	}
	x.caller, x.agentID = rec, id
	if !x.tokenPending {
		if resp := p.checkSession(x); resp != nil {
			return resp
		}
	}
	if raw, ok := x.req.Header.Lookup(agtp.HeaderAuthorityScope); ok {
		claimed, err := agtp.ParseScopes(raw)
		if err != nil {
			var pe *agtp.ProtocolError
			if errors.As(err, &pe) {
				return x.fail(agtp.StatusAuthorizationRequired, callerpolicy.ReasonScopeClaimInvalid, pe.Explanation, nil)
			}
			return x.fail(agtp.StatusAuthorizationRequired, callerpolicy.ReasonScopeClaimInvalid, err.Error(), nil)
		}
		if d := callerpolicy.ClaimedScopes(rec, claimed); !d.Allowed {
			return x.fail(d.Status, d.Reason, d.Explanation, nil)
		}
	}
	return nil
}

// unprovenClaim applies the caller_proof policy to an Agent-ID header
// nothing proved. It returns a refusal, or nil with x.proof saying whether
// the claim stands (Level 1) or was ignored (the request goes on as
// anonymous).
func (p *Pipeline) unprovenClaim(x *exchange, id string, anonymousOK bool) *agtp.Response {
	switch p.opts.CallerProof {
	case callerproof.Off:
		x.proof = callerproof.Proof{Level: callerproof.LevelClaim, By: callerproof.ByClaim}
		return nil
	case callerproof.Informational:
		if p.informational(x) {
			x.proof = callerproof.Proof{Level: callerproof.LevelClaim, By: callerproof.ByClaim}
			return nil
		}
		return x.fail(agtp.StatusUnauthorized, callerpolicy.ReasonAgentUnauthenticated,
			"this endpoint changes state: prove your Agent-ID with an Agent Certificate or a token naming it; a bare Agent-ID header is accepted only on informational endpoints", nil)
	}
	if anonymousOK {
		x.proof.IgnoredClaim = id
		return nil
	}
	return x.fail(agtp.StatusUnauthorized, callerpolicy.ReasonAgentUnauthenticated,
		"this server does not take a bare Agent-ID header as proof: present your Agent Certificate, or a token naming your Agent-ID", nil)
}

// informational reports whether the matched endpoint's semantic impact
// is informational (read-only, AGTP-API §7.1).
func (p *Pipeline) informational(x *exchange) bool {
	if !x.matched || x.state == nil || x.decision.Endpoint == nil {
		return false
	}
	ep := x.state.Endpoints[x.decision.Endpoint.Index]
	return ep != nil && ep.Def != nil && ep.Def.Semantic.Impact == "informational"
}

// delegationSignedBy reports whether a request to the built-in DELEGATE
// carries an unexpired delegation token (core §7.2.9) that agentID's
// Genesis issuer key signed for agentID as the delegator. That is what a
// DELEGATE forwarded by another server can prove about its delegator, and
// it proves nothing for any other endpoint: an operator's endpoint with
// the method DELEGATE does not check the token's delegatee, scope and
// task against its request, as the built-in does.
func delegationSignedBy(x *exchange, agentID string, issuer []byte) bool {
	if x.decision.Method != "DELEGATE" || !builtinEndpoint(x) || len(x.req.Body) == 0 {
		return false
	}
	var body struct {
		Token      string `json:"delegation_token"`
		Parameters struct {
			Token string `json:"delegation_token"`
		} `json:"parameters"`
	}
	if json.Unmarshal(x.req.Body, &body) != nil {
		return false
	}
	c, link := builtin.OpenDelegationToken(cmp.Or(body.Token, body.Parameters.Token), issuer, time.Now())
	return link == "" && c.Delegator == agentID
}

// builtinEndpoint reports whether the matched endpoint runs one of the
// front door's built-ins.
func builtinEndpoint(x *exchange) bool {
	ep := x.decision.Endpoint
	return ep != nil && (ep.Proto.GetHandlerKind() == kindRegisteredFunction || ep.Proto.GetHandlerKind() == "") &&
		strings.HasPrefix(ep.Proto.GetHandlerName(), builtinPrefix)
}

// anonymousDiscoveryClosed applies policies.anonymous_discovery=false
// (AGTP-API §8.7): an anonymous call to a read-only discovery built-in
// (DISCOVER and DESCRIBE, Tier A, and QUERY, PLAN, SUMMARIZE and EXECUTE /,
// which tell what the server's endpoints do) gets 262 anonymous-discovery-disabled (api
// assertion 65, docs/decisions.md#D-anonymous-discovery) rather than the
// plain 401 any other non-anonymous endpoint gives. /contracts is per caller
// and never anonymous, so it keeps the 401.
func (p *Pipeline) anonymousDiscoveryClosed(x *exchange, ep *catalogv1.Endpoint) *agtp.Response {
	discovery := ep.GetMethod() == agtp.MethodDiscover || ep.GetMethod() == agtp.MethodDescribe || builtin.ResolvesIntent(ep.GetMethod(), ep.GetPath())
	if x.state.Snapshot.GetPolicies().GetAnonymousDiscovery() || ep.GetTier() != catalogv1.EndpointTier_ENDPOINT_TIER_A ||
		!discovery || ep.GetPath() == "/contracts" {
		return nil
	}
	if namesAgent(x) {
		return nil
	}
	return x.fail(agtp.StatusAuthorizationRequired, agtp.ReasonAnonymousDiscoveryDisabled,
		"this server does not serve discovery to anonymous callers (policies.anonymous_discovery is false); send an Agent-ID", nil)
}

// explicitScopeMissing applies policies.scope_required_for_invocation
// (AGTP-API §8.7): when it is true, an identified caller invoking an
// endpoint that declares required_scopes must carry Authority-Scope; the
// handler is not run and the answer is 262 scope-required naming the first
// required scope. When it is false (the default, docs/frontdoor.md), a
// request without Authority-Scope inherits the identity document's scopes
// (core §5.5.3).
func (p *Pipeline) explicitScopeMissing(x *exchange, ep *catalogv1.Endpoint) *agtp.Response {
	if !x.state.Snapshot.GetPolicies().GetScopeRequiredForInvocation() || len(ep.GetRequiredScopes()) == 0 || x.agentID == "" {
		return nil
	}
	if _, present := x.req.Header.Lookup(agtp.HeaderAuthorityScope); present {
		return nil
	}
	return x.fail(agtp.StatusAuthorizationRequired, agtp.ReasonScopeRequired,
		"this server requires Authority-Scope on every scope-gated call (policies.scope_required_for_invocation); claim "+strings.Join(ep.GetRequiredScopes(), ", "),
		map[string]any{"scope": ep.GetRequiredScopes()[0]})
}

// checkSession binds or checks the request's Session-ID. Anonymous
// requests do not bind sessions. A request from 0-RTT data, whose client
// identity is not yet proven, can neither bind nor be checked against a
// binding, so it is answered 425 and sent again after the handshake
// (served unchecked, it reached a suspended session, or one bound to
// another key).
func (p *Pipeline) checkSession(x *exchange) *agtp.Response {
	sid, ok := x.req.Header.Lookup(agtp.HeaderSessionID)
	if !ok || x.agentID == "" {
		return nil
	}
	if x.conn.EarlyData {
		return x.fail(agtp.StatusTooEarly, agtp.ReasonTooEarly,
			"a request in a session is not accepted in 0-RTT data; retry after the handshake", nil)
	}
	// RESUME is how a suspended session is reached again; it checks the
	// binding itself, with the nonce.
	if x.decision.Method == "RESUME" {
		return nil
	}
	if !sessionbind.Valid(sid) {
		return x.fail(agtp.StatusBadRequest, sessionbind.ReasonInvalid,
			"Session-ID must be 22 to 256 visible ASCII characters carrying at least 128 random bits", nil)
	}
	fp := clientKeyFingerprint(x)
	binding := x.agentID + "|" + fp
	ok, gen := p.sessions.confirmed(sid, binding, time.Now())
	if ok {
		return nil
	}
	_, err := p.Identity.ResolveAgent(x.ctx, &identityv1.ResolveAgentRequest{AgentId: x.agentID, SessionId: sid, ClientKeyFingerprint: fp})
	if err != nil {
		return p.dependencyFailure(x, "identitysvc", err)
	}
	p.sessions.remember(gen, sid, binding, time.Now())
	return nil
}

// sessionCache remembers Session-ID bindings identitysvc has confirmed,
// so a session costs one ResolveAgent call on first sight and none after
// (core §10.4.5: Session-ID, Agent-ID and the TLS client identity must
// agree). A binding never changes once made, but a session can be
// suspended and resumed: identitysvc's watch says so (DropSession), and a
// confirmed binding is trusted without expiry only while that watch is
// live. While it is not, or before it first opened, a binding is kept
// for sessionUnwatchedTTL only, and a watch that opens or resyncs (it may
// have missed events) clears them all (ResetSessions). The cache is
// bounded and simply cleared when full.
type sessionCache struct {
	mu    sync.RWMutex
	bound map[string]sessionEntry // by Session-ID
	// gen counts drops and resets: an answer from identitysvc that a
	// drop overtook (the session was suspended while it was on its way)
	// is not remembered.
	gen     uint64
	watched bool
}

type sessionEntry struct {
	binding string // Agent-ID + "|" + client key fingerprint
	expires time.Time
}

const (
	maxSessions         = 100_000
	sessionUnwatchedTTL = 2 * time.Second
)

// confirmed reports whether binding is the session's confirmed one, or
// the generation a check with identitysvc starts from.
func (c *sessionCache) confirmed(sessionID, binding string, now time.Time) (bool, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.bound[sessionID]
	if ok && e.binding == binding && (e.expires.IsZero() || now.Before(e.expires)) {
		return true, 0
	}
	return false, c.gen
}

// remember keeps a binding identitysvc confirmed, unless a drop or reset
// came after the check started (gen).
func (c *sessionCache) remember(gen uint64, sessionID, binding string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.bound == nil || len(c.bound) >= maxSessions {
		c.bound = map[string]sessionEntry{}
	}
	e := sessionEntry{binding: binding}
	if !c.watched {
		e.expires = now.Add(sessionUnwatchedTTL)
	}
	c.bound[sessionID] = e
}

// DropSession forgets a confirmed binding, so the next request of the
// session is checked with identitysvc again (after SUSPEND or RESUME).
func (p *Pipeline) DropSession(sessionID string) {
	p.sessions.mu.Lock()
	defer p.sessions.mu.Unlock()
	p.sessions.gen++
	delete(p.sessions.bound, sessionID)
}

// ResetSessions forgets every confirmed binding: identitysvc's watch
// opened, resynced (it may have missed events) or broke. watched says
// whether it is live now, so that bindings confirmed from here on can be
// trusted until it says otherwise.
func (p *Pipeline) ResetSessions(watched bool) {
	p.sessions.mu.Lock()
	defer p.sessions.mu.Unlock()
	p.sessions.gen++
	p.sessions.bound = nil
	p.sessions.watched = watched
}

// effectiveScopes are the Authority-Scope claim when one was sent (it has
// been checked against the identity document), else the document's scopes.
func (p *Pipeline) effectiveScopes(x *exchange) []string {
	if raw, ok := x.req.Header.Lookup(agtp.HeaderAuthorityScope); ok {
		if set, err := agtp.ParseScopes(raw); err == nil {
			out := make([]string, len(set))
			for i, s := range set {
				out[i] = string(s)
			}
			return out
		}
	}
	return x.caller.GetScopes()
}

// scopeHeld reports whether the request's effective scopes cover one.
func (p *Pipeline) scopeHeld(x *exchange, scope string) bool {
	held := make(agtp.ScopeSet, 0, len(p.effectiveScopes(x)))
	for _, s := range p.effectiveScopes(x) {
		held = append(held, agtp.Scope(s))
	}
	return held.Covers(agtp.Scope(scope))
}

// clientKeyFingerprint is the Genesis-issuer form of the TLS client
// certificate's key (core §7.2.19), "" without one.
func clientKeyFingerprint(x *exchange) string {
	if peer := peerOf(x); peer != nil {
		return peer.KeyFingerprint
	}
	return ""
}
