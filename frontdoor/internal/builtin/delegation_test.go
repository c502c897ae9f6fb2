package builtin

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

func TestRefusedWhenDelegated(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		refused      bool
	}{
		{"CONFIRM", "/", true},
		{"CONFIRM", "/anything", true},
		{"CONFIRM", AnyPath, true},
		{"ESCALATE", "/", true},
		{"DELEGATE", "/", true},
		{"SUSPEND", "/", true},
		{"RESUME", "/", true},
		{"RETRY", "/", true},
		{"ACTIVATE", "/", true},
		{"DEACTIVATE", "/", true},
		{"REVOKE", "/", true},
		{"REINSTATE", "/", true},
		{"DEPRECATE", "/", true},
		{"QUERY", "/inbox", true},
		{"QUERY", "/inbox/", true},
		{"QUERY", "/inbox?limit=5", true},
		{"QUERY", "/tasks/t-1", true},
		{"QUERY", "/tasks/{task_id}", true},
		{"QUERY", "/notifications/ntf-1", true},
		{"QUERY", "/notifications/{notification_id}", true},
		{"QUERY", "/tasks/", false}, // no task: not the built-in
		{"QUERY", "/orders", false},
		{"QUERY", "/", false},
		{"QUERY", "/inboxes", false},
		{"CREATE", "/orders", false},
		{"NOTIFY", "/", false},
		{"INSPECT", "/", false},
		{"DISCOVER", "/", false},
	} {
		if got := refusedWhenDelegated(tc.method, tc.path); got != tc.refused {
			t.Errorf("refusedWhenDelegated(%s %s) = %v, want %v", tc.method, tc.path, got, tc.refused)
		}
	}
}

// Every built-in of the list refuses a call a DELEGATE runs, whichever
// catalog endpoint reaches it; the same call from the wire goes on.
func TestDelegatedCallsToRefusedBuiltins(t *testing.T) {
	raw, err := os.ReadFile("../../../catalogsvc/internal/builtin/builtins.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Endpoints []struct{ Method, Path string } `json:"endpoints"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	bi := New(Deps{Log: slog.New(slog.DiscardHandler)})
	delegated := &transport.ConnInfo{Peer: &callerproof.Delegated{AgentID: strings.Repeat("b", 64), Level: 3}}
	seen := map[string]bool{}
	for _, ep := range doc.Endpoints {
		if !refusedWhenDelegated(ep.Method, ep.Path) {
			continue
		}
		seen[ep.Method] = true
		f, ok := bi.Lookup(ep.Method, ep.Path)
		if !ok {
			t.Fatalf("%s %s has no built-in", ep.Method, ep.Path)
		}
		call := &Call{Method: ep.Method, Template: ep.Path, Header: &agtp.Header{}, Conn: delegated, AgentID: strings.Repeat("b", 64)}
		resp := f(context.Background(), call)
		if resp.Status != agtp.StatusForbidden || call.Rejection != ReasonDelegatedCallRefused {
			t.Errorf("delegated %s %s = %d %s, want 403 %s", ep.Method, ep.Path, resp.Status, call.Rejection, ReasonDelegatedCallRefused)
		}
		// From the wire (no Agent-ID here): the built-in itself answers.
		call = &Call{Method: ep.Method, Template: ep.Path, Header: &agtp.Header{}, Conn: &transport.ConnInfo{}, Params: map[string]any{}}
		func() {
			defer func() { _ = recover() }() // a built-in without its dependencies may panic; it was reached
			if resp := f(context.Background(), call); resp != nil && call.Rejection == ReasonDelegatedCallRefused {
				t.Errorf("%s %s from the wire was refused as delegated", ep.Method, ep.Path)
			}
		}()
	}
	for method := range delegationRefusals {
		if !seen[method] {
			t.Errorf("%s is listed but no catalog built-in has that method", method)
		}
	}
	// A built-in off the list serves a delegated call.
	f, _ := bi.Lookup("NOTIFY", "/")
	call := &Call{Method: "NOTIFY", Template: "/", Header: &agtp.Header{}, Conn: delegated}
	if resp := f(context.Background(), call); call.Rejection == ReasonDelegatedCallRefused {
		t.Fatalf("delegated NOTIFY = %d %s", resp.Status, call.Rejection)
	}
}

func TestParseDelegatedTask(t *testing.T) {
	many := "[" + strings.TrimSuffix(strings.Repeat(`{"method":"QUERY","path":"/orders"},`, 17), ",") + "]"
	for _, tc := range []struct {
		task  string
		calls int
	}{
		{`{"method":"QUERY","path":"/orders"}`, 1},
		{`[{"method":"QUERY","path":"/orders"},{"method":"CREATE","path":"/orders","body":{"a":1}}]`, 2},
		{`[]`, 0},
		{many, 0},
		{`"QUERY /orders"`, 0},
		{`{"method":"QUERY"}`, 0},
		{`[{"path":"/orders"}]`, 0},
	} {
		calls, bad := parseDelegatedTask([]byte(tc.task))
		if len(calls) != tc.calls || (tc.calls == 0) != (bad != "") {
			t.Errorf("parseDelegatedTask(%.60s) = %d calls, %q; want %d", tc.task, len(calls), bad, tc.calls)
		}
	}
}
