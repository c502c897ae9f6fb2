// Package callerpolicy holds the lifecycle rules the front door applies in
// process to a cached AgentRecord, so that identity costs no hop per
// request:
//
//   - Caller: the agent named by the request's Agent-ID header
//     (docs/decisions.md#D-agent-id-is-the-caller, #D-caller-states):
//     unknown, or registered but never activated, gets 401
//     agent-unauthenticated with the lifecycle state in the body; retired
//     gets 410; suspended 503; deprecated is served.
//   - Target: an agent a request addresses, e.g. /agents/{name}
//     (core §6.1.8.1 step 3): unknown 404; suspended 503 and retired 410,
//     both with the state in the body; deprecated is served with the
//     deprecation signal.
//
// 410 has no gRPC code, which is why these rules return AGTP statuses
// directly instead of going through grpcerr.
package callerpolicy

import (
	"strconv"
	"strings"
	"time"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Reason tokens of refusals.
const (
	ReasonAgentUnauthenticated = agtp.ReasonAgentUnauthenticated
	ReasonAgentSuspended       = "agent-suspended"
	ReasonAgentRetired         = "agent-retired"
	ReasonAgentNotFound        = "agent-not-found"
	ReasonAgentNotActivated    = "agent-not-activated"
	ReasonScopeClaimInvalid    = agtp.ReasonScopeClaimInvalid
)

// Lifecycle state names, lowercase on the wire (core App. A item 10).
// Pending is this suite's name for a registered Genesis that has not been
// activated yet; it never appears in an identity document.
const (
	StateActive     = "active"
	StateSuspended  = "suspended"
	StateRetired    = "retired"
	StateDeprecated = "deprecated"
	StatePending    = "pending"
)

// StateName returns the wire name of a status.
func StateName(s identityv1.AgentStatus) string {
	switch s {
	case identityv1.AgentStatus_AGENT_STATUS_ACTIVE:
		return StateActive
	case identityv1.AgentStatus_AGENT_STATUS_SUSPENDED:
		return StateSuspended
	case identityv1.AgentStatus_AGENT_STATUS_RETIRED:
		return StateRetired
	case identityv1.AgentStatus_AGENT_STATUS_DEPRECATED:
		return StateDeprecated
	}
	return StatePending
}

// ParseState reads a state name case-insensitively (the drafts' examples
// use "Active", docs/decisions.md#D-lowercase-states).
func ParseState(s string) (identityv1.AgentStatus, bool) {
	switch strings.ToLower(s) {
	case StateActive:
		return identityv1.AgentStatus_AGENT_STATUS_ACTIVE, true
	case StateSuspended:
		return identityv1.AgentStatus_AGENT_STATUS_SUSPENDED, true
	case StateRetired:
		return identityv1.AgentStatus_AGENT_STATUS_RETIRED, true
	case StateDeprecated:
		return identityv1.AgentStatus_AGENT_STATUS_DEPRECATED, true
	case StatePending:
		return identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED, true
	}
	return identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED, false
}

// Decision is the outcome of a lifecycle check.
type Decision struct {
	// Allowed is true when the request may proceed.
	Allowed bool
	// Status is the AGTP status to answer with when not Allowed.
	Status      int
	Reason      string
	Explanation string
	// State is the agent's lifecycle state ("" when unknown).
	State string
	// RevokedAt is set for retired agents.
	RevokedAt time.Time
	// Deprecated is set for a deprecated agent that is still served; the
	// front door surfaces it (core §7.2.18 leaves the mechanism open).
	Deprecated       bool
	SuccessorAgentID string
}

// Fields returns the members an error body carries besides status,
// reason and explanation: the lifecycle state, and for a retired agent
// the revocation time (core §6.1.8.1 step 3).
func (d Decision) Fields() map[string]any {
	f := map[string]any{}
	if d.State != "" {
		f["lifecycle_state"] = d.State
	}
	if !d.RevokedAt.IsZero() {
		f["revoked_at"] = d.RevokedAt.UTC().Format(time.RFC3339)
	}
	if d.SuccessorAgentID != "" {
		f["successor_agent_id"] = d.SuccessorAgentID
	}
	return f
}

func allowed(rec *identityv1.AgentRecord) Decision {
	d := Decision{Allowed: true, State: StateName(rec.GetStatus())}
	if rec.GetStatus() == identityv1.AgentStatus_AGENT_STATUS_DEPRECATED {
		d.Deprecated = true
		d.SuccessorAgentID = rec.GetSuccessorAgentId()
	}
	return d
}

func suspended(rec *identityv1.AgentRecord) Decision {
	return Decision{Status: agtp.StatusUnavailable, Reason: ReasonAgentSuspended, State: StateSuspended,
		Explanation: "agent " + rec.GetAgentId() + " is suspended"}
}

func retired(rec *identityv1.AgentRecord) Decision {
	return Decision{Status: agtp.StatusGone, Reason: ReasonAgentRetired, State: StateRetired,
		RevokedAt:   rec.GetRevokedAt().AsTime(),
		Explanation: "agent " + rec.GetAgentId() + " was permanently retired by REVOKE"}
}

// Caller applies the rules for the agent named by the Agent-ID header.
// rec is nil when the ID is not registered.
func Caller(rec *identityv1.AgentRecord) Decision {
	if rec == nil {
		return Decision{Status: agtp.StatusUnauthorized, Reason: ReasonAgentUnauthenticated,
			Explanation: "the Agent-ID is not a registered canonical Agent-ID"}
	}
	switch rec.GetStatus() {
	case identityv1.AgentStatus_AGENT_STATUS_ACTIVE, identityv1.AgentStatus_AGENT_STATUS_DEPRECATED:
		return allowed(rec)
	case identityv1.AgentStatus_AGENT_STATUS_SUSPENDED:
		return suspended(rec)
	case identityv1.AgentStatus_AGENT_STATUS_RETIRED:
		return retired(rec)
	}
	return Decision{Status: agtp.StatusUnauthorized, Reason: ReasonAgentUnauthenticated, State: StateName(rec.GetStatus()),
		Explanation: "the Agent-ID does not resolve to an active Agent Genesis"}
}

// Target applies the rules for an agent a request addresses (Form 1/3/4
// resolution). rec is nil when no such agent is registered.
func Target(rec *identityv1.AgentRecord) Decision {
	if rec == nil {
		return Decision{Status: agtp.StatusNotFound, Reason: ReasonAgentNotFound, Explanation: "no such agent"}
	}
	switch rec.GetStatus() {
	case identityv1.AgentStatus_AGENT_STATUS_ACTIVE, identityv1.AgentStatus_AGENT_STATUS_DEPRECATED:
		return allowed(rec)
	case identityv1.AgentStatus_AGENT_STATUS_SUSPENDED:
		return suspended(rec)
	case identityv1.AgentStatus_AGENT_STATUS_RETIRED:
		return retired(rec)
	}
	return Decision{Status: agtp.StatusNotFound, Reason: ReasonAgentNotActivated, State: StatePending,
		Explanation: "agent " + rec.GetAgentId() + " is registered but not activated"}
}

// ClaimedScopes checks an Authority-Scope claim against the scopes the
// agent's identity document declares: every claimed token must be covered
// by a declared one, or the answer is 262 scope-claim-invalid
// (core §5.5.3, docs/decisions.md#D-scope-262).
func ClaimedScopes(rec *identityv1.AgentRecord, claimed agtp.ScopeSet) Decision {
	declared := make(agtp.ScopeSet, 0, len(rec.GetScopes()))
	for _, s := range rec.GetScopes() {
		declared = append(declared, agtp.Scope(s))
	}
	if c, ok := declared.CoversAll(claimed); !ok {
		return Decision{Status: agtp.StatusAuthorizationRequired, Reason: ReasonScopeClaimInvalid, State: StateName(rec.GetStatus()),
			Explanation: "claimed scope " + strconv.Quote(string(c)) + " is not among the scopes the agent's identity document declares"}
	}
	return Decision{Allowed: true, State: StateName(rec.GetStatus())}
}

// Trust is the data behind the Trust-Tier, Verification-Path and
// Trust-Warning response headers (core §5.5.4). Empty strings mean the
// header is omitted.
type Trust struct {
	Tier             string
	VerificationPath string
	Warning          string
}

// TrustHeaders returns the trust header values for an agent. The warning
// is only ever sent for Tier 2 (core §5.5.4; assertion 46).
func TrustHeaders(rec *identityv1.AgentRecord) Trust {
	var t Trust
	if tier := rec.GetTrustTier(); tier >= 1 && tier <= 3 {
		t.Tier = strconv.Itoa(int(tier))
	}
	t.VerificationPath = rec.GetVerificationPath()
	if rec.GetTrustTier() == 2 {
		t.Warning = rec.GetTrustWarning()
	}
	return t
}
