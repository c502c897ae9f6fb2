package builtin

import (
	"encoding/json"
	"testing"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// An enum parameter is its value, the zero value when absent; a name the
// enum does not have is refused with 400 <name>-invalid instead of being
// sent as the zero value, which policysvc would read as absent.
func TestEnumParam(t *testing.T) {
	for _, tc := range []struct {
		name, param string
		want        taskv1.EscalationPriority
		refused     bool
	}{
		{"named", "urgent", taskv1.EscalationPriority_ESCALATION_PRIORITY_URGENT, false},
		{"absent", "", 0, false},
		{"unknown", "asap", 0, true},
		{"not lower case", "URGENT", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params := map[string]any{}
			if tc.param != "" {
				params["priority"] = tc.param
			}
			got, resp := enumParam[taskv1.EscalationPriority](&Call{Header: &agtp.Header{}, Params: params}, "priority")
			if got != tc.want || (resp != nil) != tc.refused {
				t.Fatalf("enumParam(%q) = %v, %v", tc.param, got, resp)
			}
			if resp != nil {
				var body map[string]any
				if err := json.Unmarshal(resp.Body, &body); err != nil || resp.Status != agtp.StatusBadRequest || body["reason"] != "priority-invalid" {
					t.Fatalf("refusal = %d %s", resp.Status, resp.Body)
				}
			}
		})
	}
}
