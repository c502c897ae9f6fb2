// Package changelog signs the changes made through policysvc's admin RPCs
// (an escalation resolved by a person, an AGP key revoked) into the
// lifecycle stream of the agent they concern, through auditsvc, the way
// identitysvc records lifecycle transitions and rcnssvc contract
// revocations. Each event names who made the change (access.Actor: the
// caller's identity and, for the console, the person it acts for), so a
// change a person made is attributed to them in a signed, hash-linked
// stream rather than only in a log line (docs/console.md, "Attribution").
package changelog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// ReasonUnavailable is the refusal of a change that could not be signed:
// a change nobody can audit is not made.
const ReasonUnavailable = "audit-unavailable"

// Recorder appends the events. The zero of *Recorder (nil) records
// nothing and refuses every change.
type Recorder struct {
	audit   auditv1.AuditServiceClient
	timeout time.Duration
}

// New records through audit, each append bounded by timeout.
func New(audit auditv1.AuditServiceClient, timeout time.Duration) *Recorder {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &Recorder{audit: audit, timeout: timeout}
}

// Record signs event into agentID's lifecycle stream with claims and the
// caller as actor (and person, when the console forwarded one), and
// returns the event's Audit-ID. key names the change: the same key
// appends once (a retried call gets the event appended the first time),
// so it must hold everything that makes two changes different.
func (r *Recorder) Record(ctx context.Context, agentID, event string, claims map[string]any, key ...string) (string, error) {
	if r == nil || r.audit == nil {
		return "", grpcerr.Unavailable(ReasonUnavailable, "no audit service is configured to sign this change")
	}
	if agentID == "" {
		return "", errors.New("changelog: the change concerns no agent")
	}
	// No timestamp: auditsvc stamps the event, so a retried call sends
	// the same message (a request ID reused with other content is refused).
	out := map[string]any{"agent_id": agentID, "event_type": event, "actor": access.Actor(ctx)}
	if p, ok := access.Person(ctx); ok {
		out["person"] = p
	}
	for k, v := range claims {
		out[k] = v
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", grpcerr.Internal(err)
	}
	actx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	res, err := auditclient.AppendLifecycleEvent(actx, r.audit, &auditv1.AppendLifecycleEventRequest{
		AgentId: agentID, EventType: event, Claims: string(b), RequestId: requestID(event, agentID, access.Actor(ctx), key)})
	if err != nil {
		return "", grpcerr.Unavailable(ReasonUnavailable, "the change could not be signed into the audit chain ("+err.Error()+"); nothing was changed, retry")
	}
	return res.GetAuditId(), nil
}

// requestID names an append by what it records (auditsvc's request IDs
// are at most 128 characters of A-Z a-z 0-9 . _ -): a retry of the same
// change by the same caller appends once; any other change appends anew.
func requestID(event, agentID, actor string, key []string) string {
	h := sha256.New()
	for _, s := range append([]string{event, agentID, actor}, key...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return "change-" + hex.EncodeToString(h.Sum(nil))
}
