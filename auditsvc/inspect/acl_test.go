package inspect

import (
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/services/grpcerr"
)

func TestReadACLModes(t *testing.T) {
	op := strings.Repeat("ab", 32)
	cases := []struct {
		name    string
		acl     ACL
		caller  Caller
		subject string
		status  int // 0: allowed
	}{
		{"public-anonymous", NewACL(Public), Caller{}, "agent-1", 0},
		{"agent-only-anonymous", NewACL(AgentOnly), Caller{}, "agent-1", 401},
		{"agent-only-certificate-of-no-agent", NewACL(AgentOnly), Caller{KeyFingerprint: op}, "agent-1", 403},
		{"agent-only-own-records", NewACL(AgentOnly), Caller{AgentID: "agent-1", KeyFingerprint: op}, "agent-1", 0},
		{"agent-only-other-agent", NewACL(AgentOnly), Caller{AgentID: "agent-2"}, "agent-1", 403},
		{"agent-only-server-chain", NewACL(AgentOnly), Caller{AgentID: "agent-2"}, "", 403},
		{"operator-only-no-cert", NewACL(OperatorOnly, strings.ToUpper(op)), Caller{AgentID: "agent-1"}, "agent-1", 401},
		{"operator-only-listed", NewACL(OperatorOnly, strings.ToUpper(op)), Caller{KeyFingerprint: op}, "agent-1", 0},
		{"operator-only-unlisted", NewACL(OperatorOnly, op), Caller{KeyFingerprint: strings.Repeat("cd", 32)}, "agent-1", 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.acl.Allow(tc.caller, tc.subject)
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			code, _, text, md := grpcerr.Reason(err)
			if grpcerr.StatusFor(code) != tc.status {
				t.Fatalf("status %d, want %d (%v)", grpcerr.StatusFor(code), tc.status, err)
			}
			if md["mode"] != string(tc.acl.Mode) {
				t.Fatalf("error does not name the mode: %v", md)
			}
			if strings.Contains(text, tc.subject) && tc.subject != "" || strings.Contains(text, op) {
				t.Fatalf("error leaks an identity or the allowlist: %q", text)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Public, "public": Public, "agent_only": AgentOnly, "operator_only": OperatorOnly} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("agent-only"); err == nil {
		t.Error("unknown mode accepted")
	}
}
