package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/testkit"
)

// portableAgent is an agent whose Agent Genesis is registered with more
// than one suite (the same Agent-ID everywhere), as a federation would.
type portableAgent struct {
	id      string
	key     ed25519.PrivateKey
	genesis []byte
	name    string
}

func newPortableAgent(t *testing.T, name string, scopes ...string) *portableAgent {
	t.Helper()
	g, priv := signGenesis(t, agentTemplate(name, scopes...))
	return &portableAgent{key: priv, genesis: g, name: name}
}

// registerWith registers the agent with a suite.
func (a *portableAgent) registerWith(t *testing.T, c *Cluster) {
	t.Helper()
	id := c.registerGenesis(t, a.name, a.genesis, a.key)
	if a.id != "" && a.id != id {
		t.Fatalf("%s has Agent-ID %s here and %s elsewhere", a.name, id, a.id)
	}
	a.id = id
}

// hook is an HTTPS receiver standing for a webhook: it answers the first
// `failures` requests 503 and de-duplicates the rest on an id header, as
// a receiver of at-least-once deliveries must.
type hook struct {
	idHeader string
	failures atomic.Int32
	mu       sync.Mutex
	bodies   map[string]map[string]any // by id, first delivery
	headers  map[string]http.Header
	calls    int
	query    []string
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	h.mu.Lock()
	h.calls++
	h.mu.Unlock()
	if h.failures.Add(-1) >= 0 {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	id := r.Header.Get(h.idHeader)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	h.mu.Lock()
	if _, seen := h.bodies[id]; !seen && id != "" {
		h.bodies[id] = m
		h.headers[id] = r.Header.Clone()
		h.query = append(h.query, r.URL.RawQuery)
	}
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (h *hook) handled() map[string]map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]map[string]any{}
	for k, v := range h.bodies {
		out[k] = v
	}
	return out
}

// startHooks serves the escalation and notification webhooks over TLS
// with a certificate of the suites' CA.
func startHooks(t *testing.T, c *Cluster) (addr string, escalations, notifications *hook) {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(c.PKI.Cert(devpki.AGTPServer), c.PKI.Key(devpki.AGTPServer))
	if err != nil {
		t.Fatal(err)
	}
	escalations = &hook{idHeader: "Escalation-ID", bodies: map[string]map[string]any{}, headers: map[string]http.Header{}}
	notifications = &hook{idHeader: "Notification-ID", bodies: map[string]map[string]any{}, headers: map[string]http.Header{}}
	mux := http.NewServeMux()
	mux.Handle("/escalations", escalations)
	mux.Handle("/notify", notifications)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), escalations, notifications
}

// eventually polls f until it reports done or the time is up.
func eventually(t *testing.T, timeout time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMechanicsAcrossSuites runs the mechanics verbs between two suites,
// every service a process: suite A (where the agents work) and suite B
// (another organisation's server hosting a sub-agent and a recipient).
func TestMechanicsAcrossSuites(t *testing.T) {
	// Suite B takes suite A's word on A's agents (a NOTIFY delivered from
	// A, a DELEGATE forwarded by A): A's servers present its AGTP server
	// certificate, and B lists it as a trusted peer (docs/identity.md,
	// "Proven callers"). One test PKI serves both suites.
	pki := testkit.PKI(t)
	b := Start(t, Options{Env: []string{"AGTP_TRUSTED_PEER_CA_FILE=" + pki.CA(), "AGTP_TRUSTED_PEER_NAMES=" + devpki.AGTPServer}})
	worker := newPortableAgent(t, "x-worker", "orders:read", "orders:write", "documents:read")
	// The sub-agent takes delegated work (delegation_permitted).
	sub := newPortableDelegatee(t, "x-sub", "orders:read", "orders:write")
	rcpt := newPortableAgent(t, "x-recipient", "orders:read")
	worker.registerWith(t, b)
	sub.registerWith(t, b)
	rcpt.registerWith(t, b)
	bAddr := b.Procs["frontdoor"].AGTPAddr

	hookAddr, escHook, ntfHook := startHooks(t, b)
	groups := filepath.Join(t.TempDir(), "groups.json")
	if err := os.WriteFile(groups, []byte(`{"team":["agtp://`+rcpt.id+`@`+bAddr+`","https://`+hookAddr+`/notify"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := b.PKI.CA() // one test PKI: both suites and the hooks share its CA
	a := Start(t, Options{Env: []string{
		// Suite B, the hooks and the dead host are all on loopback:
		// listed exactly, so they may be.
		"AGTP_OUTBOUND_WEBHOOKS=https://127.0.0.1:*", "AGTP_OUTBOUND_PEERS=127.0.0.1:*",
	}, ServiceEnv: map[string][]string{
		"policysvc": {
			"AGTP_ESCALATION_RECIPIENT=https://" + hookAddr + "/escalations?token=s3cret",
			"AGTP_NOTIFY_CA_FILE=" + ca, "AGTP_NOTIFY_GROUPS_FILE=" + groups, "AGTP_NOTIFY_MAX_BACKOFF=1s",
		},
		"frontdoor": {"AGTP_UPSTREAM_CA_FILE=" + ca, "AGTP_PEER_CA_FILE=" + ca},
	}})
	worker.registerWith(t, a)
	reviewer := a.registerAgent(t, "x-reviewer", "orders:read")

	call := func(c *Cluster, agent, method, path, body string, headers ...string) (*agtp.Response, map[string]any) {
		t.Helper()
		return c.call(t, agent, method, path, body, headers...)
	}
	aTasks := taskv1.NewTaskServiceClient(a.Dial(t, "policysvc"))
	bTasks := taskv1.NewTaskServiceClient(b.Dial(t, "policysvc"))
	ctx := context.Background()

	t.Run("an escalation resolved by CONFIRM resumes its task", func(t *testing.T) {
		resp, esc := call(a, worker.id, "ESCALATE", "/", `{"task_id":"x-refund","reason":"confidence_threshold","context":{"amount":120},"recipient":"`+reviewer+`"}`)
		escID, _ := esc["escalation_id"].(string)
		if resp.Status != agtp.StatusAccepted || esc["status"] != "pending_review" || esc["task_paused"] != true || esc["routed_to"] != reviewer {
			t.Fatalf("ESCALATE = %d %v", resp.Status, esc)
		}
		if _, tk := call(a, worker.id, "QUERY", "/tasks/x-refund", ""); tk["status"] != "escalated" || tk["paused"] != true {
			t.Fatalf("task while escalated = %v", tk)
		}
		// Routed to the reviewer, an agent hosted here: its inbox has it,
		// once, however often the worker repeats the ESCALATE.
		if resp, again := call(a, worker.id, "ESCALATE", "/", `{"task_id":"x-refund","reason":"confidence_threshold","context":{"amount":120},"recipient":"`+reviewer+`"}`); resp.Status != agtp.StatusAccepted || again["escalation_id"] != escID {
			t.Fatalf("repeated ESCALATE = %d %v", resp.Status, again)
		}
		inbox, err := aTasks.ListInbox(ctx, &taskv1.ListInboxRequest{AgentId: reviewer})
		if err != nil || len(inbox.GetEntries()) != 1 || inbox.GetEntries()[0].GetNotificationId() != escID || esc["routing"] != "delivered" ||
			!strings.Contains(string(testkit.ValueJSON(inbox.GetEntries()[0].GetContent())), `"context":{"amount":120}`) {
			t.Fatalf("reviewer's inbox = %v, %v (routing %v)", inbox.GetEntries(), err, esc["routing"])
		}
		resp, conf := call(a, reviewer, "CONFIRM", "/", `{"target_id":"`+escID+`","status":"accepted"}`)
		if resp.Status != agtp.StatusOK || conf["task_status"] != "running" || conf["attestation_id"] == nil || conf["target_kind"] != "escalation" {
			t.Fatalf("CONFIRM = %d %v", resp.Status, conf)
		}
		// Over the REST gateway the stored confirmation is replayed with
		// its target as the enum's name beside the first release's
		// string, to a client of either release (docs/operations.md,
		// "Enums and documents").
		for _, body := range []string{
			`{"callerAgentId":"` + reviewer + `","targetId":"` + escID + `","outcome":"CONFIRMATION_OUTCOME_ACCEPTED"}`,
			`{"callerAgentId":"` + reviewer + `","targetId":"` + escID + `","status":"accepted"}`,
		} {
			code, begin := restJSON(t, a, "frontdoor", "POST", "/v1/confirmations:begin", body)
			rc, _ := begin["confirmation"].(map[string]any)
			if code != http.StatusOK || rc["target"] != "CONFIRMATION_TARGET_ESCALATION" || rc["targetKind"] != "escalation" ||
				rc["outcome"] != "CONFIRMATION_OUTCOME_ACCEPTED" || rc["status"] != "accepted" {
				t.Fatalf("POST /v1/confirmations:begin %s = %d %v", body, code, begin)
			}
		}
		if _, tk := call(a, worker.id, "QUERY", "/tasks/x-refund", ""); tk["status"] != "running" || tk["paused"] != false {
			t.Fatalf("task after CONFIRM = %v", tk)
		}
		if resp, body := call(a, reviewer, "CONFIRM", "/", `{"target_id":"`+escID+`","status":"maybe"}`); resp.Status != agtp.StatusBadRequest && resp.Status != agtp.StatusUnprocessable {
			t.Fatalf("CONFIRM status maybe = %d %v, want 400 or 422", resp.Status, body)
		}
	})

	t.Run("an escalation without recipient is pushed unchanged to the default webhook, and an admin resolves it", func(t *testing.T) {
		escHook.failures.Store(3) // the executor's three attempts all fail: the push fails, nothing is dropped
		resp, esc := call(a, worker.id, "ESCALATE", "/", `{"task_id":"x-ethics","reason":"ethical_flag","context":{"case":"c-9","notes":["a","b"]},"priority":"urgent"}`)
		escID, _ := esc["escalation_id"].(string)
		if resp.Status != agtp.StatusAccepted || esc["routing"] != "failed" || esc["routed_to"] != "https://"+hookAddr+"/escalations" {
			t.Fatalf("ESCALATE with the webhook down = %d %v (the token must not be shown)", resp.Status, esc)
		}
		list, err := aTasks.ListEscalations(ctx, &taskv1.ListEscalationsRequest{Principal: "ops@example.test"})
		if err != nil {
			t.Fatal(err)
		}
		listed := false
		for _, e := range list.GetEscalations() {
			listed = listed || e.GetEscalationId() == escID && enumname.Of(e.GetRouting()) == "failed"
		}
		if !listed {
			t.Fatalf("escalation %s with a failed push is not listed for the admin: %v", escID, list)
		}
		// Over the REST gateway the enums read as their names and the
		// context as a JSON value, beside the first release's string and
		// base64 fields (docs/operations.md, "Enums and documents").
		rest := restEscalation(t, a, escID)
		ctxB64, _ := rest["contextJson"].(string)
		old, _ := base64.StdEncoding.DecodeString(ctxB64)
		if rest["state"] != "ESCALATION_STATE_PENDING_REVIEW" || rest["status"] != "pending_review" || rest["priorityLevel"] != "ESCALATION_PRIORITY_URGENT" ||
			rest["routing"] != "ESCALATION_ROUTING_FAILED" || rest["routingStatus"] != "failed" ||
			!reflect.DeepEqual(rest["context"], map[string]any{"case": "c-9", "notes": []any{"a", "b"}}) || string(old) != `{"case":"c-9","notes":["a","b"]}` {
			t.Fatalf("GET /v1/escalations lists %v", rest)
		}
		// ESCALATE is idempotent: repeating it answers the same escalation
		// and pushes it again, now that the webhook is up.
		resp, again := call(a, worker.id, "ESCALATE", "/", `{"task_id":"x-ethics","reason":"ethical_flag","context":{"case":"c-9","notes":["a","b"]},"priority":"urgent"}`)
		if resp.Status != agtp.StatusAccepted || again["escalation_id"] != escID || again["routing"] != "delivered" {
			t.Fatalf("repeated ESCALATE = %d %v", resp.Status, again)
		}
		got := escHook.handled()[escID]
		ctxJSON, _ := json.Marshal(got["context"])
		if got == nil || got["task_id"] != "x-ethics" || got["owner_agent_id"] != worker.id || got["reason"] != "ethical_flag" ||
			got["priority"] != "urgent" || string(ctxJSON) != `{"case":"c-9","notes":["a","b"]}` {
			t.Fatalf("webhook received %v", got)
		}
		escHook.mu.Lock()
		q := strings.Join(escHook.query, "&")
		escHook.mu.Unlock()
		if !strings.Contains(q, "token=s3cret") {
			t.Fatalf("the webhook's configured URL was altered: query %q", q)
		}
		// The human principal resolves it through the admin API.
		r, err := aTasks.ResolveEscalation(ctx, &taskv1.ResolveEscalationRequest{Principal: "ops@example.test", EscalationId: escID, Outcome: enumname.Value[taskv1.ConfirmationOutcome]("accepted")})
		if err != nil || enumname.Of(r.GetTask().GetState()) != "running" {
			t.Fatalf("ResolveEscalation = %v, %v", r, err)
		}
		if _, tk := call(a, worker.id, "QUERY", "/tasks/x-ethics", ""); tk["status"] != "running" {
			t.Fatalf("task after admin resolution = %v", tk)
		}
	})

	// The recipient's server goes down (stopped here, in the test itself,
	// because a process restarted in a subtest is stopped with it).
	b.Stop("frontdoor", syscall.SIGTERM)
	var downID string
	t.Run("an at_least_once NOTIFY to an agent whose server is down is kept and retried", func(t *testing.T) {
		resp, n := call(a, worker.id, "NOTIFY", "/", `{"recipient":"agtp://`+rcpt.id+`@`+bAddr+`","content":{"shipment":"s-1"},"delivery_guarantee":"at_least_once"}`)
		downID, _ = n["notification_id"].(string)
		if resp.Status != agtp.StatusAccepted || n["status"] != "queued" || n["recipient_kind"] != "remote_agent" {
			t.Fatalf("NOTIFY = %d %v", resp.Status, n)
		}
		eventually(t, 20*time.Second, "three failed attempts while the recipient is down", func() bool {
			_, n = call(a, worker.id, "QUERY", "/notifications/"+downID, "")
			return n["status"] == "queued" && n["attempts"].(float64) >= 3 && n["last_error"] != nil
		})
	})
	b.Restart(t, "frontdoor")
	t.Run("once the recipient's server is back the NOTIFY is delivered, exactly once", func(t *testing.T) {
		id := downID
		var n map[string]any
		eventually(t, 20*time.Second, "delivery after the recipient's server is back", func() bool {
			_, n = call(a, worker.id, "QUERY", "/notifications/"+id, "")
			return n["status"] != "queued"
		})
		if n["status"] != "delivered" {
			t.Fatalf("notification = %v", n)
		}
		inbox, err := bTasks.ListInbox(ctx, &taskv1.ListInboxRequest{AgentId: rcpt.id})
		if err != nil {
			t.Fatal(err)
		}
		if len(inbox.GetEntries()) != 1 || inbox.GetEntries()[0].GetNotificationId() != id || inbox.GetEntries()[0].GetSenderAgentId() != worker.id ||
			string(testkit.ValueJSON(inbox.GetEntries()[0].GetContent())) != `{"shipment":"s-1"}` {
			t.Fatalf("recipient's inbox = %v", inbox.GetEntries())
		}
		// The same delivery again (a sender whose answer was lost) is
		// recognised by its Notification-ID and not delivered twice.
		resp, dup := call(b, worker.id, "NOTIFY", "/", `{"recipient":"`+rcpt.id+`","content":{"shipment":"s-1"}}`, "Notification-ID", id)
		if resp.Status != agtp.StatusAccepted || dup["duplicate"] != true || dup["notification_id"] != id {
			t.Fatalf("repeated delivery = %d %v", resp.Status, dup)
		}
		if inbox, _ := bTasks.ListInbox(ctx, &taskv1.ListInboxRequest{AgentId: rcpt.id}); len(inbox.GetEntries()) != 1 {
			t.Fatalf("inbox after a repeated delivery holds %d entries, want 1", len(inbox.GetEntries()))
		}
		if resp, body := call(a, worker.id, "NOTIFY", "/", `{"recipient":"`+sub.id+`","content":1}`); resp.Status != agtp.StatusNotFound {
			t.Fatalf("NOTIFY to an agent not hosted here = %d %v, want 404", resp.Status, body)
		}
	})

	t.Run("a NOTIFY to a broadcast group reaches every member", func(t *testing.T) {
		resp, n := call(a, worker.id, "NOTIFY", "/", `{"recipient":"group:team","content":{"standup":"10:00"},"urgency":"background"}`)
		id, _ := n["notification_id"].(string)
		if resp.Status != agtp.StatusAccepted || n["recipient_kind"] != "group" || len(n["deliveries"].([]any)) != 2 {
			t.Fatalf("NOTIFY group = %d %v", resp.Status, n)
		}
		eventually(t, 20*time.Second, "both deliveries", func() bool {
			_, n = call(a, worker.id, "QUERY", "/notifications/"+id, "")
			return n["status"] == "delivered"
		})
		if got := ntfHook.handled()[id+".1"]; got == nil || got["sender"] != worker.id {
			t.Fatalf("webhook member got %v", ntfHook.handled())
		}
		inbox, err := bTasks.ListInbox(ctx, &taskv1.ListInboxRequest{AgentId: rcpt.id})
		if err != nil {
			t.Fatal(err)
		}
		last := inbox.GetEntries()[len(inbox.GetEntries())-1]
		if last.GetNotificationId() != id+".0" || last.GetUrgencyLevel() != taskv1.NotificationUrgency_NOTIFICATION_URGENCY_BACKGROUND {
			t.Fatalf("agent member's inbox = %v", inbox.GetEntries())
		}
		// Over the REST gateway the urgency, the guarantee and the
		// recipient kind read as the enums' names beside the first
		// release's strings.
		code, got := restJSON(t, a, devpki.Admin, "GET", "/v1/notifications/"+id+"?callerAgentId="+worker.id, "")
		rn, _ := got["notification"].(map[string]any)
		if code != http.StatusOK || rn["urgencyLevel"] != "NOTIFICATION_URGENCY_BACKGROUND" || rn["urgency"] != "background" ||
			rn["guarantee"] != "DELIVERY_GUARANTEE_AT_LEAST_ONCE" || rn["deliveryGuarantee"] != "at_least_once" ||
			rn["recipientType"] != "RECIPIENT_KIND_GROUP" || rn["recipientKind"] != "group" {
			t.Fatalf("GET /v1/notifications/%s = %d %v", id, code, got)
		}
		ds, _ := rn["deliveries"].([]any)
		if d, _ := ds[0].(map[string]any); len(ds) != 2 || d["recipientType"] != "RECIPIENT_KIND_REMOTE_AGENT" || d["recipientKind"] != "remote_agent" {
			t.Fatalf("GET /v1/notifications/%s deliveries = %v", id, ds)
		}
		code, got = restJSON(t, b, devpki.Admin, "GET", "/v1/agents/"+rcpt.id+"/inbox", "")
		entries, _ := got["entries"].([]any)
		if re, _ := entries[len(entries)-1].(map[string]any); code != http.StatusOK || re["notificationId"] != id+".0" ||
			re["urgencyLevel"] != "NOTIFICATION_URGENCY_BACKGROUND" || re["urgency"] != "background" ||
			re["guarantee"] != "DELIVERY_GUARANTEE_AT_LEAST_ONCE" || re["deliveryGuarantee"] != "at_least_once" {
			t.Fatalf("GET /v1/agents/%s/inbox = %d %v", rcpt.id, code, got)
		}
	})

	t.Run("NOTIFY over the REST gateway: the enums, the first release's strings, and an undeclared number", func(t *testing.T) {
		for _, tc := range []struct {
			body, urgency, guarantee string
		}{
			{`"urgencyLevel":"NOTIFICATION_URGENCY_CRITICAL","guarantee":"DELIVERY_GUARANTEE_EXACTLY_ONCE"`, "critical", "exactly_once"},
			{`"urgency":"background","deliveryGuarantee":"at_most_once"`, "background", "at_most_once"},
		} {
			code, got := restJSON(t, a, "frontdoor", "POST", "/v1/notifications", `{"senderAgentId":"`+worker.id+`","recipient":"`+reviewer+`","content":{"n":1},`+tc.body+`}`)
			rn, _ := got["notification"].(map[string]any)
			if code != http.StatusOK || rn["urgency"] != tc.urgency || rn["urgencyLevel"] != "NOTIFICATION_URGENCY_"+strings.ToUpper(tc.urgency) ||
				rn["deliveryGuarantee"] != tc.guarantee || rn["guarantee"] != "DELIVERY_GUARANTEE_"+strings.ToUpper(tc.guarantee) ||
				rn["recipientType"] != "RECIPIENT_KIND_AGENT" || rn["recipientKind"] != "agent" {
				t.Fatalf("POST /v1/notifications with %s = %d %v", tc.body, code, got)
			}
		}
		for _, field := range []string{"urgencyLevel", "guarantee"} {
			if code, got := restJSON(t, a, "frontdoor", "POST", "/v1/notifications", `{"senderAgentId":"`+worker.id+`","recipient":"`+reviewer+`","content":1,"`+field+`":9}`); code != http.StatusBadRequest {
				t.Fatalf("POST /v1/notifications with %s 9 = %d %v, want 400", field, code, got)
			}
		}
	})

	task := `{"method":"QUERY","path":"/orders"}`
	exp := time.Now().Add(time.Hour)
	remoteSub := "agtp://" + sub.id + "@" + bAddr
	delegate := func(task string, scope []string, token string) (*agtp.Response, map[string]any) {
		t.Helper()
		s, _ := json.Marshal(scope)
		return call(a, worker.id, "DELEGATE", "/", `{"target_agent_id":"`+remoteSub+`","task":`+task+`,"authority_scope":`+string(s)+`,"delegation_token":"`+token+`","task_id":"x-batch"}`)
	}

	t.Run("a DELEGATE to a sub-agent on another host: too wide a scope and a forged token are refused", func(t *testing.T) {
		wide := []string{"orders:read", "payments:write"}
		if resp, body := delegate(task, wide, delegationToken(t, worker.key, worker.id, sub.id, wide, task, exp)); resp.Status != agtp.StatusAuthorizationRequired || body["reason"] != "scope-required" {
			t.Fatalf("wide DELEGATE = %d %v", resp.Status, body)
		}
		_, forger, _ := ed25519.GenerateKey(rand.Reader)
		scope := []string{"orders:read"}
		if resp, body := delegate(task, scope, delegationToken(t, forger, worker.id, sub.id, scope, task, exp)); resp.Status != agtp.StatusAuthorityChainBroken || body["failing_link"] == nil {
			t.Fatalf("forged DELEGATE = %d %v", resp.Status, body)
		}
	})

	t.Run("a DELEGATE to a sub-agent on another host that does not permit delegation is 551 from that host", func(t *testing.T) {
		// The recipient's Genesis has no delegation_permitted: its host
		// refuses the hop before running anything.
		scope := []string{"orders:read"}
		s, _ := json.Marshal(scope)
		resp, body := call(a, worker.id, "DELEGATE", "/", `{"target_agent_id":"agtp://`+rcpt.id+`@`+bAddr+`","task":`+task+`,"authority_scope":`+string(s)+
			`,"task_id":"x-closed","delegation_token":"`+delegationToken(t, worker.key, worker.id, rcpt.id, scope, task, exp)+`"}`)
		link, _ := body["failing_link"].(string)
		if resp.Status != agtp.StatusAuthorityChainBroken || !strings.Contains(link, "at "+bAddr) || !strings.Contains(link, "delegatee consent") {
			t.Fatalf("DELEGATE to a sub-agent that does not take delegated work = %d %v", resp.Status, body)
		}
		if results, _ := body["results"].([]any); len(results) != 0 {
			t.Fatalf("the refused hop ran %v", results)
		}
	})

	t.Run("a valid DELEGATE runs on the sub-agent's host with the narrowed scope, and INSPECT rebuilds the chain", func(t *testing.T) {
		scope := []string{"orders:read"}
		resp, body := delegate(task, scope, delegationToken(t, worker.key, worker.id, sub.id, scope, task, exp))
		if resp.Status != agtp.StatusOK || body["status"] != "delegated" {
			t.Fatalf("DELEGATE = %d %v", resp.Status, body)
		}
		results, _ := body["results"].([]any)
		remote, _ := body["remote"].(map[string]any)
		if len(results) != 1 || results[0].(map[string]any)["status"] != float64(200) || remote == nil || remote["audit_id"] == "" {
			t.Fatalf("results %v, remote %v", body["results"], remote)
		}
		// Hop 1, on A: the delegator's signed hop record.
		hop, _ := body["audit_id"].(string)
		if resp, _ := call(a, worker.id, "INSPECT", "/?target=audit&audit_id="+hop, ""); resp.Status != agtp.StatusOK ||
			!strings.Contains(string(resp.Body), sub.id) || !strings.Contains(string(resp.Body), bAddr) || !strings.Contains(string(resp.Body), "orders:read") {
			t.Fatalf("INSPECT hop on A = %d %s", resp.Status, resp.Body)
		}
		// Hop 2, on B: B verified the token and signed its own hop record.
		remoteHop, _ := remote["audit_id"].(string)
		if resp, _ := call(b, worker.id, "INSPECT", "/?target=audit&audit_id="+remoteHop, ""); resp.Status != agtp.StatusOK ||
			!strings.Contains(string(resp.Body), worker.id) || !strings.Contains(string(resp.Body), sub.id) || !strings.Contains(string(resp.Body), "orders:read") {
			t.Fatalf("INSPECT hop on B = %d %s", resp.Status, resp.Body)
		}
		// The call the sub-agent ran, in its own chain on B, under the
		// delegator's task.
		subAudit, _ := results[0].(map[string]any)["audit_id"].(string)
		resp, rec := call(b, sub.id, "INSPECT", "/?target=audit&audit_id="+subAudit, "")
		payload, _ := rec["payload"].(map[string]any)
		if resp.Status != agtp.StatusOK || rec["chain_agent_id"] != sub.id || payload["agent_id"] != sub.id || payload["task_id"] != "x-batch" {
			t.Fatalf("INSPECT sub-agent record on B = %d %s", resp.Status, resp.Body)
		}
		if _, tk := call(a, worker.id, "QUERY", "/tasks/x-batch", ""); tk["status"] != "delegated" || !strings.Contains(string(mustJSON(t, tk["history"])), remoteHop) {
			t.Fatalf("delegator's task on A = %v", tk)
		}
		// Narrowed: the sub-agent holds orders:write, but the hop grants
		// orders:read only, so a CANCEL under it is refused on B.
		cancelTask := `{"method":"CANCEL","path":"/orders/ord-1001"}`
		resp, body = delegate(cancelTask, scope, delegationToken(t, worker.key, worker.id, sub.id, scope, cancelTask, exp))
		results, _ = body["results"].([]any)
		if resp.Status != agtp.StatusDelegationFailure || len(results) != 1 || results[0].(map[string]any)["status"] != float64(agtp.StatusAuthorizationRequired) {
			t.Fatalf("DELEGATE beyond the narrowed scope = %d %v", resp.Status, body)
		}
	})

	t.Run("a DELEGATE to a host that cannot be reached is 550", func(t *testing.T) {
		dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(testkit.FreePort(t))) // nobody listens
		scope := []string{"orders:read"}
		s, _ := json.Marshal(scope)
		resp, body := call(a, worker.id, "DELEGATE", "/", `{"target_agent_id":"agtp://`+sub.id+`@`+dead+`","task":`+task+`,"authority_scope":`+string(s)+
			`,"delegation_token":"`+delegationToken(t, worker.key, worker.id, sub.id, scope, task, exp)+`"}`)
		if resp.Status != agtp.StatusDelegationFailure || body["reason"] != "delegation-failure" {
			t.Fatalf("DELEGATE to a dead host = %d %v", resp.Status, body)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// restEscalation is escalation id as GET /v1/escalations on c's policysvc
// gateway lists it to an operator, decoded from the gateway's JSON.
func restEscalation(t *testing.T, c *Cluster, id string) map[string]any {
	t.Helper()
	code, page := restJSON(t, c, devpki.Admin, "GET", "/v1/escalations?principal=ops@example.test", "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/escalations = %d %v", code, page)
	}
	list, _ := page["escalations"].([]any)
	for _, e := range list {
		if e, _ := e.(map[string]any); e["escalationId"] == id {
			return e
		}
	}
	t.Fatalf("GET /v1/escalations does not list %s: %v", id, list)
	return nil
}

// restJSON calls path on c's policysvc REST gateway with the client
// certificate named cert (devpki.Admin, or a service's to call what only
// that service may) and decodes the JSON answer.
func restJSON(t *testing.T, c *Cluster, cert, method, path, body string) (int, map[string]any) {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(c.PKI.Cert(cert), c.PKI.Key(cert))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: c.Admin.Pool(), Certificates: []tls.Certificate{kp}}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(method, "https://"+c.Procs["policysvc"].HTTPAddr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s = %d, not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}
