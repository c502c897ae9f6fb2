package e2e

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestSuspendFromAnotherClientKeyIsRefused: a Session-ID is bound to the
// Agent-ID and the TLS client key it was first seen with, and "a later
// request with another agent or key is 401 session-binding-mismatch"
// (docs/frontdoor.md, "Sessions"; D-session-binding). SUSPEND names the
// session in its body; a connection with another key of the same agent
// (here its Genesis issuer key) cannot suspend it, take its resumption
// nonce and lock its owner out.
func TestSuspendFromAnotherClientKeyIsRefused(t *testing.T) {
	c := Start(t, Options{InProcess: true})
	agent, issuer := c.registerAgentKey(t, "sess-owner", "orders:read")
	// The same agent proven by another key: its Genesis issuer key.
	otherKey := c.clientCert(t, issuer)
	sid := "sess-" + strings.Repeat("7e", 12)
	query := func(conn *agtpConn) *agtp.Response {
		return conn.do(request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderSessionID, sid))
	}
	if resp := query(c.dialAs(t, agent)); resp.Status != 200 {
		t.Fatalf("owner's first use = %d %s", resp.Status, resp.Body)
	}
	// Control: the other key cannot use the session.
	if resp := query(c.dialAGTPWith(t, otherKey)); resp.Status != 401 || errorBody(t, resp)["reason"] != "session-binding-mismatch" {
		t.Fatalf("the session used without the owner's key = %d %s, want 401 session-binding-mismatch", resp.Status, resp.Body)
	}
	susp := c.dialAGTPWith(t, otherKey).do(withJSON(request(t, "SUSPEND", "/", agtp.HeaderAgentID, agent),
		`{"session_id":"`+sid+`","reason":"awaiting_input","checkpoint":{"planted":true}}`))
	if susp.Status/100 == 2 {
		after := query(c.dialAs(t, agent))
		t.Fatalf("SUSPEND of a session bound to another client key = %d %s; the owner's next request = %d %s",
			susp.Status, susp.Body, after.Status, after.Body)
	}
}

// TestSuspendedSessionIsRefusedInZeroRTT: "requests in the session get
// 409 session-suspended ... on every front door" (docs/frontdoor.md,
// "Sessions"). A QUERY read from QUIC 0-RTT data, whose client is not yet
// proven, is answered 425 and sent again after the handshake, where the
// session is checked: it was served unchecked before.
func TestSuspendedSessionIsRefusedInZeroRTT(t *testing.T) {
	c := Start(t, Options{InProcess: true, Env: []string{"AGTP_CALLER_PROOF=informational"}})
	// A bare Agent-ID, taken on read-only endpoints, binds the session to
	// the agent and no client key.
	agent := c.registerAgent(t, "sess-0rtt", "orders:read")
	sid := "sess-" + strings.Repeat("5c", 12)
	addr := c.Procs["frontdoor"].AGTPAddr
	bare := func() *agtp.Request {
		return request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderSessionID, sid)
	}
	if resp := c.dialAGTPWith(t, nil).do(bare()); resp.Status != 200 {
		t.Fatalf("first use = %d %s", resp.Status, resp.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cache := tls.NewLRUClientSessionCache(8)
	quic := func() (client.ConnInfo, *agtp.Response) {
		t.Helper()
		cl, err := client.New(client.Options{RootCAs: c.Admin.Pool(), ServerName: "localhost", QUIC: true, TLS: &tls.Config{ClientSessionCache: cache}})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		// Any attempt in early data counts: a 425 sends the request again
		// after the handshake, and that attempt's connection is not early.
		var info client.ConnInfo
		resp, err := cl.Do(client.WithTrace(ctx, &client.Trace{GotConn: func(ci client.ConnInfo) { info.EarlyData = info.EarlyData || ci.EarlyData }}), bare(), addr)
		if err != nil {
			t.Fatal(err)
		}
		return info, resp
	}
	if _, resp := quic(); resp.Status != 200 { // gets a session ticket
		t.Fatalf("QUIC use = %d %s", resp.Status, resp.Body)
	}
	otherReplica := identityv1.NewIdentityServiceClient(c.DialAs(t, "identitysvc", "frontdoor"))
	if _, err := otherReplica.SuspendSession(ctx, &identityv1.SuspendSessionRequest{SessionId: sid, AgentId: agent, Reason: "awaiting_input"}); err != nil {
		t.Fatalf("SuspendSession: %v", err)
	}
	testkit.WaitFor(t, 5*time.Second, "suspension seen over TCP", func() bool {
		return c.dialAGTPWith(t, nil).do(bare()).Status == 409
	})
	for i := 0; i < 20; i++ {
		info, resp := quic()
		if resp.Status == 200 {
			t.Fatalf("a QUERY in the suspended session over QUIC (sent as early data: %v) = 200 %.120s, want 409 session-suspended", info.EarlyData, resp.Body)
		}
		if info.EarlyData {
			return
		}
	}
	t.Fatal("no request went out as early data: the test did not exercise 0-RTT")
}
