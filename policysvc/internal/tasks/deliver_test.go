package tasks

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

func TestClassifyRecipients(t *testing.T) {
	srv, err := New(testkit.StartRedis(t).Client(t), nil, Options{Groups: map[string][]string{"ops": {reviewer, "https://hooks.example/ops"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rcpt, kind, addr string
		code             codes.Code
	}{
		{rcpt: "https://hooks.example/a", kind: KindWebhook},
		{rcpt: reviewer, kind: KindAgent},
		{rcpt: "agtp://" + reviewer, kind: KindAgent},
		{rcpt: "agtp://" + reviewer + "@agents.example", kind: KindRemoteAgent, addr: "agents.example:4480"},
		{rcpt: "agtp://" + reviewer + "@127.0.0.1:9443/", kind: KindRemoteAgent, addr: "127.0.0.1:9443"},
		{rcpt: "group:ops", kind: KindGroup},
		{rcpt: "group:nobody", code: codes.NotFound},
		{rcpt: "http://hooks.example/a", code: codes.InvalidArgument},
		{rcpt: "https://user:pw@hooks.example/a", code: codes.InvalidArgument},
		{rcpt: "agtp://agents.example", code: codes.InvalidArgument},
		{rcpt: "agtp://" + reviewer + "@agents.example/agents/x", code: codes.InvalidArgument},
		{rcpt: "ABCDEF", code: codes.InvalidArgument},
	} {
		t.Run(tc.rcpt, func(t *testing.T) {
			d, err := srv.classify(tc.rcpt)
			if code(err) != tc.code || err == nil && (d.kind != tc.kind || d.addr != tc.addr) {
				t.Fatalf("classify = %+v, %v; want kind %q addr %q code %v", d, err, tc.kind, tc.addr, tc.code)
			}
		})
	}
}

func TestGroupsAreValidatedAtStart(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	for name, groups := range map[string]map[string][]string{
		"empty":        {"g": {}},
		"nested":       {"g": {"group:h"}, "h": {reviewer}},
		"bad member":   {"g": {"http://plain.example"}},
		"bad name":     {"g h": {reviewer}},
		"unknown kind": {"g": {"mailto:x@example"}},
	} {
		if _, err := New(rdb, nil, Options{Groups: groups}); err == nil {
			t.Errorf("%s: New accepted %v", name, groups)
		}
	}
}

func inbox(t *testing.T, c taskv1.TaskServiceClient, agent string) []*taskv1.InboxEntry {
	t.Helper()
	r, err := c.ListInbox(context.Background(), &taskv1.ListInboxRequest{AgentId: agent})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetEntries()
}

func TestNotifyToAnAgentHostedHereLandsInItsInbox(t *testing.T) {
	c, _ := start(t, Options{})
	ctx := context.Background()
	r, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: "agtp://" + reviewer, Content: testkit.JSONValue(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	n := r.GetNotification()
	if enumname.Of(n.GetState()) != NotifyDelivered || enumname.Of(n.GetRecipientType()) != KindAgent || n.GetAttempts() != 1 {
		t.Fatalf("notification = %v, want delivered at once", n)
	}
	got := inbox(t, c, reviewer)
	if len(got) != 1 || got[0].GetNotificationId() != n.GetNotificationId() || got[0].GetSenderAgentId() != owner || string(testkit.ValueJSON(got[0].GetContent())) != `{"n":1}` {
		t.Fatalf("inbox = %v", got)
	}
	g, err := c.GetNotification(ctx, &taskv1.GetNotificationRequest{CallerAgentId: owner, NotificationId: n.GetNotificationId()})
	if err != nil || enumname.Of(g.GetNotification().GetState()) != NotifyDelivered {
		t.Fatalf("sender's view = %v, %v", g, err)
	}
	// Paging: the cursor continues after the last entry.
	if _, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: reviewer, Content: testkit.JSONValue(`{"n":2}`)}); err != nil {
		t.Fatal(err)
	}
	p1, err := c.ListInbox(ctx, &taskv1.ListInboxRequest{AgentId: reviewer, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.ListInbox(ctx, &taskv1.ListInboxRequest{AgentId: reviewer, PageToken: p1.GetNextPageToken()})
	if err != nil || len(p2.GetEntries()) != 1 || string(testkit.ValueJSON(p2.GetEntries()[0].GetContent())) != `{"n":2}` {
		t.Fatalf("second page = %v, %v", p2, err)
	}
}

// TestAShortLivedNotificationDoesNotShortenTheInbox: a delivery to an
// inbox only ever lengthens the inbox's TTL, to its own window (expiry
// plus task_ttl). Set to each delivery's window, a NOTIFY with a short
// expiry, from anyone, cut short the life of earlier notifications that
// had not expired: with a task_ttl below their expiry (an operator's
// choice) the inbox vanished with them.
func TestAShortLivedNotificationDoesNotShortenTheInbox(t *testing.T) {
	c, srv := start(t, Options{TaskTTL: 500 * time.Millisecond})
	ctx := context.Background()
	if _, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: reviewer, Content: testkit.JSONValue(`"important"`),
		Expiry: timestamppb.New(time.Now().Add(time.Hour))}); err != nil {
		t.Fatal(err)
	}
	// Another agent's NOTIFY with an expiry 100 ms ahead.
	if _, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: stranger, Recipient: reviewer, Content: testkit.JSONValue(`"noise"`),
		Expiry: timestamppb.New(time.Now().Add(100 * time.Millisecond))}); err != nil {
		t.Fatal(err)
	}
	if ttl := srv.rdb.PTTL(ctx, rediskeys.Inbox(reviewer)).Val(); ttl < 59*time.Minute {
		t.Fatalf("inbox TTL %v after the short-lived notification, want the first one's hour", ttl)
	}
	time.Sleep(1500 * time.Millisecond) // past the short one's window
	var kept []string
	for _, e := range inbox(t, c, reviewer) {
		kept = append(kept, e.GetSenderAgentId()[:4]+":"+string(testkit.ValueJSON(e.GetContent())))
	}
	if len(kept) == 0 || kept[0] != owner[:4]+`:"important"` {
		t.Fatalf("inbox = %v, want the notification that expires in an hour still there", kept)
	}
	// A longer-lived delivery still lengthens it.
	if _, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: reviewer, Content: testkit.JSONValue(`"later"`),
		Expiry: timestamppb.New(time.Now().Add(2 * time.Hour))}); err != nil {
		t.Fatal(err)
	}
	if ttl := srv.rdb.PTTL(ctx, rediskeys.Inbox(reviewer)).Val(); ttl < 119*time.Minute {
		t.Fatalf("inbox TTL %v after a two-hour notification, want about two hours", ttl)
	}
}

func TestRelayedNotificationIsDeliveredOncePerSender(t *testing.T) {
	c, _ := start(t, Options{})
	ctx := context.Background()
	relay := func(sender, rcpt string) (*taskv1.Notification, error) {
		r, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: sender, Recipient: rcpt, Content: testkit.JSONValue(`"x"`), NotificationId: "ntf-relayed-1"})
		return r.GetNotification(), err
	}
	for i, want := range []bool{false, true, true} {
		n, err := relay(owner, reviewer)
		if err != nil || n.GetDuplicate() != want || n.GetNotificationId() != "ntf-relayed-1" {
			t.Fatalf("delivery %d = %v, %v; want duplicate %v", i, n, err, want)
		}
	}
	// Another sender's id is its own: it cannot suppress this one.
	if n, err := relay(stranger, reviewer); err != nil || n.GetDuplicate() {
		t.Fatalf("other sender = %v, %v", n, err)
	}
	if got := inbox(t, c, reviewer); len(got) != 2 {
		t.Fatalf("inbox holds %d entries, want 2 (one per sender)", len(got))
	}
	// A relayed notification must name an agent hosted here.
	if _, err := relay(owner, "https://hooks.example/x"); code(err) != codes.InvalidArgument {
		t.Fatalf("relay to a webhook = %v", err)
	}
	// The sender's own record is not made on the receiving side.
	if _, err := c.GetNotification(ctx, &taskv1.GetNotificationRequest{CallerAgentId: owner, NotificationId: "ntf-relayed-1"}); code(err) != codes.NotFound {
		t.Fatalf("relayed id readable as a sent notification: %v", err)
	}
}

// agtpReceiver is a minimal AGTP server over TLS 1.3: it answers the
// first `failures` requests 503, then 202, and keeps what it accepted.
type agtpReceiver struct {
	ln       net.Listener
	failures atomic.Int32
	mu       sync.Mutex
	got      []*agtp.Request
}

func startReceiver(t *testing.T) *agtpReceiver {
	t.Helper()
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", agtp.ServerTLSConfig(cert))
	if err != nil {
		t.Fatal(err)
	}
	r := &agtpReceiver{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serve(conn)
		}
	}()
	return r
}

func (r *agtpReceiver) serve(conn net.Conn) {
	defer conn.Close()
	br, bw := bufio.NewReader(conn), bufio.NewWriter(conn)
	for {
		req, err := agtp.ReadRequest(br, agtp.DefaultLimits())
		if err != nil {
			return
		}
		resp := agtp.NewResponse(agtp.StatusUnavailable, agtp.MediaTypeJSON, []byte(`{"reason":"down"}`))
		if r.failures.Add(-1) < 0 {
			r.mu.Lock()
			r.got = append(r.got, req)
			r.mu.Unlock()
			resp = agtp.NewResponse(agtp.StatusAccepted, agtp.MediaTypeJSON, []byte(`{"status":"delivered"}`))
		}
		if err := resp.Write(bw); err != nil || bw.Flush() != nil {
			return
		}
	}
}

func waitSettled(t *testing.T, c taskv1.TaskServiceClient, id string) *taskv1.Notification {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		g, err := c.GetNotification(context.Background(), &taskv1.GetNotificationRequest{CallerAgentId: owner, NotificationId: id})
		if err != nil {
			t.Fatal(err)
		}
		if enumname.Of(g.GetNotification().GetState()) != NotifyQueued {
			return g.GetNotification()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("notification %s still queued", id)
	return nil
}

func runWorker(t *testing.T, srv *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestNotifyToARemoteAgentGoesOverAGTPWithRetries(t *testing.T) {
	rcv := startReceiver(t)
	rcv.failures.Store(2)
	c, srv := start(t, Options{CAFile: testkit.PKI(t).CA(), Outbound: loopbackPeers, NotifyPoll: 10 * time.Millisecond, NotifyBackoff: 20 * time.Millisecond, NotifyMaxBackoff: 50 * time.Millisecond})
	runWorker(t, srv)
	rcpt := "agtp://" + reviewer + "@" + rcv.ln.Addr().String()
	r, err := c.Notify(context.Background(), &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: rcpt, Content: testkit.JSONValue(`{"msg":"hi"}`), UrgencyLevel: taskv1.NotificationUrgency_NOTIFICATION_URGENCY_CRITICAL})
	if err != nil {
		t.Fatal(err)
	}
	id := r.GetNotification().GetNotificationId()
	if n := waitSettled(t, c, id); enumname.Of(n.GetState()) != NotifyDelivered || n.GetAttempts() != 3 || enumname.Of(n.GetRecipientType()) != KindRemoteAgent {
		t.Fatalf("notification = %v, want delivered on attempt 3", n)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.got) != 1 {
		t.Fatalf("receiver accepted %d requests, want 1", len(rcv.got))
	}
	req := rcv.got[0]
	var body notifyBody
	if err := json.Unmarshal(req.Body, &body); err != nil {
		t.Fatal(err)
	}
	if req.Method != "NOTIFY" || req.Header.Get(agtp.HeaderAgentID) != owner || req.Header.Get(HeaderNotificationID) != id ||
		body.Parameters.Recipient != reviewer || string(body.Parameters.Content) != `{"msg":"hi"}` || body.Parameters.Urgency != "critical" {
		t.Fatalf("relayed request = %s %v %s", req.Method, req.Header, req.Body)
	}
}

func TestNotifyToARemoteAgentThatRefusesFailsAtOnce(t *testing.T) {
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", agtp.ServerTLSConfig(cert))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var calls atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br, bw := bufio.NewReader(conn), bufio.NewWriter(conn)
				if _, err := agtp.ReadRequest(br, agtp.DefaultLimits()); err != nil {
					return
				}
				calls.Add(1)
				_ = agtp.NewResponse(agtp.StatusNotFound, agtp.MediaTypeJSON, []byte(`{"reason":"recipient-not-found"}`)).Write(bw)
				_ = bw.Flush()
			}()
		}
	}()
	c, srv := start(t, Options{CAFile: testkit.PKI(t).CA(), Outbound: loopbackPeers, NotifyPoll: 10 * time.Millisecond, NotifyBackoff: 20 * time.Millisecond})
	runWorker(t, srv)
	r, err := c.Notify(context.Background(), &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: "agtp://" + reviewer + "@" + ln.Addr().String(), Content: testkit.JSONValue(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	n := waitSettled(t, c, r.GetNotification().GetNotificationId())
	if enumname.Of(n.GetState()) != NotifyFailed || n.GetAttempts() != 1 || !strings.Contains(n.GetLastError(), "recipient-not-found") || calls.Load() != 1 {
		t.Fatalf("notification = %v after %d calls, want failed after one", n, calls.Load())
	}
}

func TestNotifyToAGroupDeliversToEveryMember(t *testing.T) {
	wh := &webhook{seen: map[string]int{}}
	ts := httptest.NewTLSServer(wh)
	t.Cleanup(ts.Close)
	c, srv := start(t, Options{HTTPClient: ts.Client(), NotifyPoll: 10 * time.Millisecond,
		Groups: map[string][]string{"reviewers": {reviewer, ts.URL + "/hook"}}})
	runWorker(t, srv)
	r, err := c.Notify(context.Background(), &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: "group:reviewers", Content: testkit.JSONValue(`{"all":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	n := r.GetNotification()
	if enumname.Of(n.GetRecipientType()) != KindGroup || len(n.GetDeliveries()) != 2 || enumname.Of(n.GetDeliveries()[0].GetState()) != NotifyDelivered {
		t.Fatalf("receipt = %v", n)
	}
	n = waitSettled(t, c, n.GetNotificationId())
	if enumname.Of(n.GetState()) != NotifyDelivered || len(n.GetDeliveries()) != 2 || n.GetDeliveries()[1].GetNotificationId() != n.GetNotificationId()+".1" {
		t.Fatalf("group = %v", n)
	}
	if got := inbox(t, c, reviewer); len(got) != 1 || got[0].GetNotificationId() != n.GetNotificationId()+".0" {
		t.Fatalf("member inbox = %v", got)
	}
	wh.mu.Lock()
	defer wh.mu.Unlock()
	if len(wh.handled) != 1 || wh.handled[0] != n.GetNotificationId()+".1" {
		t.Fatalf("webhook handled %v", wh.handled)
	}
}

func TestEscalationRoutingIsRecorded(t *testing.T) {
	c, _ := start(t, Options{DefaultRecipient: "https://review.example/escalations"})
	ctx := context.Background()
	r, err := c.Escalate(ctx, &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: "t-1", Reason: "scope_limit", Context: testkit.JSONValue(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	e := r.GetEscalation()
	if e.GetRoutedTo() != "https://review.example/escalations" || enumname.Of(e.GetRouting()) != RoutingPending {
		t.Fatalf("escalation = %v", e)
	}
	if l := escalate(t, c, "t-2").GetEscalation(); enumname.Of(l.GetRouting()) != RoutingListed {
		t.Fatalf("agent recipient routing = %q", enumname.Of(l.GetRouting()))
	}
	for _, st := range []string{RoutingFailed, RoutingDelivered, RoutingFailed} {
		if _, err := c.RecordEscalationRouting(ctx, &taskv1.RecordEscalationRoutingRequest{EscalationId: e.GetEscalationId(), Routing: enumname.Value[taskv1.EscalationRouting](st), Detail: "attempt"}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.ListEscalations(ctx, &taskv1.ListEscalationsRequest{Principal: "ops", RoutedTo: "https://review.example/escalations"})
	if err != nil || len(l.GetEscalations()) != 1 || enumname.Of(l.GetEscalations()[0].GetRouting()) != RoutingDelivered {
		t.Fatalf("listing = %v, %v; a late failure must not undo a delivery", l, err)
	}
	tk, err := c.GetTask(ctx, &taskv1.GetTaskRequest{CallerAgentId: owner, TaskId: "t-1"})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, h := range tk.GetTask().GetHistory() {
		events = append(events, h.GetEvent())
	}
	if strings.Join(events, ",") != "created,escalated,routing_failed,routed" || enumname.Of(tk.GetTask().GetState()) != StatusEscalated {
		t.Fatalf("history = %v, status %s", events, enumname.Of(tk.GetTask().GetState()))
	}
	for _, bad := range []*taskv1.RecordEscalationRoutingRequest{
		{EscalationId: e.GetEscalationId(), Status: "lost"},
		{EscalationId: "esc-unknown", Status: RoutingDelivered},
	} {
		if _, err := c.RecordEscalationRouting(ctx, bad); err == nil {
			t.Errorf("RecordEscalationRouting(%v) accepted", bad)
		}
	}
	if _, err := c.Escalate(ctx, &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: "t-3", Reason: "scope_limit", Context: testkit.JSONValue(`{}`),
		Recipient: "https://user:pw@review.example/"}); code(err) != codes.InvalidArgument {
		t.Fatalf("webhook with credentials = %v", err)
	}
}

func TestGroupsFileAddsGroups(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	file := t.TempDir() + "/groups.json"
	if err := os.WriteFile(file, []byte(`{"oncall":["`+reviewer+`","https://pager.example/hook"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := New(rdb, nil, Options{GroupsFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := srv.classify("group:oncall"); err != nil || d.group != "oncall" {
		t.Fatalf("group from file = %+v, %v", d, err)
	}
	if _, err := New(rdb, nil, Options{GroupsFile: file, Groups: map[string][]string{"oncall": {reviewer}}}); err == nil {
		t.Fatal("a group named twice was accepted")
	}
	if _, err := New(rdb, nil, Options{GroupsFile: file + ".missing"}); err == nil {
		t.Fatal("a missing groups file was accepted")
	}
}
