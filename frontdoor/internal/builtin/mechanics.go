package builtin

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/agtpsuite/agtp/services/textcut"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/jcs"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// The mechanics verbs (core §7.2.9–§7.2.13, docs/mechanics.md): task state
// lives in policysvc's TaskService; attestations and delegation hops are
// signed records in auditsvc.

// Audit streams of the mechanics records.
const (
	confirmStream  = "confirm"
	delegateStream = "delegate"
)

func (bi *Registry) mechanicsReady(ctx context.Context, call *Call, method string) *agtp.Response {
	if call.AgentID == "" {
		return call.Fail(agtp.StatusUnauthorized, "agent-unauthenticated", method+" needs Agent-ID", nil)
	}
	if bi.Tasks == nil {
		return call.Fail(agtp.StatusNotImplemented, "builtin-unsupported", method+" needs the task service, which this front door is not wired to", nil)
	}
	return nil
}

// escalate runs ESCALATE (core §7.2.10): the task pauses until a CONFIRM
// of the escalation resolves it.
func (bi *Registry) escalate(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if r := bi.mechanicsReady(ctx, call, "ESCALATE"); r != nil {
		return r
	}
	deadline, bad := rfc3339(ctx, call, params, "deadline")
	if bad != nil {
		return bad
	}
	priority, bad := enumParam[taskv1.EscalationPriority](call, "priority")
	if bad != nil {
		return bad
	}
	r, err := bi.Tasks.Escalate(ctx, &taskv1.EscalateRequest{
		CallerAgentId: call.AgentID, TaskId: str(params, "task_id"), Reason: str(params, "reason"),
		Context: valueParam(params, "context"), PriorityLevel: priority,
		Recipient: str(params, "recipient"), Deadline: deadline,
	})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	e := r.GetEscalation()
	routing := escalationRouting(e)
	switch {
	case routing == routingPending || routing == routingFailed:
		// A webhook recipient: pushed now, and again on a repeated
		// ESCALATE until it is delivered. The escalation stays listed
		// for the admin API meanwhile, so a failed push drops nothing.
		routing = bi.pushEscalation(ctx, call, e)
	case routing == routingListed && escalationStatus(e) == "pending_review":
		routing = bi.escalationToInbox(ctx, call, e)
	}
	return jsonResponse(call, agtp.StatusAccepted, agtp.MediaTypeJSON, map[string]any{
		"escalation_id":       e.GetEscalationId(),
		"task_id":             e.GetTaskId(),
		"routed_to":           redactURL(e.GetRoutedTo()),
		"routing":             routing,
		"status":              escalationStatus(e),
		"task_paused":         true,
		"priority":            escalationPriority(e),
		"estimated_review_by": timeString(e.GetEstimatedReviewBy()),
	})
}

// confirm runs CONFIRM (core §7.2.11): claim the confirmation, have
// auditsvc sign the attestation into the confirmer's "confirm" stream,
// then apply it. A repeated CONFIRM answers the stored attestation.
func (bi *Registry) confirm(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if r := bi.mechanicsReady(ctx, call, "CONFIRM"); r != nil {
		return r
	}
	targetID, status, reason := str(params, "target_id"), str(params, "status"), str(params, "reason")
	if status != "accepted" && strings.TrimSpace(reason) == "" {
		return call.Fail(agtp.StatusBadRequest, "reason-required", "CONFIRM with status "+status+" needs a reason (core §7.2.11)", nil)
	}
	outcome, bad := enumParam[taskv1.ConfirmationOutcome](call, "status")
	if bad != nil {
		return bad
	}
	begin, err := bi.Tasks.BeginConfirm(ctx, &taskv1.BeginConfirmRequest{CallerAgentId: call.AgentID, TargetId: targetID, Outcome: outcome, Reason: reason})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	if c := begin.GetConfirmation(); c != nil {
		return bi.confirmed(ctx, call, c, nil, true)
	}
	now := time.Now().UTC()
	claims := map[string]any{
		//lint:ignore SA1019 the first release's policysvc sends the target kind only as a string
		"method": "CONFIRM", "type": "confirm", "target_id": targetID, "target_kind": enumname.Prefer(begin.GetTarget(), begin.GetTargetKind()), "task_id": begin.GetTaskId(),
		"confirm_status": status, "confirmer_agent_id": call.AgentID, "timestamp": now.Format(time.RFC3339Nano),
	}
	if reason != "" {
		claims["reason"] = reason
	}
	if a := rawParam(params, "attestation"); a != nil {
		claims["attestation"] = json.RawMessage(a)
	}
	cj, err := json.Marshal(claims)
	if err != nil {
		return call.Fail(agtp.StatusBadRequest, "attestation-invalid", "the attestation could not be encoded", nil)
	}
	rec, err := auditclient.AppendSignedRecord(ctx, bi.Audit, &auditv1.AppendSignedRecordRequest{AgentId: call.AgentID, Stream: confirmStream, Claims: string(cj)})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "auditsvc", err)
	}
	done, err := bi.Tasks.CompleteConfirm(ctx, &taskv1.CompleteConfirmRequest{
		CallerAgentId: call.AgentID, TargetId: targetID, ClaimToken: begin.GetClaimToken(), AttestationId: rec.GetAuditId(), ConfirmedAt: timestamppb.New(now),
	})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	return bi.confirmed(ctx, call, done.GetConfirmation(), done.GetTask(), false)
}

func (bi *Registry) confirmed(ctx context.Context, call *Call, c *taskv1.Confirmation, t *taskv1.Task, replayed bool) *agtp.Response {
	body := map[string]any{
		"attestation_id": c.GetAttestationId(),
		"timestamp":      timeString(c.GetConfirmedAt()),
		"target_id":      c.GetTargetId(),
		//lint:ignore SA1019 the first release's policysvc sends the target kind only as a string
		"target_kind": enumname.Prefer(c.GetTarget(), c.GetTargetKind()),
		//lint:ignore SA1019 the first release's policysvc sends the status only as a string
		"status":  enumname.Prefer(c.GetOutcome(), c.GetStatus()),
		"task_id": c.GetTaskId(),
	}
	if t != nil {
		body["task_status"] = taskStatus(t)
	}
	if replayed {
		body["replayed"] = true
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, body)
}

// notify runs NOTIFY (core §7.2.13): a receipt now, delivery by
// policysvc's retry worker.
func (bi *Registry) notify(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if r := bi.mechanicsReady(ctx, call, "NOTIFY"); r != nil {
		return r
	}
	if isMonitorCancel(params) && call.Header.Get(headerNotificationID) == "" {
		return bi.monitorCancel(ctx, call)
	}
	expiry, bad := rfc3339(ctx, call, params, "expiry")
	if bad != nil {
		return bad
	}
	rcpt := str(params, "recipient")
	if resp := bi.checkLocalRecipient(ctx, call, rcpt); resp != nil {
		return resp
	}
	urgency, bad := enumParam[taskv1.NotificationUrgency](call, "urgency")
	if bad != nil {
		return bad
	}
	guarantee, bad := enumParam[taskv1.DeliveryGuarantee](call, "delivery_guarantee")
	if bad != nil {
		return bad
	}
	// A Notification-ID is a delivery another server relays (its retry
	// worker); policysvc de-duplicates it for the recipient.
	relayedID := call.Header.Get(headerNotificationID)
	r, err := bi.Tasks.Notify(ctx, &taskv1.NotifyRequest{
		SenderAgentId: call.AgentID, Recipient: rcpt, Content: valueParam(params, "content"),
		UrgencyLevel: urgency, Guarantee: guarantee, Expiry: expiry,
		NotificationId: relayedID,
	})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	return jsonResponse(call, agtp.StatusAccepted, agtp.MediaTypeJSON, notificationJSON(r.GetNotification()))
}

func notificationJSON(n *taskv1.Notification) map[string]any {
	out := map[string]any{
		"notification_id": n.GetNotificationId(), "recipient": redactURL(n.GetRecipient()),
		//lint:ignore SA1019 the first release's policysvc sends the status only as a string
		"status": enumname.Prefer(n.GetState(), n.GetStatus()),
		//lint:ignore SA1019 the first release's policysvc sends the urgency only as a string
		"urgency": enumname.Prefer(n.GetUrgencyLevel(), n.GetUrgency()),
		//lint:ignore SA1019 the first release's policysvc sends the guarantee only as a string
		"delivery_guarantee": enumname.Prefer(n.GetGuarantee(), n.GetDeliveryGuarantee()),
		"expiry":             timeString(n.GetExpiry()), "attempts": n.GetAttempts(),
		//lint:ignore SA1019 the first release's policysvc sends the recipient kind only as a string
		"recipient_kind": enumname.Prefer(n.GetRecipientType(), n.GetRecipientKind()),
	}
	if d := timeString(n.GetDeliveredAt()); d != "" {
		out["delivered_at"] = d
	}
	if e := n.GetLastError(); e != "" {
		// policysvc stores the kind of failure only; a record stored
		// before it did may quote the webhook URL, token and all.
		if r := n.GetRecipient(); strings.HasPrefix(r, "https://") {
			e = strings.ReplaceAll(e, r, redactURL(r))
		}
		out["last_error"] = e
	}
	if n.GetDuplicate() {
		out["duplicate"] = true
	}
	if ds := n.GetDeliveries(); len(ds) > 0 {
		list := make([]map[string]any, 0, len(ds))
		for _, d := range ds {
			list = append(list, notificationJSON(d))
		}
		out["deliveries"] = list
	}
	return out
}

// queryTask serves QUERY /tasks/{task_id}: the caller's own task.
func (bi *Registry) queryTask(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if r := bi.mechanicsReady(ctx, call, "QUERY /tasks"); r != nil {
		return r
	}
	r, err := bi.Tasks.GetTask(ctx, &taskv1.GetTaskRequest{CallerAgentId: call.AgentID, TaskId: str(params, "task_id")})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, taskJSON(r.GetTask()))
}

// queryNotification serves QUERY /notifications/{notification_id}.
func (bi *Registry) queryNotification(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if r := bi.mechanicsReady(ctx, call, "QUERY /notifications"); r != nil {
		return r
	}
	r, err := bi.Tasks.GetNotification(ctx, &taskv1.GetNotificationRequest{CallerAgentId: call.AgentID, NotificationId: str(params, "notification_id")})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, notificationJSON(r.GetNotification()))
}

// taskStatus names a task's status from the enum, or from the first
// release's string.
func taskStatus(t *taskv1.Task) string {
	//lint:ignore SA1019 the first release's policysvc sends the status only as a string
	return enumname.Prefer(t.GetState(), t.GetStatus())
}

func taskJSON(t *taskv1.Task) map[string]any {
	history := []map[string]any{}
	for _, e := range t.GetHistory() {
		//lint:ignore SA1019 the first release's policysvc sends the status only as a string
		h := map[string]any{"at": timeString(e.GetAt()), "event": e.GetEvent(), "status": enumname.Prefer(e.GetState(), e.GetStatus())}
		for k, v := range map[string]string{"actor": e.GetActor(), "ref": e.GetRef(), "detail": e.GetDetail()} {
			if v != "" {
				h[k] = v
			}
		}
		history = append(history, h)
	}
	status := taskStatus(t)
	return map[string]any{
		"task_id": t.GetTaskId(), "owner_agent_id": t.GetOwnerAgentId(), "status": status,
		"paused":     status == "escalated" || status == "paused",
		"created_at": timeString(t.GetCreatedAt()), "updated_at": timeString(t.GetUpdatedAt()), "history": history,
	}
}

// queryInbox serves QUERY /inbox: the caller's own inbox only, so an agent
// reads what other agents sent it without an operator in between.
func (bi *Registry) queryInbox(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if r := bi.mechanicsReady(ctx, call, "QUERY /inbox"); r != nil {
		return r
	}
	limit, _ := params["limit"].(float64) // the input schema bounds it to 1..100
	r, err := bi.Tasks.ListInbox(ctx, &taskv1.ListInboxRequest{AgentId: call.AgentID, PageToken: str(params, "cursor"), PageSize: int32(limit)})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	now := time.Now()
	entries := make([]map[string]any, 0, len(r.GetEntries()))
	for _, e := range r.GetEntries() {
		if e.GetExpiry() != nil && e.GetExpiry().AsTime().Before(now) {
			continue // core §7.2.12: an expired notification is not delivered
		}
		entry := map[string]any{
			"notification_id": e.GetNotificationId(), "sender_agent_id": e.GetSenderAgentId(),
			//lint:ignore SA1019 the first release's policysvc sends the urgency only as a string
			"urgency": enumname.Prefer(e.GetUrgencyLevel(), e.GetUrgency()),
			//lint:ignore SA1019 the first release's policysvc sends the guarantee only as a string
			"delivery_guarantee": enumname.Prefer(e.GetGuarantee(), e.GetDeliveryGuarantee()),
			"received_at":        e.GetReceivedAt().AsTime().UTC().Format(time.RFC3339Nano),
		}
		//lint:ignore SA1019 the first release's policysvc sends the content only as bytes
		if content, err := jsondoc.PreferValue(e.GetContent(), e.GetContentJson()); err == nil && json.Valid(content) {
			entry["content"] = json.RawMessage(content)
		} else {
			entry["content"] = nil
		}
		if e.GetExpiry() != nil {
			entry["expiry"] = e.GetExpiry().AsTime().UTC().Format(time.RFC3339Nano)
		}
		entries = append(entries, entry)
	}
	out := map[string]any{"entries": entries}
	if c := r.GetNextPageToken(); c != "" {
		out["next_cursor"] = c
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, out)
}

// DelegationClaims is the payload of a delegation_token: a compact JWS,
// alg EdDSA, signed with the delegator's agent key (the Ed25519 key of its
// Genesis issuer_public_key).
type DelegationClaims struct {
	Delegator string   `json:"delegator"`
	Delegatee string   `json:"delegatee"`
	Scope     []string `json:"scope"`
	// TaskHash is the SHA-256 of the JCS form of the task, lowercase hex.
	TaskHash string `json:"task_hash"`
	// Exp is the expiry, Unix seconds.
	Exp int64 `json:"exp"`
}

// delegateeOf reads target_agent_id: an Agent-ID or agtp://<agent-id>
// (a sub-agent hosted here, addr empty), or agtp://<agent-id>@host[:port]
// (a sub-agent on that host).
func delegateeOf(target string) (id, addr string, ok bool) {
	if agtp.IsCanonicalID(target) {
		return target, "", true
	}
	return agtp.ParseAgentURI(target)
}

// delegate runs DELEGATE (core §7.2.9, §10.4.2, §10.4.3): the granted
// scope must be a strict subset of the delegator's, the token must verify
// against the delegator's Genesis key, and the hop is signed into the
// delegator's "delegate" audit stream and recorded on its task.
func (bi *Registry) delegate(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if r := bi.mechanicsReady(ctx, call, "DELEGATE"); r != nil {
		return r
	}
	target := str(params, "target_agent_id")
	delegatee, addr, ok := delegateeOf(target)
	if !ok {
		return call.Fail(agtp.StatusBadRequest, "target-agent-id-invalid", "target_agent_id must be an Agent-ID or agtp://<agent-id>[@host[:port]]", nil)
	}
	if addr != "" {
		if resp := bi.checkPeer(ctx, call, addr); resp != nil {
			return resp
		}
	}
	var scopes []string
	if list, ok := params["authority_scope"].([]any); ok {
		for _, v := range list {
			if s, ok := v.(string); ok {
				scopes = append(scopes, s)
			}
		}
	}
	granted, err := agtp.ParseScopeList(scopes)
	if err != nil || len(granted) == 0 {
		return call.Fail(agtp.StatusBadRequest, "authority-scope-invalid", "authority_scope must be a non-empty list of scope tokens", nil)
	}
	own, err := agtp.ParseScopeList(call.Scopes)
	if err != nil {
		own = nil
	}
	if bad, ok := own.CoversAll(granted); !ok {
		bi.Log.WarnContext(ctx, "delegation refused: scope escalation", "delegator", call.AgentID, "delegatee", delegatee, "scope", scopes)
		return call.Fail(agtp.StatusAuthorizationRequired, "scope-required",
			"authority_scope "+string(bad)+" is not within the delegator's own scopes (core §10.4.2)", nil)
	}
	if _, ok := granted.CoversAll(own); ok {
		return call.Fail(agtp.StatusAuthorizationRequired, "scope-required",
			"authority_scope must be a strict subset of the delegator's scopes (core §7.2.9)", nil)
	}
	taskJSONBytes := rawParam(params, "task")
	canon, err := jcs.Canonicalize(taskJSONBytes)
	if err != nil || len(taskJSONBytes) == 0 {
		return call.Fail(agtp.StatusBadRequest, "task-invalid", "task is required: a JSON value", nil)
	}
	sum := sha256.Sum256(canon)
	taskHash := hex.EncodeToString(sum[:])
	calls, bad := parseDelegatedTask(taskJSONBytes)
	if bad != "" {
		return call.Fail(agtp.StatusBadRequest, "task-invalid", bad, nil)
	}
	// Nothing is signed or run until every check passed: the calls may
	// reach no built-in that acts as the sub-agent in person, the token
	// verifies, a sub-agent hosted here consents (one on another host is
	// asked by its host), and the task may run.
	if resp := bi.refusedCall(ctx, call, delegatee, calls); resp != nil {
		return resp
	}
	if resp := bi.verifyDelegationToken(ctx, call, str(params, "delegation_token"), delegatee, scopes, taskHash); resp != nil {
		return resp
	}
	if addr == "" {
		if resp := bi.checkDelegateeConsent(ctx, call, delegatee); resp != nil {
			return resp
		}
	}
	taskID := str(params, "task_id")
	if resp := bi.checkDelegationTask(ctx, call, taskID); resp != nil {
		return resp
	}
	hop, _ := json.Marshal(map[string]any{
		"method": "DELEGATE", "type": "delegate", "delegator_agent_id": call.AgentID, "delegatee_agent_id": delegatee, "target": target,
		"authority_scope": scopes, "task_hash": taskHash, "task_id": taskID,
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano),
	})
	rec, err := auditclient.AppendSignedRecord(ctx, bi.Audit, &auditv1.AppendSignedRecordRequest{AgentId: call.AgentID, Stream: delegateStream, Claims: string(hop)})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "auditsvc", err)
	}
	// A sub-agent hosted here runs the task now, as itself, with the
	// narrowed Authority-Scope; one on another host (agtp://id@host) runs
	// it there, over an AGTP session this server opens to that host
	// (docs/mechanics.md).
	var results []map[string]any
	var remote map[string]any
	failed, remoteBroken := "", ""
	if addr == "" {
		results, failed = bi.runDelegated(ctx, call, delegatee, granted, taskID, calls)
	} else {
		results, remote, failed, remoteBroken = bi.runRemoteDelegated(ctx, call, addr, delegatee, scopes, taskID, taskJSONBytes, str(params, "delegation_token"))
	}
	status := "delegated"
	if failed != "" || remoteBroken != "" {
		status = "failed"
	}
	detail := failed + remoteBroken
	if remote != nil {
		detail = strings.TrimSpace("remote " + addr + " delegation " + fmt.Sprint(remote["delegation_id"]) + " audit_id " + fmt.Sprint(remote["audit_id"]) + " " + detail)
	}
	r, err := bi.Tasks.RecordDelegation(ctx, &taskv1.RecordDelegationRequest{
		DelegatorAgentId: call.AgentID, DelegateeAgentId: delegatee, TaskId: taskID,
		AuthorityScope: scopes, TaskHash: taskHash, AuditId: rec.GetAuditId(), Outcome: enumname.Value[taskv1.DelegationOutcome](status),
		Detail: textcut.Cut(detail, maxHopDetail),
	})
	if err != nil {
		// The task changed between the check and the record (an ESCALATE
		// of it meanwhile): the calls ran and the signed hop record
		// names them, so the refusal says so.
		f := answer.Dependency(ctx, bi.Log, "policysvc", err)
		bi.Log.WarnContext(ctx, "delegation ran but its task refused the hop", "delegator", call.AgentID, "delegatee", delegatee,
			"task_id", taskID, "audit_id", rec.GetAuditId(), "reason", f.Reason)
		extra := map[string]any{"audit_id": rec.GetAuditId(), "executed": true, "results": results}
		for k, v := range f.Extra {
			extra[k] = v
		}
		return call.Fail(f.Status, f.Reason, f.Explanation, extra)
	}
	bi.Log.InfoContext(ctx, "delegation hop", "delegator", call.AgentID, "delegatee", delegatee, "scope", scopes, "audit_id", rec.GetAuditId(),
		"delegation_id", r.GetDelegationId(), "host", addr, "status", status, "remote", remote)
	body := map[string]any{
		"delegation_id": r.GetDelegationId(), "task_id": r.GetTask().GetTaskId(), "status": status,
		"delegatee_agent_id": delegatee, "authority_scope": scopes, "task_hash": taskHash, "audit_id": rec.GetAuditId(),
		"executed": true, "results": results,
	}
	if remote != nil {
		body["remote"] = remote
	}
	switch {
	case remoteBroken != "":
		bi.Log.WarnContext(ctx, "authority chain broken at the sub-agent's host", "delegator", call.AgentID, "delegatee", delegatee, "host", addr, "link", remoteBroken)
		body["failing_link"] = remoteBroken
		return call.Fail(agtp.StatusAuthorityChainBroken, "authority-chain-broken", "the sub-agent's host could not verify the delegation: "+remoteBroken, body)
	case failed != "":
		return call.Fail(agtp.StatusDelegationFailure, "delegation-failure", "the sub-agent failed: "+failed, body)
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, body)
}

// runDelegated runs a task (one call or a sequence) through this pipeline
// as the sub-agent with the narrowed scope, stopping at the first failure.
// It returns each call's outcome and, on failure, what failed (bounded:
// it goes into the task's history).
func (bi *Registry) runDelegated(ctx context.Context, call *Call, delegatee string, scope agtp.ScopeSet, taskID string, calls []delegatedCall) ([]map[string]any, string) {
	results := []map[string]any{}
	// The calls run as the delegatee, proven by the DELEGATE this front
	// door verified rather than by the delegator's connection.
	conn := *call.Conn
	conn.Peer = &callerproof.Delegated{AgentID: delegatee, Level: call.ProofLevel}
	for i, c := range calls {
		req, err := agtp.NewRequest(c.Method, c.Path)
		if err != nil {
			return results, "call " + strconv.Itoa(i) + ": " + textcut.Cut(err.Error(), maxPathInDetail)
		}
		req.Header.Set(agtp.HeaderAgentID, delegatee)
		req.Header.Set(agtp.HeaderAuthorityScope, scope.String())
		if taskID != "" {
			req.Header.Set(agtp.HeaderTaskID, taskID)
		}
		if len(c.Body) > 0 {
			req.Body = c.Body
			req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
		}
		resp := bi.Serve(ctx, &conn, req)
		out := map[string]any{"method": c.Method, "path": c.Path, "status": resp.Status, "audit_id": resp.Header.Get(agtp.HeaderAuditID)}
		if json.Valid(resp.Body) {
			out["body"] = json.RawMessage(resp.Body)
		}
		results = append(results, out)
		if resp.Status < 200 || resp.Status >= agtp.StatusNegotiationInProgress { // 261-263 are not outcomes
			return results, textcut.Cut(c.Method, 64) + " " + textcut.Cut(c.Path, maxPathInDetail) + " answered " + strconv.Itoa(resp.Status)
		}
	}
	return results, ""
}

// verifyDelegationToken checks the token against the delegator's Genesis
// key and the request; any mismatch is 551, logged (core §5.6).
func (bi *Registry) verifyDelegationToken(ctx context.Context, call *Call, token, delegatee string, scopes []string, taskHash string) *agtp.Response {
	broken := func(link string) *agtp.Response {
		bi.Log.WarnContext(ctx, "authority chain broken", "delegator", call.AgentID, "delegatee", delegatee, "link", link)
		return call.Fail(agtp.StatusAuthorityChainBroken, "authority-chain-broken", "the delegation token does not verify: "+link, map[string]any{"failing_link": link})
	}
	issuer := ed25519.PublicKey(call.Caller.GetIssuerPublicKey())
	if len(issuer) != ed25519.PublicKeySize {
		// A record from before issuer keys were kept on it: read the
		// Genesis.
		g, err := bi.Identity.GetGenesis(ctx, &identityv1.GetGenesisRequest{AgentId: call.AgentID})
		if err != nil {
			return bi.dependencyFailure(ctx, call, "identitysvc", err)
		}
		//lint:ignore SA1019 the first release's identitysvc sends the Genesis only as bytes
		gen, err := genesis.Parse(jsondoc.PreferString(g.GetGenesis(), g.GetGenesisJson()))
		if err != nil {
			return broken("the delegator's Genesis cannot be read")
		}
		issuer = gen.IssuerPublicKey
	}
	c, link := OpenDelegationToken(token, issuer, time.Now())
	if link != "" {
		return broken(link)
	}
	want := slices.Clone(scopes)
	slices.Sort(want)
	got := slices.Clone(c.Scope)
	slices.Sort(got)
	switch {
	case c.Delegator != call.AgentID:
		return broken("delegator does not match Agent-ID")
	case c.Delegatee != delegatee:
		return broken("delegatee does not match target_agent_id")
	case !slices.Equal(want, got):
		return broken("scope does not match authority_scope")
	case c.TaskHash != taskHash:
		return broken("task_hash does not match the task")
	}
	return nil
}

// OpenDelegationToken returns the claims of a delegation token (core
// §7.2.9) that issuer, a delegator's Genesis issuer key, signed and that
// has not expired at now; otherwise the failing link, which names what
// did not verify. Whether the claims fit the request (delegator,
// delegatee, scope, task) is the caller's to check.
func OpenDelegationToken(token string, issuer ed25519.PublicKey, now time.Time) (DelegationClaims, string) {
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return DelegationClaims{}, "delegation_token is not a compact EdDSA JWS"
	}
	if len(issuer) != ed25519.PublicKeySize {
		return DelegationClaims{}, "the delegator has no Genesis issuer key here"
	}
	payload, err := jws.Verify(issuer)
	if err != nil {
		return DelegationClaims{}, "signature does not verify against the delegator's Genesis issuer_public_key"
	}
	var c DelegationClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return DelegationClaims{}, "payload is not a delegation claim set"
	}
	if c.Exp == 0 || now.Unix() >= c.Exp {
		return DelegationClaims{}, "token expired"
	}
	return c, ""
}
