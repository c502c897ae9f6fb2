package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

func TestSendAddressesByURI(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, echo)
	c := newClient(t, srv.caFile, client.Options{})
	ctx := testContext(t)
	resp, err := c.Send(ctx, agtp.MethodQuery, "agtp://"+srv.addr()+"/orders?status=open", []byte(`{"n":1}`), agtp.Header{{Name: "Task-ID", Value: "t-2"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Body) != `QUERY /orders?status=open {"n":1}` || resp.Header.Get(agtp.HeaderTaskID) != "t-2" {
		t.Fatalf("got %q %v", resp.Body, resp.Header)
	}
	// No path: "/".
	resp, err = c.Send(ctx, agtp.MethodDiscover, "agtp://"+srv.addr(), nil, nil)
	if err != nil || string(resp.Body) != "DISCOVER / " {
		t.Fatalf("no path: %v %q", err, resp.Body)
	}
}

func TestSendForm1aDoesNotSendTheAddressedAgentAsCaller(t *testing.T) {
	target := strings.Repeat("cd", 32)
	srv := startServer(t, transport.Options{DisableQUIC: true}, echo)
	c := newClient(t, srv.caFile, client.Options{AgentID: agentA})
	resp, err := c.Send(testContext(t), agtp.MethodDescribe, "agtp://"+target+"@"+srv.addr()+"/agents/"+target, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get(agtp.HeaderAgentID); got != agentA {
		t.Fatalf("Agent-ID = %q, want the caller %q", got, agentA)
	}
	if string(resp.Body) != "DESCRIBE /agents/"+target+" " {
		t.Fatalf("target %q", resp.Body)
	}
}

func TestSendForm1aRejectsAnotherAgentsIdentityDocument(t *testing.T) {
	target := strings.Repeat("cd", 32)
	other := strings.Repeat("ef", 32)
	srv := startServer(t, transport.Options{DisableQUIC: true}, func(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		id := strings.TrimPrefix(req.Path, "/agents/")
		return agtp.NewResponse(200, agtp.MediaTypeIdentityJSON+"; charset=utf-8", []byte(`{"agent_id":"`+id+`","name":"x"}`))
	})
	c := newClient(t, srv.caFile, client.Options{})
	ctx := testContext(t)
	for _, tc := range []struct {
		name, path string
		ok         bool
	}{
		{"same agent", "/agents/" + target, true},
		{"other agent", "/agents/" + other, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.Send(ctx, agtp.MethodDescribe, "agtp://"+target+"@"+srv.addr()+tc.path, nil, nil)
			if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, client.ErrAgentMismatch) {
				t.Fatalf("err = %v", err)
			}
			if resp == nil {
				t.Fatal("the response is returned with the error, for inspection")
			}
		})
	}
	// Form 2 has no agent to check against.
	if _, err := c.Send(ctx, agtp.MethodDescribe, "agtp://"+srv.addr()+"/agents/"+other, nil, nil); err != nil {
		t.Fatalf("Form 2: %v", err)
	}
}

func TestSendRefusesURIsWithoutAServer(t *testing.T) {
	c := newClient(t, "", client.Options{InsecureSkipVerify: true})
	for _, tc := range []struct {
		uri    string
		target error
		reason string
	}{
		{"agtp://" + strings.Repeat("ab", 32), client.ErrNoAddress, ""},
		{"agtp://" + strings.Repeat("AB", 32), nil, agtp.ReasonInvalidCanonicalID},
		{"http://example.com/", nil, agtp.ReasonInvalidURIForm},
		{"agtp://host/a#frag", nil, agtp.ReasonInvalidURIForm},
	} {
		_, err := c.Send(testContext(t), agtp.MethodQuery, tc.uri, nil, nil)
		var pe *agtp.ProtocolError
		switch {
		case tc.target != nil && !errors.Is(err, tc.target):
			t.Errorf("%s: err = %v, want %v", tc.uri, err, tc.target)
		case tc.reason != "" && (!errors.As(err, &pe) || pe.Reason != tc.reason):
			t.Errorf("%s: err = %v, want reason %s", tc.uri, err, tc.reason)
		}
	}
}

func TestNewURIRequestContentType(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		hdr  agtp.Header
		want string
	}{
		{"json body gets the AGTP media type", `{"a":1}`, nil, agtp.MediaTypeJSON},
		{"explicit type wins", `{"a":1}`, agtp.Header{{Name: "content-type", Value: "application/json"}}, "application/json"},
		{"non-JSON body gets none", `hello`, nil, ""},
		{"no body gets none", ``, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			req, _, err := client.NewURIRequest(agtp.MethodQuery, "agtp://h.example/x", body, tc.hdr)
			if err != nil {
				t.Fatal(err)
			}
			if got := req.Header.Get(agtp.HeaderContentType); got != tc.want {
				t.Fatalf("Content-Type %q, want %q", got, tc.want)
			}
		})
	}
}

func TestIdempotentMethods(t *testing.T) {
	for m, want := range map[string]bool{
		"QUERY": true, "DISCOVER": true, "DESCRIBE": true, "INSPECT": true, "SUMMARIZE": true, "PLAN": true,
		"ESCALATE": true, "CONFIRM": true, "EXECUTE": false, "PROPOSE": false, "DELEGATE": false, "NOTIFY": false,
		"SUSPEND": false, "REVOKE": false, "PURCHASE": false,
	} {
		if got := client.Idempotent(&agtp.Request{Method: m}); got != want {
			t.Errorf("Idempotent(%s) = %v, want %v (core §7.3)", m, got, want)
		}
	}
}
