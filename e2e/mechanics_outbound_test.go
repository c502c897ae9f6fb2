package e2e

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/outbound"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestMechanicsOutboundDestinations: the destinations an agent names
// (ESCALATE and NOTIFY webhooks, NOTIFY to agtp://<id>@host, DELEGATE to
// a sub-agent's host) are checked against the operator's lists before
// anything is stored or sent (docs/mechanics.md, "Outbound
// destinations"). Two webhook servers run on loopback: `listed` is on
// the list exactly, `unlisted` is not (one of its paths is on it only
// by a wildcard host, which may not be loopback).
func TestMechanicsOutboundDestinations(t *testing.T) {
	pki := &Cluster{PKI: testkit.PKI(t)} // the hooks' certificate: the CA the cluster gets
	listedAddr, listedEsc, listedNtf := startHooks(t, pki)
	unlistedAddr, unlistedEsc, unlistedNtf := startHooks(t, pki)
	_, unlistedPort, _ := net.SplitHostPort(unlistedAddr)
	ca := pki.PKI.CA()
	c := Start(t, Options{
		Env: []string{
			outbound.EnvWebhooks + "=https://" + listedAddr + ",https://*:" + unlistedPort + "/notify",
			outbound.EnvPeers + "=agtp.partner.test",
		},
		ServiceEnv: map[string][]string{
			"policysvc": {"AGTP_NOTIFY_CA_FILE=" + ca},
			"frontdoor": {"AGTP_UPSTREAM_CA_FILE=" + ca},
		},
	})
	worker := c.registerAgent(t, "o-worker", "orders:read", "orders:write")
	sub := c.registerAgent(t, "o-sub", "orders:read")
	call := func(method, path, body string) (*agtp.Response, map[string]any) {
		t.Helper()
		resp := c.roundTrip(t, withJSON(request(t, method, path, agtp.HeaderAgentID, worker), body))
		return resp, errorBody(t, resp)
	}
	refused := func(t *testing.T, what string, resp *agtp.Response, body map[string]any) {
		t.Helper()
		if resp.Status != agtp.StatusForbidden || body["reason"] != outbound.Reason {
			t.Fatalf("%s = %d %v, want 403 %s", what, resp.Status, body, outbound.Reason)
		}
		if strings.Contains(string(resp.Body), "token=") {
			t.Fatalf("%s: the refusal shows the URL's query: %s", what, resp.Body)
		}
	}

	t.Run("a caller-named webhook off the list is refused and nothing is stored or delivered", func(t *testing.T) {
		for _, url := range []string{
			"https://" + unlistedAddr + "/escalations?token=x", // not listed at all
			"https://" + unlistedAddr + "/notify",              // listed by wildcard host only, and it is loopback
			"https://169.254.169.254/notify",                   // the metadata address, whatever the list says
		} {
			resp, body := call("NOTIFY", "/", `{"recipient":"`+url+`","content":{"n":1}}`)
			refused(t, "NOTIFY "+url, resp, body)
			resp, body = call("ESCALATE", "/", `{"task_id":"o-esc-off","reason":"scope_limit","context":{"a":1},"recipient":"`+url+`"}`)
			refused(t, "ESCALATE "+url, resp, body)
		}
		if resp, tk := call("QUERY", "/tasks/o-esc-off", ""); resp.Status != agtp.StatusNotFound {
			t.Fatalf("a refused ESCALATE left a task: %d %v", resp.Status, tk)
		}
	})

	t.Run("a NOTIFY to an AGTP host off the list is refused", func(t *testing.T) {
		for _, host := range []string{"agtp.elsewhere.test", c.Procs["frontdoor"].AGTPAddr, "127.0.0.1:" + strings.Split(c.Procs["policysvc"].GRPCAddr, ":")[1]} {
			resp, body := call("NOTIFY", "/", `{"recipient":"agtp://`+sub+`@`+host+`","content":{"n":2}}`)
			refused(t, "NOTIFY to "+host, resp, body)
		}
	})

	t.Run("a DELEGATE to a host off the list is refused before the hop is signed", func(t *testing.T) {
		resp, body := call("DELEGATE", "/", `{"target_agent_id":"agtp://`+sub+`@127.0.0.1:7102","task":{"method":"QUERY","path":"/orders"},`+
			`"authority_scope":["orders:read"],"delegation_token":"x","task_id":"o-dlg"}`)
		refused(t, "DELEGATE", resp, body)
		if resp, tk := call("QUERY", "/tasks/o-dlg", ""); resp.Status != agtp.StatusNotFound {
			t.Fatalf("a refused DELEGATE recorded a hop: %d %v", resp.Status, tk)
		}
	})

	t.Run("listed webhooks are reached", func(t *testing.T) {
		resp, esc := call("ESCALATE", "/", `{"task_id":"o-esc-ok","reason":"scope_limit","context":{"a":1},"recipient":"https://`+listedAddr+`/escalations"}`)
		escID, _ := esc["escalation_id"].(string)
		if resp.Status != agtp.StatusAccepted || esc["routing"] != "delivered" || listedEsc.handled()[escID] == nil {
			t.Fatalf("ESCALATE to a listed webhook = %d %v; webhook got %v", resp.Status, esc, listedEsc.handled())
		}
		resp, n := call("NOTIFY", "/", `{"recipient":"https://`+listedAddr+`/notify","content":{"n":3}}`)
		id, _ := n["notification_id"].(string)
		if resp.Status != agtp.StatusAccepted || n["status"] != "queued" {
			t.Fatalf("NOTIFY to a listed webhook = %d %v", resp.Status, n)
		}
		eventually(t, 10*time.Second, "the listed webhook receives the notification", func() bool { return listedNtf.handled()[id] != nil })
	})

	// The worker has had time to deliver; nothing reached the unlisted server.
	time.Sleep(500 * time.Millisecond)
	for name, h := range map[string]*hook{"escalations": unlistedEsc, "notifications": unlistedNtf} {
		h.mu.Lock()
		calls := h.calls
		h.mu.Unlock()
		if calls != 0 {
			t.Errorf("the unlisted %s webhook was called %d times", name, calls)
		}
	}
}
