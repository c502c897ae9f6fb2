package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/attribution/attributionpb"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// TestAuditRetryAcrossRestartAppendsOnce: auditsvc appends a record and
// the caller never sees the answer (here: auditsvc is killed right after,
// which also loses its cached chain heads). The caller sends the same
// request, with the same request_id, to the restarted process and gets
// that record; the chain holds it once. Other content under the ID is
// refused. auditsvc runs with a shortened request window, which it warns
// about at start-up and gives the request entry as its expiry.
func TestAuditRetryAcrossRestartAppendsOnce(t *testing.T) {
	c := Start(t, Options{ServiceEnv: map[string][]string{"auditsvc": {"AGTP_AUDIT_REQUEST_WINDOW=10m"}}})
	if logs := c.Procs["auditsvc"].Logs(); !strings.Contains(logs, "audit request IDs are remembered for less than the default") ||
		!strings.Contains(logs, "request_window=10m0s") {
		t.Errorf("auditsvc started with a 10-minute request window without saying so:\n%s", logs)
	}
	agent := strings.Repeat("5e", 32)
	payload := attribution.Payload{
		ServerID: "agtp.e2e", Timestamp: time.Now().UTC().Format(time.RFC3339Nano), RequestHash: strings.Repeat("a", 64),
		Status: 200, Method: "QUERY", AgentID: agent, ResponseID: "0197a3c0-7c1e-7cc4-9f1a-5b2d4e6f8a90",
	}
	req := &auditv1.SignAndAppendRequest{ChainAgentId: agent, Claims: attributionpb.Claims(&payload), RequestId: payload.ResponseID}
	send := func(req *auditv1.SignAndAppendRequest) (*auditv1.SignAndAppendResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return auditv1.NewAuditServiceClient(c.DialAs(t, "auditsvc", "frontdoor")).SignAndAppend(ctx, req)
	}

	first, err := send(req)
	if err != nil || first.GetReplayed() {
		t.Fatalf("first append: %v %+v", err, first)
	}
	c.Stop("auditsvc", syscall.SIGKILL)
	c.Restart(t, "auditsvc")

	again, err := send(req)
	if err != nil {
		t.Fatal(err)
	}
	if !again.GetReplayed() || again.GetAttributionRecord() != first.GetAttributionRecord() || again.GetAuditId() != first.GetAuditId() ||
		again.GetSequence() != first.GetSequence() || again.GetPreviousAuditId() != first.GetPreviousAuditId() {
		t.Fatalf("retry answered %+v, want the first record %+v", again, first)
	}
	if n := c.chainLength(t, agent); n != 1 {
		t.Fatalf("chain has %d records, want 1", n)
	}
	rdb := c.Redis.Client(t)
	keys, err := rdb.Keys(context.Background(), "*auditrid*"+payload.ResponseID).Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("request entries %v (%v), want one", keys, err)
	}
	if ttl := rdb.PTTL(context.Background(), keys[0]).Val(); ttl <= 9*time.Minute || ttl > 10*time.Minute {
		t.Fatalf("the request entry expires in %v, want the configured 10 minutes", ttl)
	}

	other := payload
	other.Status = 500
	_, err = send(&auditv1.SignAndAppendRequest{ChainAgentId: agent, Claims: attributionpb.Claims(&other), RequestId: payload.ResponseID})
	if code, reason, _, _ := grpcerr.Reason(err); code != codes.AlreadyExists || reason != "audit-request-id-reused" {
		t.Fatalf("other content under the request_id: %v, want ALREADY_EXISTS audit-request-id-reused", err)
	}
	if n := c.chainLength(t, agent); n != 1 {
		t.Fatalf("chain has %d records after the refused request, want 1", n)
	}
}
