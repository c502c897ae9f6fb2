package builtin

import (
	"encoding/json"
	"testing"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// An enum parameter is its value, the zero value when absent; a name the
// enum does not have is refused with 400 <name>-invalid (underscores as
// hyphens) instead of being sent as the zero value, which policysvc
// would read as absent.
func TestEnumParam(t *testing.T) {
	type read func(*Call) (int32, *agtp.Response)
	priority := func(c *Call) (int32, *agtp.Response) {
		v, r := enumParam[taskv1.EscalationPriority](c, "priority")
		return int32(v), r
	}
	guarantee := func(c *Call) (int32, *agtp.Response) {
		v, r := enumParam[taskv1.DeliveryGuarantee](c, "delivery_guarantee")
		return int32(v), r
	}
	for _, tc := range []struct {
		name, param, value string
		read               read
		want               int32
		reason             string // of the refusal; "" for none
	}{
		{"named", "priority", "urgent", priority, int32(taskv1.EscalationPriority_ESCALATION_PRIORITY_URGENT), ""},
		{"absent", "priority", "", priority, 0, ""},
		{"unknown", "priority", "asap", priority, 0, "priority-invalid"},
		{"not lower case", "priority", "URGENT", priority, 0, "priority-invalid"},
		{"named with an underscore", "delivery_guarantee", "exactly_once", guarantee, int32(taskv1.DeliveryGuarantee_DELIVERY_GUARANTEE_EXACTLY_ONCE), ""},
		{"unknown with an underscore", "delivery_guarantee", "twice", guarantee, 0, "delivery-guarantee-invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params := map[string]any{}
			if tc.value != "" {
				params[tc.param] = tc.value
			}
			got, resp := tc.read(&Call{Header: &agtp.Header{}, Params: params})
			if got != tc.want || (resp != nil) != (tc.reason != "") {
				t.Fatalf("enumParam(%q) = %v, %v", tc.value, got, resp)
			}
			if resp != nil {
				var body map[string]any
				if err := json.Unmarshal(resp.Body, &body); err != nil || resp.Status != agtp.StatusBadRequest || body["reason"] != tc.reason {
					t.Fatalf("refusal = %d %s, want 400 %s", resp.Status, resp.Body, tc.reason)
				}
			}
		})
	}
}
