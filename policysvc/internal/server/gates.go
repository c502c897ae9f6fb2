package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/agtpsuite/agtp/policysvc/internal/oauth"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/idempotency"
)

func deny(status int, reason, explanation string, details ...string) *policyv1.Denial {
	d := &policyv1.Denial{Status: int32(status), Reason: reason, Explanation: explanation}
	if len(details) > 0 {
		d.Details = make(map[string]string, len(details)/2)
		for i := 0; i+1 < len(details); i += 2 {
			d.Details[details[i]] = details[i+1]
		}
	}
	return d
}

// localChecks runs every check that needs no Redis, in the order of
// docs/decisions.md#D-decision-order (authentication, then authorization and
// scope, then the operator's other dimensions, then parameters). It fills in
// the effective scopes and the acting principal, and returns the first
// refusal and the acting principal.
func (s *Server) localChecks(ctx context.Context, req *policyv1.AuthorizeRequest, resp *policyv1.AuthorizeResponse) (*policyv1.Denial, string) {
	anonymous := req.GetAgentId() == ""
	if anonymous && s.opts.DisableAnonymousDiscovery {
		return deny(agtp.StatusAuthorizationRequired, agtp.ReasonAnonymousDiscoveryDisabled,
			"this server does not serve anonymous requests; send an Agent-ID"), ""
	}

	principal, denial := s.checkCredential(ctx, req, resp)
	if denial != nil {
		return denial, ""
	}
	acting := principal.ID

	if d := s.checkTrustTier(req); d != nil {
		return d, acting
	}
	if d := checkScopes(req, resp); d != nil {
		return d, acting
	}
	if s.oauth != nil && principal.ID != "" {
		if missing, ok := s.oauth.MissingScope(req.GetMethod(), principal); ok {
			// A token-based scope: an operator-defined dimension (455),
			// not Authority-Scope (262), per core §5.6 and
			// docs/decisions.md#D-scope-262.
			return deny(agtp.StatusScopeViolation, ReasonOAuthScopeInsufficient,
				"the credential does not grant the OAuth scope "+strconv.Quote(missing), "scope", missing), acting
		}
	}
	if d := s.checkBudget(req); d != nil {
		return d, acting
	}
	if d := s.checkZone(req); d != nil {
		return d, acting
	}
	if d := s.checkMerchant(req, resp); d != nil {
		return d, acting
	}
	return s.checkIdempotencyKey(req), acting
}

// checkCredential verifies the request's bearer token, when the operator
// configured external credentials (core §8.6; without [policies.oauth]
// the Authorization header is not read at all), and with
// token_proves_agent requires it to name the Agent-ID it proves. It
// fills in the acting principal and the token's issuer.
func (s *Server) checkCredential(ctx context.Context, req *policyv1.AuthorizeRequest, resp *policyv1.AuthorizeResponse) (oauth.Principal, *policyv1.Denial) {
	var principal oauth.Principal
	if s.oauth != nil {
		method := req.GetMethod()
		needs := s.oauth.RequiredOn(method) || len(s.opts.OAuth.MethodScopes[method]) > 0
		switch {
		case req.GetAuthorization() != "":
			p, err := s.oauth.Verify(ctx, req.GetAuthorization())
			if err != nil {
				reason := agtp.ReasonOAuthInvalid
				if req.GetTokenProvesAgent() {
					reason = agtp.ReasonAgentUnauthenticated
				}
				var oe *oauth.Error
				if errors.As(err, &oe) {
					return oauth.Principal{}, deny(agtp.StatusUnauthorized, reason, oe.Explanation)
				}
				return oauth.Principal{}, deny(agtp.StatusUnauthorized, reason, "the credential could not be validated")
			}
			if d := tokenBinding(req, p); d != nil {
				return oauth.Principal{}, d
			}
			principal = p
			resp.ActingPrincipalId = p.ID
			if req.GetTokenProvesAgent() {
				resp.TokenIssuer = p.Issuer
			}
		case needs:
			return oauth.Principal{}, deny(agtp.StatusUnauthorized, agtp.ReasonOAuthRequired,
				method+" requires an Authorization credential")
		}
	}
	if req.GetTokenProvesAgent() && principal.AgentID == "" {
		why := "the credential names no Agent-ID"
		if s.oauth == nil {
			why = "this server verifies no tokens; prove your Agent-ID with an Agent Certificate"
		}
		return oauth.Principal{}, deny(agtp.StatusUnauthorized, agtp.ReasonAgentUnauthenticated, why)
	}
	return principal, nil
}

func (s *Server) checkTrustTier(req *policyv1.AuthorizeRequest) *policyv1.Denial {
	if req.GetAgentId() == "" {
		return nil
	}
	minimum := s.opts.TrustTiers.Minimum
	if m, ok := s.opts.TrustTiers.Methods[req.GetMethod()]; ok {
		minimum = m
	}
	if minimum == 0 {
		return nil
	}
	if t := req.GetTrustTier(); t == 0 || t > minimum {
		return deny(agtp.StatusForbidden, ReasonTrustTierInsufficient,
			fmt.Sprintf("%s requires trust tier %d or better", req.GetMethod(), minimum),
			"min_trust_tier", strconv.Itoa(int(minimum)))
	}
	return nil
}

// checkScopes applies Authority-Scope (core §5.5.3, Appendix C): a claim
// must be covered by the identity document's scopes (262
// scope-claim-invalid); without a claim the request inherits them; the
// endpoint's required scopes must be covered by the effective set (262
// scope-required). The grammar and the wildcard rule are services/agtp's.
func checkScopes(req *policyv1.AuthorizeRequest, resp *policyv1.AuthorizeResponse) *policyv1.Denial {
	// The identity document's scopes and the catalog's required scopes are
	// trusted data; they are compared as tokens, not re-parsed. A malformed
	// declared token cannot equal a well-formed claimed one, so the result
	// is the same.
	declared := toScopes(req.GetAgentScopes())
	effective := declared
	// Without a claim the effective scopes are the declared ones: the
	// response shares the request's list (neither is changed after the
	// decision) instead of copying it for every decision.
	effectiveList := req.GetAgentScopes()
	if req.GetAuthorityScopePresent() || req.GetAuthorityScope() != "" {
		claimed, err := agtp.ParseScopes(req.GetAuthorityScope())
		if err != nil {
			explanation := "the Authority-Scope header is malformed"
			var pe *agtp.ProtocolError
			if errors.As(err, &pe) {
				explanation = pe.Explanation
			}
			return deny(agtp.StatusBadRequest, agtp.ReasonInvalidAuthorityScope, explanation)
		}
		if c, ok := declared.CoversAll(claimed); !ok {
			return deny(agtp.StatusAuthorizationRequired, agtp.ReasonScopeClaimInvalid,
				"the Authority-Scope claim "+strconv.Quote(string(c))+" is not among the agent's declared scopes",
				"scope", string(c))
		}
		effective = claimed
		effectiveList = fromScopes(claimed)
	}
	resp.EffectiveScopes = effectiveList
	for _, r := range req.GetRequiredScopes() {
		if !effective.Covers(agtp.Scope(r)) {
			return deny(agtp.StatusAuthorizationRequired, agtp.ReasonScopeRequired,
				"this endpoint requires the scope "+strconv.Quote(r), "scope", r)
		}
	}
	return nil
}

func toScopes(in []string) agtp.ScopeSet {
	out := make(agtp.ScopeSet, len(in))
	for i, s := range in {
		out[i] = agtp.Scope(s)
	}
	return out
}

func fromScopes(in agtp.ScopeSet) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}

// checkBudget enforces Budget-Limit where the operator declared endpoint
// costs or requires the header (456; core §5.5.5 reserves the header, so
// it is ignored otherwise).
func (s *Server) checkBudget(req *policyv1.AuthorizeRequest) *policyv1.Denial {
	b := s.opts.Budget
	if len(b.Costs) == 0 && len(b.RequiredOnMethods) == 0 {
		return nil
	}
	raw := strings.TrimSpace(req.GetBudgetLimit())
	if raw == "" {
		if slices.Contains(b.RequiredOnMethods, req.GetMethod()) {
			return deny(agtp.StatusBudgetExceeded, ReasonBudgetLimitRequired,
				req.GetMethod()+" requires a Budget-Limit")
		}
		return nil
	}
	limit, err := agtp.ParseBudget(raw)
	if err != nil {
		explanation := "the Budget-Limit header is malformed"
		var pe *agtp.ProtocolError
		if errors.As(err, &pe) {
			explanation = pe.Explanation
		}
		return deny(agtp.StatusBadRequest, agtp.ReasonInvalidBudget, explanation)
	}
	input := &requestInput{raw: req.GetInputJson()}
	for i, c := range b.Costs {
		if !(EndpointLimit{Method: c.Method, Path: c.Path}).matches(req.GetMethod(), req.GetPathTemplate()) {
			continue
		}
		cost := s.costs[i]
		if c.fromBody() {
			var d *policyv1.Denial
			if cost, d = bodyCost(c, input); d != nil {
				return d
			}
			if over, ok := moneyOutsideLimit(limit, cost); ok {
				return deny(agtp.StatusBudgetExceeded, ReasonBudgetExceeded,
					"this request spends "+over.Unit+"="+over.Value+", and the Budget-Limit allows no spend in "+over.Currency,
					"unit", over.Unit, "cost", over.Value)
			}
		}
		if over, ok := limit.Check(cost); !ok {
			return deny(agtp.StatusBudgetExceeded, ReasonBudgetExceeded,
				"this request costs "+over.Unit+"="+over.Value+", more than the Budget-Limit allows",
				"unit", over.Unit, "cost", over.Value)
		}
	}
	return nil
}

// checkZone enforces AGTP-Zone-ID where the operator configured zones (457).
func (s *Server) checkZone(req *policyv1.AuthorizeRequest) *policyv1.Denial {
	z := s.opts.Zone
	zone := strings.TrimSpace(req.GetZoneId())
	switch {
	case zone == "" && z.Required:
		return deny(agtp.StatusZoneViolation, ReasonZoneRequired, "this server requires an AGTP-Zone-ID")
	case zone == "" || len(z.Zones) == 0:
		return nil
	case !slices.Contains(z.Zones, zone):
		return deny(agtp.StatusZoneViolation, ReasonZoneViolation,
			"this server is outside the request's zone", "zone", zone)
	}
	return nil
}

// checkMerchant verifies the PURCHASE counterparty headers against this
// server's merchant identity (core §9, 458): both present, the Merchant-ID
// is ours, the fingerprint is our current manifest's, and we are active.
// A verified request carries the merchant in resp for its
// Attribution-Record.
func (s *Server) checkMerchant(req *policyv1.AuthorizeRequest, resp *policyv1.AuthorizeResponse) *policyv1.Denial {
	m := s.opts.Merchant
	if !slices.Contains(m.Methods, req.GetMethod()) {
		return nil
	}
	id, fp := strings.TrimSpace(req.GetMerchantId()), strings.TrimSpace(req.GetMerchantManifestFingerprint())
	why := ""
	switch {
	case id == "" || fp == "":
		why = "Merchant-ID and Merchant-Manifest-Fingerprint are required"
	case m.MerchantID == "":
		why = "this server has no merchant identity to verify against"
	case id != m.MerchantID:
		why = "Merchant-ID does not name this server"
	case !strings.EqualFold(fp, m.ManifestFingerprint):
		why = "Merchant-Manifest-Fingerprint does not match the current Merchant Manifest Document"
	case !strings.EqualFold(m.Status, "active"):
		why = "the merchant is " + m.Status + ", not active"
	default:
		resp.MerchantId, resp.MerchantFingerprint = m.MerchantID, m.ManifestFingerprint
		return nil
	}
	return deny(agtp.StatusCounterpartyUnverified, ReasonCounterpartyUnverified, why+"; re-run counterparty verification")
}

// checkIdempotencyKey validates the Idempotency-Key and the policy that
// requires one. Anonymous requests have no (Agent-ID, key) scope, so their
// key is ignored and no key is required of them.
func (s *Server) checkIdempotencyKey(req *policyv1.AuthorizeRequest) *policyv1.Denial {
	if req.GetAgentId() == "" {
		return nil
	}
	key := req.GetIdempotencyKey()
	if key == "" {
		if req.GetIdempotencyKeyRequired() || (s.opts.Idempotency.RequireForNonIdempotent && !req.GetEndpointIdempotent()) {
			return deny(agtp.StatusBadRequest, ReasonIdempotencyKeyRequired,
				"this endpoint is not idempotent and requires an Idempotency-Key")
		}
		return nil
	}
	if !idempotency.ValidKey(key) {
		return deny(agtp.StatusBadRequest, ReasonInvalidIdempotencyKey,
			"an Idempotency-Key must be 1-255 printable ASCII characters")
	}
	return nil
}

// tokenBinding checks what a verified token says about the caller
// (docs/identity.md, "Proven callers"): a certificate-bound token is used
// only with its certificate (RFC 8705 §3), and a token that proves the
// caller must name the caller's Agent-ID.
func tokenBinding(req *policyv1.AuthorizeRequest, p oauth.Principal) *policyv1.Denial {
	if p.CertThumbprint != "" && p.CertThumbprint != req.GetClientCertThumbprint() {
		return deny(agtp.StatusUnauthorized, agtp.ReasonAgentUnauthenticated,
			"the credential is bound to a client certificate (cnf) that this connection did not present")
	}
	if req.GetTokenProvesAgent() && p.AgentID != req.GetAgentId() {
		return deny(agtp.StatusUnauthorized, agtp.ReasonAgentUnauthenticated,
			"the credential names another agent than the Agent-ID header")
	}
	return nil
}
