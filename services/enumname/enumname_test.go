package enumname

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
)

// The name of a value is its name without the enum's prefix, lower case;
// the zero value and undeclared numbers have none.
func TestOf(t *testing.T) {
	for _, tc := range []struct {
		v    protoreflect.Enum
		want string
	}{
		{taskv1.EscalationState_ESCALATION_STATE_PENDING_REVIEW, "pending_review"},
		{taskv1.EscalationPriority_ESCALATION_PRIORITY_URGENT, "urgent"},
		{rcnsv1.ContractState_CONTRACT_STATE_EXPIRED, "expired"},
		{taskv1.EscalationState_ESCALATION_STATE_UNSPECIFIED, ""},
		{taskv1.EscalationState(99), ""},
	} {
		if got := Of(tc.v); got != tc.want {
			t.Errorf("Of(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// Number reads a name back; an unknown name is the zero value.
func TestNumber(t *testing.T) {
	d := taskv1.EscalationState(0).Descriptor()
	for _, tc := range []struct {
		name string
		want taskv1.EscalationState
	}{
		{"pending_review", taskv1.EscalationState_ESCALATION_STATE_PENDING_REVIEW},
		{"deferred", taskv1.EscalationState_ESCALATION_STATE_DEFERRED},
		{"", 0},
		{"bogus", 0},
	} {
		if got := taskv1.EscalationState(Number(d, tc.name)); got != tc.want {
			t.Errorf("Number(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A reader takes the enum when a writer set it, else the old string.
func TestPrefer(t *testing.T) {
	if got := Prefer(taskv1.EscalationState_ESCALATION_STATE_ACCEPTED, "rejected"); got != "accepted" {
		t.Errorf("with the enum set: %q, want accepted", got)
	}
	if got := Prefer(taskv1.EscalationState_ESCALATION_STATE_UNSPECIFIED, "rejected"); got != "rejected" {
		t.Errorf("without it: %q, want the old string", got)
	}
}

// Value is Number typed as the enum; names are lower case only.
func TestValue(t *testing.T) {
	if got := Value[taskv1.TaskStatus]("escalated"); got != taskv1.TaskStatus_TASK_STATUS_ESCALATED {
		t.Errorf("Value(escalated) = %v", got)
	}
	if got := Value[taskv1.TaskStatus]("ESCALATED"); got != 0 {
		t.Errorf("Value(ESCALATED) = %v, want the zero value", got)
	}
}

// A request's unset enum falls back to the old string; a number the enum
// does not declare is named by digits no name check accepts.
func TestRequested(t *testing.T) {
	for _, tc := range []struct {
		v    taskv1.ConfirmationOutcome
		old  string
		want string
	}{
		{taskv1.ConfirmationOutcome_CONFIRMATION_OUTCOME_DEFERRED, "accepted", "deferred"},
		{0, "accepted", "accepted"},
		{0, "", ""},
		{42, "accepted", "42"},
	} {
		if got := Requested(tc.v, tc.old); got != tc.want {
			t.Errorf("Requested(%v, %q) = %q, want %q", tc.v, tc.old, got, tc.want)
		}
	}
}

// Names lists the declared names but the zero value.
func TestNames(t *testing.T) {
	got := Names(taskv1.EscalationPriority(0).Descriptor())
	if len(got) != 3 || got[0] != "urgent" || got[1] != "normal" || got[2] != "low" {
		t.Errorf("Names = %v", got)
	}
}

// A refusal names the parameter with hyphens and offers every name.
func TestRefusal(t *testing.T) {
	reason, msg := Refusal[taskv1.DeliveryGuarantee]("delivery_guarantee")
	if reason != "delivery-guarantee-invalid" || msg != "delivery_guarantee must be one of at_most_once, at_least_once, exactly_once" {
		t.Errorf("Refusal = %q, %q", reason, msg)
	}
	if got := Choices[taskv1.EscalationPriority](); got != "urgent, normal, low" {
		t.Errorf("Choices = %q", got)
	}
}
