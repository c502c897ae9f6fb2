package builtin

import (
	"context"
	"encoding/json"
	"github.com/agtpsuite/agtp/services/textcut"
	"slices"
	"time"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// MONITOR (standard methods §8.3, §10.5) of an agent's lifecycle: the
// front door checks the target, the callback's authority and its
// reachability, then policysvc stores the subscription and delivers each
// event as a NOTIFY through its notify queue (docs/frontdoor.md,
// docs/mechanics.md).

// Reasons of the MONITOR built-in's own refusals (policysvc words the
// store's: monitor-limit-reached, monitor-ttl-invalid, monitor-not-found).
const (
	ReasonMonitorTargetInvalid  = "monitor-target-invalid"
	ReasonMonitorEventsInvalid  = "monitor-events-invalid"
	ReasonCallbackInvalid       = "callback-invalid"
	ReasonCallbackNotAuthorized = "callback-not-authorized"
	ReasonCallbackUnreachable   = "callback-unreachable"
	ReasonSubscriptionIDNeeded  = "subscription-id-required"
)

// monitorEventNames are the lifecycle events a subscription may name;
// "*" alone names them all.
var monitorEventNames = []string{"activated", "suspended", "revoked", "deprecated", "reinstated"}

// eventTypeMonitorCancel is the NOTIFY event_type that ends a subscription.
const eventTypeMonitorCancel = "monitor_cancel"

// callbackProbeTimeout bounds the reachability check of a remote callback:
// a TLS handshake and one AGTP exchange.
const callbackProbeTimeout = 3 * time.Second

// monitorEvents reads the events parameter: a list, or one name.
func monitorEvents(ctx context.Context, call *Call, params map[string]any) ([]string, *agtp.Response) {
	bad := func(why string) *agtp.Response {
		return call.Fail(agtp.StatusBadRequest, ReasonMonitorEventsInvalid, why, nil)
	}
	var events []string
	switch v := params["events"].(type) {
	case string:
		events = []string{v}
	case []any:
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, bad("events is a list of lifecycle event names")
			}
			events = append(events, s)
		}
	default:
		return nil, bad(`events is required: a list of activated, suspended, revoked, deprecated, reinstated, or ["*"]`)
	}
	if len(events) == 0 || len(events) > len(monitorEventNames) {
		return nil, bad("events names 1 to 5 lifecycle events, or \"*\"")
	}
	for i, e := range events {
		switch {
		case e == "*" && len(events) > 1:
			return nil, bad(`"*" stands alone in events`)
		case e != "*" && !slices.Contains(monitorEventNames, e):
			return nil, bad("event " + truncateReason(e) + " is not a lifecycle event (activated, suspended, revoked, deprecated, reinstated, or \"*\"); this server monitors agents' lifecycles only")
		case slices.Contains(events[:i], e):
			return nil, bad("event " + e + " is named twice")
		}
	}
	return events, nil
}

func truncateReason(s string) string {
	b, _ := json.Marshal(textcut.Cut(s, 64))
	return string(b)
}

// monitor serves the MONITOR built-in. Nothing is stored on any refusal.
func (bi *Registry) monitor(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if r := bi.mechanicsReady(ctx, call, "MONITOR"); r != nil {
		return r
	}
	target, addr, ok := delegateeOf(str(params, "target"))
	if !ok || addr != "" {
		return call.Fail(agtp.StatusBadRequest, ReasonMonitorTargetInvalid,
			"target must name an agent registered on this server: its Agent-ID or agtp://<agent-id>; this server monitors agents' lifecycles only", nil)
	}
	events, bad := monitorEvents(ctx, call, params)
	if bad != nil {
		return bad
	}
	ttl, ok := intParam(params, "ttl", 1, 7*86400)
	if !ok {
		return call.Fail(agtp.StatusBadRequest, "monitor-ttl-invalid", "ttl is a number of seconds from 1 to 604800 (7 days)", nil)
	}
	callback := str(params, "callback")
	cbAgent, cbAddr, ok := delegateeOf(callback)
	if !ok || agtp.IsCanonicalID(callback) {
		return call.Fail(agtp.StatusBadRequest, ReasonCallbackInvalid,
			"callback must be an AGTP endpoint naming the receiving agent: agtp://<agent-id> or agtp://<agent-id>@host[:port]", nil)
	}
	// §10.5: the requester must have authority to receive at the
	// callback. Only its own inbox qualifies: naming another agent's
	// would have this server write into it on the caller's word.
	if cbAgent != call.AgentID {
		bi.Log.WarnContext(ctx, "monitor callback refused: another agent's endpoint", "caller", call.AgentID, "callback_agent", cbAgent)
		return call.Fail(agtp.StatusForbidden, ReasonCallbackNotAuthorized,
			"the callback must name the requesting agent itself (standard methods §10.5): agtp://"+call.AgentID+"[@host[:port]]", nil)
	}
	rec, err := bi.Agents.Lookup(ctx, target)
	if err != nil {
		return bi.dependencyFailure(ctx, call, "identitysvc", err)
	}
	if rec == nil {
		return call.Fail(agtp.StatusNotFound, "agent-not-found", "no agent "+target+" is registered on this server", nil)
	}
	if resp := bi.checkCallbackReachable(ctx, call, cbAddr); resp != nil {
		return resp
	}
	r, err := bi.Tasks.Monitor(ctx, &taskv1.MonitorRequest{
		CallerAgentId: call.AgentID, TargetAgentId: target, Events: events, Callback: callback, TtlSeconds: int64(ttl),
		TargetAgentStatus: rec.GetStatus(), TargetRevision: rec.GetRevision(),
	})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	s := r.GetSubscription()
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{
		"subscription_id": s.GetSubscriptionId(), "target": s.GetTargetAgentId(), "events": s.GetEvents(),
		"callback": s.GetCallback(), "created_at": timeString(s.GetCreatedAt()), "expires_at": timeString(s.GetExpiresAt()),
		"status": "active",
	})
}

// checkCallbackReachable is §10.5's reachability check. A local callback
// is the caller's own inbox, and the caller is active (it got this far).
// A remote one must be on the peers allowlist and answer an AGTP exchange
// over TLS within callbackProbeTimeout.
func (bi *Registry) checkCallbackReachable(ctx context.Context, call *Call, addr string) *agtp.Response {
	if addr == "" {
		rec, err := bi.Agents.Lookup(ctx, call.AgentID)
		if err != nil {
			return bi.dependencyFailure(ctx, call, "identitysvc", err)
		}
		if rec == nil || rec.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_ACTIVE && rec.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_DEPRECATED {
			return call.Fail(agtp.StatusBadRequest, ReasonCallbackUnreachable, "the callback's agent is not an active agent hosted on this server", nil)
		}
		return nil
	}
	if resp := bi.checkPeer(ctx, call, addr); resp != nil {
		return resp
	}
	if bi.Peers == nil {
		return call.Fail(agtp.StatusBadRequest, ReasonCallbackUnreachable, "this server does not reach other AGTP hosts; name agtp://"+call.AgentID, nil)
	}
	req, err := agtp.NewRequest("DISCOVER", "/")
	if err != nil {
		return call.Fail(agtp.StatusServerError, "internal", "the probe could not be built", nil)
	}
	ctx, cancel := context.WithTimeout(ctx, callbackProbeTimeout)
	defer cancel()
	if _, err := bi.Peers.Do(ctx, req, addr); err != nil {
		bi.Log.InfoContext(ctx, "monitor callback unreachable", "caller", call.AgentID, "host", addr, "error", err)
		return call.Fail(agtp.StatusBadRequest, ReasonCallbackUnreachable, "the callback's host "+addr+" did not answer over AGTP within 3 s", nil)
	}
	return nil
}

// monitorCancel serves a NOTIFY whose content has event_type
// monitor_cancel: it ends one of the caller's subscriptions (another
// agent's is not found) and delivers nothing.
func (bi *Registry) monitorCancel(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	content, _ := params["content"].(map[string]any)
	id := str(content, "subscription_id")
	if id == "" {
		return call.Fail(agtp.StatusBadRequest, ReasonSubscriptionIDNeeded, "a monitor_cancel NOTIFY names the subscription_id MONITOR answered", nil)
	}
	r, err := bi.Tasks.CancelMonitor(ctx, &taskv1.CancelMonitorRequest{CallerAgentId: call.AgentID, SubscriptionId: id})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	s := r.GetSubscription()
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{
		"subscription_id": s.GetSubscriptionId(), "target": s.GetTargetAgentId(), "status": "cancelled", "event_type": eventTypeMonitorCancel,
	})
}

// isMonitorCancel says whether a NOTIFY is a monitor_cancel: its content
// is an object with that event_type (NOTIFY's parameters are recipient,
// content, urgency, delivery_guarantee and expiry; the event type is the
// content's). The event type is reserved: such a NOTIFY is never
// delivered.
func isMonitorCancel(params map[string]any) bool {
	content, ok := params["content"].(map[string]any)
	return ok && str(content, "event_type") == eventTypeMonitorCancel
}
