package pipeline

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

func TestRequestKey(t *testing.T) {
	for _, tc := range []struct {
		name, method, header, input string
		hasHeader                   bool
		wantKey                     string
		wantPresent                 bool
		wantStatus                  int
	}{
		{"REGISTER: the parameter is the key", "REGISTER", "", `{"idempotency_key":"k1"}`, false, "k1", true, 0},
		{"REGISTER: a blank header yields to the parameter", "REGISTER", "", `{"idempotency_key":"k1"}`, true, "k1", true, 0},
		{"REGISTER: header and the same parameter", "REGISTER", "k1", `{"idempotency_key":"k1"}`, true, "k1", true, 0},
		{"REGISTER: header and another parameter is 400", "REGISTER", "k1", `{"idempotency_key":"k2"}`, true, "", false, 400},
		{"REGISTER: no key at all", "REGISTER", "", `{}`, false, "", false, 0},
		{"another method ignores the parameter", "CREATE", "", `{"idempotency_key":"k1"}`, false, "", false, 0},
		{"another method keeps the header", "CREATE", "h", `{"idempotency_key":"k1"}`, true, "h", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := &exchange{req: &agtp.Request{}}
			if tc.hasHeader {
				x.req.Header.Set(agtp.HeaderIdempotencyKey, tc.header)
			}
			key, present, resp := requestKey(x, tc.method, []byte(tc.input))
			if tc.wantStatus != 0 {
				if resp == nil || resp.Status != tc.wantStatus || !strings.Contains(string(resp.Body), ReasonIdempotencyKeyMismatch) {
					t.Fatalf("resp = %+v, want %d %s", resp, tc.wantStatus, ReasonIdempotencyKeyMismatch)
				}
				return
			}
			if resp != nil || key != tc.wantKey || present != tc.wantPresent {
				t.Fatalf("requestKey = %q %v %+v, want %q %v", key, present, resp, tc.wantKey, tc.wantPresent)
			}
		})
	}
}

func TestGrantScopes(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string
		ok   bool
	}{
		{`["orders:read","orders:write"]`, "orders:read, orders:write", true},
		{`"orders:read, orders:write"`, "orders:read, orders:write", true},
		{`[]`, "", false},
		{`""`, "", false},
		{`["Orders"]`, "", false},
		{`42`, "", false},
		{``, "", false},
	} {
		set, ok := grantScopes(json.RawMessage(tc.raw))
		if ok != tc.ok || (ok && set.String() != tc.want) {
			t.Errorf("grantScopes(%s) = %v %v, want %q %v", tc.raw, set, ok, tc.want, tc.ok)
		}
	}
}

func TestTaskRunIndexesOnlyOperatorRequestsWithTaskID(t *testing.T) {
	const agent = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
	operator := &catalogv1.Endpoint{HandlerName: "demo.orders.create"}
	builtin := &catalogv1.Endpoint{HandlerName: builtinPrefix + "retry"}
	for _, tc := range []struct {
		name    string
		agent   string
		taskID  string
		ep      *catalogv1.Endpoint
		body    []byte
		query   string
		indexed bool
	}{
		{"operator endpoint with Task-ID", agent, "t-1", operator, []byte(`{"a":1}`), "x=1", true},
		{"no Task-ID", agent, "", operator, nil, "", false},
		{"anonymous", "", "t-1", operator, nil, "", false},
		{"built-in", agent, "t-1", builtin, nil, "", false},
		{"body over the bound", agent, "t-1", operator, make([]byte, maxTaskRunBody+1), "", false},
		{"overlong Task-ID", agent, strings.Repeat("t", maxTaskIDLen+1), operator, nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &agtp.Request{Method: "CREATE", Path: "/orders", RawQuery: tc.query, Body: tc.body}
			if tc.taskID != "" {
				req.Header.Set(agtp.HeaderTaskID, tc.taskID)
			}
			x := &exchange{req: req, agentID: tc.agent, idemKey: "k-1"}
			run := taskRun(x, tc.ep)
			if (run != nil) != tc.indexed {
				t.Fatalf("taskRun = %v, want indexed %v", run, tc.indexed)
			}
			if run != nil && (run.GetTarget() != "/orders?x=1" || run.GetIdempotencyKey() != "k-1" || string(run.GetBody()) != `{"a":1}`) {
				t.Fatalf("taskRun = %v", run)
			}
		})
	}
}

// The policy request's client_ip is the host part of the peer address as
// net.Addr's String writes it; the transports' addresses take a shorter
// way to it, which must agree.
func TestClientIPIsTheHostOfTheAddress(t *testing.T) {
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 443, Zone: "eth0"},
		&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1"), Port: 1},
		&net.TCPAddr{Port: 80},
		&net.TCPAddr{Zone: "lo", Port: 80},
		&net.TCPAddr{IP: net.IP{1, 2, 3}, Port: 80},
		&net.UDPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4433},
		&net.UDPAddr{IP: net.ParseIP("fe80::2"), Port: 4433, Zone: "wlan0"},
		&net.UnixAddr{Name: "/run/agtp.sock", Net: "unix"},
	} {
		want, _, err := net.SplitHostPort(a.String())
		if err != nil {
			want = a.String()
		}
		if got := clientIP(&transport.ConnInfo{RemoteAddr: a}); got != want {
			t.Errorf("%T %s: client IP %q, want %q", a, a, got, want)
		}
	}
	if got := clientIP(&transport.ConnInfo{}); got != "" {
		t.Errorf("no address: %q", got)
	}
}
