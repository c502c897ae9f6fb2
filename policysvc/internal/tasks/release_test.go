package tasks

import (
	"context"
	"testing"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// A client built against the first release sends and reads only the
// string and bytes fields; a current one only the enums and Values. Each
// is served in full, and reads what the other wrote (docs/operations.md,
// "Enums and documents").
//
//lint:file-ignore SA1019 the first release's fields are what this test exercises
func TestFirstReleaseAndCurrentClientsRoundTrip(t *testing.T) {
	c, _ := start(t, Options{})
	ctx := context.Background()

	// ESCALATE, first release: context as bytes, priority as a string.
	old, err := c.Escalate(ctx, &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: "t-old", Reason: "scope_limit",
		ContextJson: []byte(`{"n":[1,"two"]}`), Priority: "low", Recipient: reviewer})
	if err != nil {
		t.Fatal(err)
	}
	e := old.GetEscalation()
	if e.GetStatus() != PendingReview || e.GetPriority() != "low" || string(e.GetContextJson()) != `{"n":[1,"two"]}` || e.GetRoutingStatus() != RoutingListed ||
		e.GetState() != taskv1.EscalationState_ESCALATION_STATE_PENDING_REVIEW || e.GetPriorityLevel() != taskv1.EscalationPriority_ESCALATION_PRIORITY_LOW ||
		string(testkit.ValueJSON(e.GetContext())) != `{"n":[1,"two"]}` || e.GetRouting() != taskv1.EscalationRouting_ESCALATION_ROUTING_LISTED {
		t.Fatalf("a first-release ESCALATE answers %v", e)
	}
	if tk := old.GetTask(); tk.GetStatus() != StatusEscalated || tk.GetState() != taskv1.TaskStatus_TASK_STATUS_ESCALATED ||
		tk.GetHistory()[len(tk.GetHistory())-1].GetState() != taskv1.TaskStatus_TASK_STATUS_ESCALATED {
		t.Fatalf("task = %v", tk)
	}

	// CONFIRM, first release: the status as a string; the stored
	// confirmation is read in both forms.
	b, err := c.BeginConfirm(ctx, &taskv1.BeginConfirmRequest{CallerAgentId: reviewer, TargetId: e.GetEscalationId(), Status: Rejected, Reason: "no"})
	if err != nil || b.GetClaimToken() == "" {
		t.Fatalf("begin confirm = %v, %v", b, err)
	}
	done, err := c.CompleteConfirm(ctx, &taskv1.CompleteConfirmRequest{CallerAgentId: reviewer, TargetId: e.GetEscalationId(), ClaimToken: b.GetClaimToken(), AttestationId: "att-1"})
	if err != nil || done.GetConfirmation().GetStatus() != Rejected || done.GetConfirmation().GetOutcome() != taskv1.ConfirmationOutcome_CONFIRMATION_OUTCOME_REJECTED ||
		done.GetTask().GetState() != taskv1.TaskStatus_TASK_STATUS_REJECTED {
		t.Fatalf("complete confirm = %v, %v", done, err)
	}

	// NOTIFY, first release: content as bytes; a current client sends a
	// Value. Both read both forms, and the inbox holds the same JSON.
	n1, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: reviewer, ContentJson: []byte(`{"k":"old"}`)})
	if err != nil {
		t.Fatal(err)
	}
	n2, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: reviewer, Content: testkit.JSONValue(`"new"`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n    *taskv1.Notification
		want string
	}{{n1.GetNotification(), `{"k":"old"}`}, {n2.GetNotification(), `"new"`}} {
		if string(tc.n.GetContentJson()) != tc.want || string(testkit.ValueJSON(tc.n.GetContent())) != tc.want ||
			tc.n.GetStatus() != NotifyDelivered || tc.n.GetState() != taskv1.NotificationStatus_NOTIFICATION_STATUS_DELIVERED {
			t.Errorf("notification = %v, want content %s delivered in both forms", tc.n, tc.want)
		}
	}
	inbox, err := c.ListInbox(ctx, &taskv1.ListInboxRequest{AgentId: reviewer})
	if err != nil || len(inbox.GetEntries()) != 2 {
		t.Fatalf("inbox = %v, %v", inbox, err)
	}
	for i, want := range []string{`{"k":"old"}`, `"new"`} {
		if en := inbox.GetEntries()[i]; string(en.GetContentJson()) != want || string(testkit.ValueJSON(en.GetContent())) != want {
			t.Errorf("inbox entry %d = %v, want %s in both forms", i, en, want)
		}
	}

	// DELEGATE's record, first release: the status as a string.
	d, err := c.RecordDelegation(ctx, &taskv1.RecordDelegationRequest{DelegatorAgentId: owner, DelegateeAgentId: reviewer, TaskId: "t-dlg", Status: StatusFailed})
	if err != nil || d.GetTask().GetState() != taskv1.TaskStatus_TASK_STATUS_FAILED {
		t.Fatalf("record delegation = %v, %v", d, err)
	}
	d, err = c.RecordDelegation(ctx, &taskv1.RecordDelegationRequest{DelegatorAgentId: owner, DelegateeAgentId: reviewer, TaskId: "t-dlg2",
		Outcome: taskv1.DelegationOutcome_DELEGATION_OUTCOME_DELEGATED})
	if err != nil || d.GetTask().GetStatus() != StatusDelegated {
		t.Fatalf("record delegation with the enum = %v, %v", d, err)
	}
	if _, err := c.RecordDelegation(ctx, &taskv1.RecordDelegationRequest{DelegatorAgentId: owner, DelegateeAgentId: reviewer, TaskId: "t-dlg3", Outcome: 7}); code(err) == 0 {
		t.Fatal("an outcome this release does not declare was taken for the default")
	}
}
