package tasks

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
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
	if err != nil || b.GetClaimToken() == "" || b.GetTargetKind() != "escalation" || b.GetTarget() != taskv1.ConfirmationTarget_CONFIRMATION_TARGET_ESCALATION {
		t.Fatalf("begin confirm = %v, %v", b, err)
	}
	done, err := c.CompleteConfirm(ctx, &taskv1.CompleteConfirmRequest{CallerAgentId: reviewer, TargetId: e.GetEscalationId(), ClaimToken: b.GetClaimToken(), AttestationId: "att-1"})
	if err != nil || done.GetConfirmation().GetStatus() != Rejected || done.GetConfirmation().GetOutcome() != taskv1.ConfirmationOutcome_CONFIRMATION_OUTCOME_REJECTED ||
		done.GetConfirmation().GetTargetKind() != "escalation" || done.GetConfirmation().GetTarget() != taskv1.ConfirmationTarget_CONFIRMATION_TARGET_ESCALATION ||
		done.GetTask().GetState() != taskv1.TaskStatus_TASK_STATUS_REJECTED {
		t.Fatalf("complete confirm = %v, %v", done, err)
	}
	// NOTIFY, first release: content as bytes, urgency and guarantee as
	// strings; a current client sends a Value and the enums. Both read
	// both forms, and the inbox holds the same.
	n1, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: reviewer, ContentJson: []byte(`{"k":"old"}`),
		Urgency: "background", DeliveryGuarantee: "exactly_once"})
	if err != nil {
		t.Fatal(err)
	}
	n2, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: reviewer, Content: testkit.JSONValue(`"new"`),
		UrgencyLevel: taskv1.NotificationUrgency_NOTIFICATION_URGENCY_CRITICAL, Guarantee: taskv1.DeliveryGuarantee_DELIVERY_GUARANTEE_AT_MOST_ONCE})
	if err != nil {
		t.Fatal(err)
	}
	n3, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: reviewer, Content: testkit.JSONValue(`3`)})
	if err != nil {
		t.Fatal(err)
	}
	sent := []struct {
		n                  *taskv1.Notification
		want               string
		urgency, guarantee string
	}{
		{n1.GetNotification(), `{"k":"old"}`, "background", "exactly_once"},
		{n2.GetNotification(), `"new"`, "critical", "at_most_once"},
		{n3.GetNotification(), `3`, "informational", "at_least_once"}, // the defaults
	}
	for _, tc := range sent {
		if string(tc.n.GetContentJson()) != tc.want || string(testkit.ValueJSON(tc.n.GetContent())) != tc.want ||
			tc.n.GetStatus() != NotifyDelivered || tc.n.GetState() != taskv1.NotificationStatus_NOTIFICATION_STATUS_DELIVERED ||
			tc.n.GetUrgency() != tc.urgency || enumname.Of(tc.n.GetUrgencyLevel()) != tc.urgency ||
			tc.n.GetDeliveryGuarantee() != tc.guarantee || enumname.Of(tc.n.GetGuarantee()) != tc.guarantee ||
			tc.n.GetRecipientKind() != KindAgent || tc.n.GetRecipientType() != taskv1.RecipientKind_RECIPIENT_KIND_AGENT {
			t.Errorf("notification = %v, want content %s, urgency %s, guarantee %s, delivered to an agent, in both forms", tc.n, tc.want, tc.urgency, tc.guarantee)
		}
	}
	inbox, err := c.ListInbox(ctx, &taskv1.ListInboxRequest{AgentId: reviewer})
	if err != nil || len(inbox.GetEntries()) != len(sent) {
		t.Fatalf("inbox = %v, %v", inbox, err)
	}
	for i, tc := range sent {
		if en := inbox.GetEntries()[i]; string(en.GetContentJson()) != tc.want || string(testkit.ValueJSON(en.GetContent())) != tc.want ||
			en.GetUrgency() != tc.urgency || enumname.Of(en.GetUrgencyLevel()) != tc.urgency ||
			en.GetDeliveryGuarantee() != tc.guarantee || enumname.Of(en.GetGuarantee()) != tc.guarantee {
			t.Errorf("inbox entry %d = %v, want %s, %s, %s in both forms", i, en, tc.want, tc.urgency, tc.guarantee)
		}
	}
	// A number the enum does not declare is refused, not taken for the
	// default; so is a name it does not have, sent the old way.
	for _, tc := range []struct {
		in     *taskv1.NotifyRequest
		reason string
	}{
		{&taskv1.NotifyRequest{UrgencyLevel: 9}, "urgency-invalid"},
		{&taskv1.NotifyRequest{Guarantee: 9}, "delivery-guarantee-invalid"},
		{&taskv1.NotifyRequest{Urgency: "URGENT"}, "urgency-invalid"},
		{&taskv1.NotifyRequest{DeliveryGuarantee: "twice"}, "delivery-guarantee-invalid"},
	} {
		tc.in.SenderAgentId, tc.in.Recipient, tc.in.Content = owner, reviewer, testkit.JSONValue(`1`)
		_, err := c.Notify(ctx, tc.in)
		if got, reason, _, _ := grpcerr.Reason(err); got != codes.InvalidArgument || reason != tc.reason {
			t.Errorf("%v: %v, want InvalidArgument %s", tc.in, err, tc.reason)
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

	// A task the caller owns is the other target; the replayed
	// confirmation names it in both forms too.
	tb, err := c.BeginConfirm(ctx, &taskv1.BeginConfirmRequest{CallerAgentId: owner, TargetId: "t-dlg2", Outcome: taskv1.ConfirmationOutcome_CONFIRMATION_OUTCOME_ACCEPTED})
	if err != nil || tb.GetTargetKind() != "task" || tb.GetTarget() != taskv1.ConfirmationTarget_CONFIRMATION_TARGET_TASK {
		t.Fatalf("begin confirm of a task = %v, %v", tb, err)
	}
	if _, err := c.CompleteConfirm(ctx, &taskv1.CompleteConfirmRequest{CallerAgentId: owner, TargetId: "t-dlg2", ClaimToken: tb.GetClaimToken(), AttestationId: "att-2"}); err != nil {
		t.Fatal(err)
	}
	again, err := c.BeginConfirm(ctx, &taskv1.BeginConfirmRequest{CallerAgentId: owner, TargetId: "t-dlg2", Outcome: taskv1.ConfirmationOutcome_CONFIRMATION_OUTCOME_ACCEPTED})
	if rc := again.GetConfirmation(); err != nil || rc.GetTargetKind() != "task" || rc.GetTarget() != taskv1.ConfirmationTarget_CONFIRMATION_TARGET_TASK {
		t.Fatalf("replayed confirmation of a task = %v, %v", again, err)
	}
}
