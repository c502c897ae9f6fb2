package e2e

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestTraceFollowsARequestAcrossServices sends an AGTP request carrying a
// W3C traceparent and checks, from the spans the processes export over
// OTLP, that the front door continued the caller's trace and that the
// calls it made into policysvc and auditsvc are children in that trace.
// The front door's server span carries the identifiers an SRE searches
// by: Response-ID, Audit-ID, and the request's Session-ID and Task-ID.
func TestTraceFollowsARequestAcrossServices(t *testing.T) {
	sink := startSpanSink(t)
	c := Start(t, Options{Env: sink.env()})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	const parentID = "00f067aa0ba902b7"
	const sessionID = "sess-7d1f0c2a9b3e4f5a6b7c8d9e0f1a2b3c"
	const taskID = "task-trace-1"
	resp := c.roundTrip(t, request(t, "DISCOVER", "/", agtp.HeaderTraceparent, "00-"+traceID+"-"+parentID+"-01",
		agtp.HeaderSessionID, sessionID, agtp.HeaderTaskID, taskID))
	if resp.Status != agtp.StatusOK {
		t.Fatalf("DISCOVER / = %d %s", resp.Status, resp.Body)
	}
	want, _ := hex.DecodeString(traceID)
	var spans []recordedSpan
	testkit.WaitFor(t, 15*time.Second, "spans of frontdoor and auditsvc in the caller's trace", func() bool {
		spans = sink.trace(want)
		var front, audit bool
		for _, s := range spans {
			front = front || s.Service == "frontdoor" && s.Span.GetName() == "DISCOVER /" && hex.EncodeToString(s.Span.GetParentSpanId()) == parentID &&
				spanAttr(s, "agtp.response_id") == resp.Header.Get(agtp.HeaderResponseID) && spanAttr(s, "agtp.audit_id") == resp.Header.Get(agtp.HeaderAuditID) &&
				spanAttr(s, "agtp.session_id") == sessionID && spanAttr(s, "agtp.task_id") == taskID
			audit = audit || s.Service == "auditsvc" && s.Span.GetName() == "agtp.audit.v1.AuditService/SignAndAppend"
		}
		return front && audit
	})
	// The auditsvc server span's parent is a client span of the front door.
	byID := map[string]recordedSpan{}
	for _, s := range spans {
		byID[string(s.Span.GetSpanId())] = s
	}
	for _, s := range spans {
		if s.Service == "auditsvc" && s.Span.GetName() == "agtp.audit.v1.AuditService/SignAndAppend" {
			parent, ok := byID[string(s.Span.GetParentSpanId())]
			if !ok || parent.Service != "frontdoor" {
				t.Fatalf("auditsvc span's parent is %+v, want a frontdoor client span", parent)
			}
		}
	}
}

// spanAttr is a string attribute of a recorded span, or "".
func spanAttr(s recordedSpan, key string) string {
	for _, kv := range s.Span.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}
