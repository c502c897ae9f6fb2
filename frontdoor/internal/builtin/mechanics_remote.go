package builtin

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"github.com/agtpsuite/agtp/services/textcut"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/outbound"
)

// The mechanics verbs' reach beyond this server (docs/mechanics.md):
// escalations pushed to a webhook bound as an external service,
// notifications relayed by other servers, and DELEGATE hops run on the
// sub-agent's own host over AGTP.

// Outbound is how the mechanics verbs reach destinations their callers
// name (docs/mechanics.md, "Outbound destinations"): Policy is the
// allowlist and address check shared with policysvc; Webhooks pushes
// escalations, an external_service executor of its own whose dialer
// refuses internal addresses and which resolves no ${VAR} placeholders
// (unlike the operator's bindings, it calls URLs callers chose). Peers
// (Deps) dials other AGTP hosts through the same Policy.
type Outbound struct {
	Policy   *outbound.Policy
	Webhooks *upstream.Executor
}

// checkPeer refuses a DELEGATE to a host this server may not dial on a
// caller's word: 403 recipient-not-allowed, before anything is signed
// or stored.
func (bi *Registry) checkPeer(ctx context.Context, call *Call, addr string) *agtp.Response {
	var pol *outbound.Policy
	if bi.Outbound != nil {
		pol = bi.Outbound.Policy
	}
	if err := pol.CheckPeer(addr); err != nil {
		bi.Log.WarnContext(ctx, "outbound destination refused", "caller", call.AgentID, "destination", addr, "error", err)
		return call.Fail(agtp.StatusForbidden, outbound.Reason, err.Error(), nil)
	}
	return nil
}

// Routing statuses of an escalation (policysvc tasks).
const (
	routingListed    = "listed"
	routingPending   = "pending"
	routingDelivered = "delivered"
	routingFailed    = "failed"
)

// headerNotificationID carries the notification_id of a NOTIFY another
// server relays to an agent hosted here; the receiver de-duplicates on it.
const headerNotificationID = "Notification-ID"

// escalationPushTimeout bounds one attempt to push an escalation to its
// webhook; escalationPushBudget all of them.
const (
	escalationPushTimeout = 5.0
	escalationPushBudget  = 10 * time.Second
)

// answerReserve is kept from the request deadline for what follows a call
// to another server (recording, signing the Attribution-Record), so that
// a slow peer never costs the answer.
const answerReserve = 2 * time.Second

// outboundContext bounds a call to another server by limit and by the
// request deadline less answerReserve; ok is false when no time is left.
func outboundContext(parent context.Context, limit time.Duration) (ctx context.Context, cancel context.CancelFunc, ok bool) {
	if dl, has := parent.Deadline(); has {
		limit = min(limit, time.Until(dl)-answerReserve)
	}
	if limit <= 0 {
		return parent, func() {}, false
	}
	ctx, cancel = context.WithTimeout(parent, limit)
	return ctx, cancel, true
}

// pushEscalation sends an escalation to its webhook through the
// external_service executor (docs/bindings.md): a binding made for the
// recipient, POST, idempotent so that connection errors and 502-504 are
// retried, with the executor's breaker, timeouts, roots and tracing. The
// escalation is sent whole and unchanged (core §10.4.6). The outcome is
// recorded on the escalation; it returns the routing status.
func (bi *Registry) pushEscalation(ctx context.Context, call *Call, e *taskv1.Escalation) string {
	if bi.Outbound == nil || bi.Outbound.Webhooks == nil {
		return escalationRouting(e)
	}
	input, err := json.Marshal(bi.escalationPayload(e))
	if err != nil {
		return escalationRouting(e)
	}
	// policysvc matched the recipient against the allowlist before it
	// stored the escalation (it alone knows its configured default);
	// here the address is checked, as written now and, by the dialer,
	// as resolved.
	if err := bi.Outbound.Policy.CheckAddress(webhookHostPort(e.GetRoutedTo())); err != nil {
		bi.Log.WarnContext(ctx, "escalation push refused: destination not allowed; it stays listed", "escalation_id", e.GetEscalationId(), "error", err)
		return bi.recordRouting(ctx, call, e, routingFailed, outbound.Reason)
	}
	timeout, idempotent := escalationPushTimeout, true
	def := &endpoint.Definition{
		Method: "ESCALATE", Path: "/", Semantic: endpoint.Semantic{IsIdempotent: &idempotent},
		Handler: endpoint.Handler{
			Type: endpoint.HandlerExternalService, URL: e.GetRoutedTo(), Method: "POST", TimeoutSeconds: &timeout,
			// The receiver de-duplicates retried pushes on these.
			Headers: map[string]string{"Escalation-ID": e.GetEscalationId(), "Idempotency-Key": e.GetEscalationId()},
		},
	}
	pctx, cancel, ok := outboundContext(ctx, escalationPushBudget)
	defer cancel()
	if !ok {
		return escalationRouting(e) // pushed by the next ESCALATE
	}
	status, detail := routingDelivered, ""
	if _, err := bi.Outbound.Webhooks.Call(pctx, def, &handler.Call{Method: "ESCALATE", Path: "/", Input: input}); err != nil {
		status, detail = routingFailed, "push failed"
		var he *handler.Error
		if errors.As(err, &he) {
			detail = he.Name
		}
		bi.Log.WarnContext(ctx, "escalation push failed; it stays listed for the admin API", "escalation_id", e.GetEscalationId(), "error", err)
	}
	return bi.recordRouting(ctx, call, e, status, detail)
}

// recordRouting stores how an escalation's push went, even if the caller
// has gone, and returns the status.
func (bi *Registry) recordRouting(ctx context.Context, call *Call, e *taskv1.Escalation, status, detail string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := bi.Tasks.RecordEscalationRouting(ctx, &taskv1.RecordEscalationRoutingRequest{EscalationId: e.GetEscalationId(),
		Routing: enumname.Value[taskv1.EscalationRouting](status), Detail: detail}); err != nil {
		bi.Log.WarnContext(ctx, "escalation routing not recorded", "escalation_id", e.GetEscalationId(), "error", err)
	}
	return status
}

// webhookHostPort is the host:port a webhook URL dials, or "" when it
// has none.
func webhookHostPort(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Hostname() == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// escalationStatus names an escalation's state from the enum, or from
// the first release's string.
func escalationStatus(e *taskv1.Escalation) string {
	//lint:ignore SA1019 the first release's policysvc sends the state only as a string
	return enumname.Prefer(e.GetState(), e.GetStatus())
}

// escalationPriority names an escalation's priority from the enum, or
// from the first release's string.
func escalationPriority(e *taskv1.Escalation) string {
	//lint:ignore SA1019 the first release's policysvc sends the priority only as a string
	return enumname.Prefer(e.GetPriorityLevel(), e.GetPriority())
}

// escalationRouting names how an escalation reached its recipient from
// the enum, or from the first release's string.
func escalationRouting(e *taskv1.Escalation) string {
	//lint:ignore SA1019 the first release's policysvc sends the routing only as a string
	return enumname.Prefer(e.GetRouting(), e.GetRoutingStatus())
}

// escalationPayload is what a recipient is sent about an escalation.
func (bi *Registry) escalationPayload(e *taskv1.Escalation) map[string]any {
	payload := map[string]any{
		"type": "escalation", "escalation_id": e.GetEscalationId(), "task_id": e.GetTaskId(), "owner_agent_id": e.GetOwnerAgentId(),
		"reason": e.GetReason(), "priority": escalationPriority(e), "status": escalationStatus(e), "created_at": timeString(e.GetCreatedAt()),
		"estimated_review_by": timeString(e.GetEstimatedReviewBy()), "server_id": bi.ServerID,
	}
	//lint:ignore SA1019 the first release's policysvc sends the context only as bytes
	if ctxJSON, err := jsondoc.PreferValue(e.GetContext(), e.GetContextJson()); err == nil && json.Valid(ctxJSON) {
		payload["context"] = json.RawMessage(ctxJSON)
	}
	if d := timeString(e.GetDeadline()); d != "" {
		payload["deadline"] = d
	}
	return payload
}

// escalationToInbox routes an escalation to an agent hosted here: a
// notification in its inbox, from the escalating agent, whose id is the
// escalation's so that a repeated ESCALATE does not deliver it twice. The
// recipient resolves it with CONFIRM here. Other recipients (the admin
// API, agents elsewhere, who CONFIRM on this server) stay listed.
func (bi *Registry) escalationToInbox(ctx context.Context, call *Call, e *taskv1.Escalation) string {
	rcpt := e.GetRoutedTo()
	if rest, ok := strings.CutPrefix(rcpt, "agtp://"); ok && agtp.IsCanonicalID(rest) {
		rcpt = rest
	}
	if !agtp.IsCanonicalID(rcpt) {
		return routingListed
	}
	if rec, err := bi.Agents.Lookup(ctx, rcpt); err != nil || rec == nil {
		return routingListed
	}
	b, err := json.Marshal(bi.escalationPayload(e))
	if err != nil {
		return routingListed
	}
	content, err := jsondoc.Value(b)
	if err != nil {
		return routingListed
	}
	urgency := map[string]taskv1.NotificationUrgency{
		"urgent": taskv1.NotificationUrgency_NOTIFICATION_URGENCY_CRITICAL,
		"low":    taskv1.NotificationUrgency_NOTIFICATION_URGENCY_BACKGROUND,
	}[escalationPriority(e)]
	if _, err := bi.Tasks.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: e.GetOwnerAgentId(), Recipient: rcpt, Content: content,
		UrgencyLevel: urgency, NotificationId: e.GetEscalationId()}); err != nil {
		bi.Log.WarnContext(ctx, "escalation not put in the recipient's inbox; it stays listed", "escalation_id", e.GetEscalationId(), "error", err)
		return routingListed
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := bi.Tasks.RecordEscalationRouting(ctx, &taskv1.RecordEscalationRoutingRequest{EscalationId: e.GetEscalationId(),
		Routing: taskv1.EscalationRouting_ESCALATION_ROUTING_DELIVERED, Detail: "inbox"}); err != nil {
		bi.Log.WarnContext(ctx, "escalation routing not recorded", "escalation_id", e.GetEscalationId(), "error", err)
	}
	return routingDelivered
}

// redactURL shows a webhook without its query and credentials, which may
// carry the operator's tokens; other recipients are returned as they are.
func redactURL(s string) string {
	if !strings.HasPrefix(s, "https://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "https://"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// checkLocalRecipient answers 404 for a NOTIFY to an Agent-ID (or
// agtp://<agent-id>) that is not an active agent hosted here: such a
// recipient's inbox is on this server (core §4.2 Errors: 404 for an
// unknown recipient).
func (bi *Registry) checkLocalRecipient(ctx context.Context, call *Call, rcpt string) *agtp.Response {
	id := rcpt
	if !agtp.IsCanonicalID(id) {
		u, err := agtp.ParseURI(rcpt)
		if err != nil || u.Form != agtp.FormCanonical {
			return nil // policysvc judges the other forms
		}
		id = u.AgentID
	}
	rec, err := bi.Agents.Lookup(ctx, id)
	if err != nil {
		return bi.dependencyFailure(ctx, call, "identitysvc", err)
	}
	if rec == nil || (rec.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_ACTIVE && rec.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_DEPRECATED) {
		return call.Fail(agtp.StatusNotFound, "recipient-not-found", "no active agent "+id+" is hosted on this server; name another host as agtp://<agent-id>@host", nil)
	}
	return nil
}

// newHopSessionID is the Session-ID of the AGTP session a DELEGATE hop
// opens on the sub-agent's host: 128 random bits.
func newHopSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "dlg-" + base64.RawURLEncoding.EncodeToString(b[:])
}

// maxRemoteResults bounds the results taken from a sub-agent's host.
const maxRemoteResults = maxDelegatedCalls

// runRemoteDelegated runs a verified DELEGATE hop on the sub-agent's host
// at addr: a DELEGATE over AGTP, as the delegator, with the same task,
// narrowed scope and token, in a new session. That host verifies the
// token against the delegator's Genesis itself, signs its own hop record
// and runs the task as the sub-agent with the narrowed scope. It returns
// the calls' results, what the host answered about the hop, and either
// what failed (550) or the link the host could not verify (551).
func (bi *Registry) runRemoteDelegated(ctx context.Context, call *Call, addr, delegatee string, scopes []string, taskID string, task []byte, token string) (results []map[string]any, remote map[string]any, failed, broken string) {
	if bi.Peers == nil {
		return nil, nil, "this server has no AGTP client for other hosts", ""
	}
	params := map[string]any{"target_agent_id": delegatee, "task": json.RawMessage(task), "authority_scope": scopes, "delegation_token": token}
	if taskID != "" {
		params["task_id"] = taskID
	}
	body, err := json.Marshal(map[string]any{"method": "DELEGATE", "parameters": params})
	if err != nil {
		return nil, nil, "the task could not be encoded", ""
	}
	req, err := agtp.NewRequest("DELEGATE", "/")
	if err != nil {
		return nil, nil, err.Error(), ""
	}
	session := newHopSessionID()
	req.Header.Set(agtp.HeaderAgentID, call.AgentID)
	req.Header.Set(agtp.HeaderSessionID, session)
	if taskID != "" {
		req.Header.Set(agtp.HeaderTaskID, taskID)
	}
	req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	req.Body = body
	dctx, cancel, ok := outboundContext(ctx, time.Hour)
	defer cancel()
	if !ok {
		return nil, map[string]any{"host": addr}, "no time was left to reach the sub-agent's host", ""
	}
	resp, err := bi.Peers.Do(dctx, req, addr)
	if err != nil {
		bi.Log.WarnContext(ctx, "sub-agent host unreachable", "host", addr, "delegatee", delegatee, "error", err)
		why := "could not be reached"
		var oe *outbound.Error
		if errors.As(err, &oe) { // the name resolved to an internal address
			why = "may not be dialled: " + oe.Why
		}
		return nil, map[string]any{"host": addr, "session_id": session}, "the sub-agent's host " + addr + " " + why, ""
	}
	var answer struct {
		Reason       string            `json:"reason"`
		Explanation  string            `json:"explanation"`
		DelegationID string            `json:"delegation_id"`
		AuditID      string            `json:"audit_id"`
		Status       string            `json:"status"`
		FailingLink  string            `json:"failing_link"`
		Results      []json.RawMessage `json:"results"`
	}
	_ = json.Unmarshal(resp.Body, &answer)
	remote = map[string]any{
		"host": addr, "session_id": session, "status": resp.Status, "server_id": resp.Header.Get(agtp.HeaderServerID),
		"delegation_id": answer.DelegationID, "audit_id": answer.AuditID, "response_audit_id": resp.Header.Get(agtp.HeaderAuditID),
	}
	for i, r := range answer.Results {
		if i == maxRemoteResults {
			break
		}
		var m map[string]any
		if json.Unmarshal(r, &m) == nil {
			results = append(results, m)
		}
	}
	switch {
	case resp.Status == agtp.StatusOK:
		return results, remote, "", ""
	case resp.Status == agtp.StatusAuthorityChainBroken:
		link := answer.FailingLink
		if link == "" {
			link = "unverified"
		}
		return results, remote, "", "at " + addr + ": " + textcut.Cut(link, 256)
	case resp.Status == agtp.StatusDelegationFailure:
		return results, remote, "at " + addr + ": " + textcut.Cut(answer.Explanation, 256), ""
	}
	return results, remote, "the sub-agent's host " + addr + " answered " + strconv.Itoa(resp.Status) + " " + textcut.Cut(answer.Reason, 64) + ": " + textcut.Cut(answer.Explanation, 256), ""
}
