package tasks

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/outbound"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// loopbackPeers lets callers name webhooks and AGTP hosts on 127.0.0.1,
// listed exactly (so they may be loopback), as the tests' receivers are.
var loopbackPeers = outbound.Options{Webhooks: []string{"https://127.0.0.1:*"}, Peers: []string{"127.0.0.1:*"}}

// TestCallerNamedDestinationsAreChecked: a recipient off the list, or on
// it only by wildcard while written as an internal address, is refused
// 403 recipient-not-allowed before anything is stored; listed ones and
// the operator's own recipients are accepted.
func TestCallerNamedDestinationsAreChecked(t *testing.T) {
	c, srv := start(t, Options{
		DefaultRecipient: "https://pager.internal/escalations?token=t",
		Groups:           map[string][]string{"ops": {"https://10.0.0.7/ops", "agtp://" + reviewer + "@10.0.0.8"}},
		Outbound: outbound.Options{
			Webhooks: []string{"https://hooks.example.com/agtp", "https://*/open"},
			Peers:    []string{"agtp.partner.example", "*:*"},
		},
	})
	ctx := context.Background()
	for _, tc := range []struct {
		rcpt string
		ok   bool
	}{
		{rcpt: "https://hooks.example.com/agtp/n1", ok: true},
		{rcpt: "https://hooks.example.com/other"},
		{rcpt: "https://evil.example/agtp"},
		{rcpt: "https://169.254.169.254/open/latest/meta-data"},
		{rcpt: "https://127.0.0.1:7102/open"},
		{rcpt: "https://public.example/open", ok: true},
		{rcpt: "agtp://" + reviewer + "@agtp.partner.example", ok: true},
		{rcpt: "agtp://" + reviewer + "@other.example:4480", ok: true}, // "*:*"
		{rcpt: "agtp://" + reviewer + "@127.0.0.1:7102"},
		{rcpt: "agtp://" + reviewer + "@[::1]"},
		{rcpt: "agtp://" + reviewer + "@localhost:4480"},
		{rcpt: "agtp://" + reviewer + "@10.1.1.1"},
		{rcpt: "group:ops", ok: true}, // the operator's members: private, unlisted, trusted
		{rcpt: reviewer, ok: true},    // hosted here: nothing is dialled
	} {
		t.Run(tc.rcpt, func(t *testing.T) {
			due := srv.rdb.ZCard(ctx, rediskeys.NotificationsDue).Val()
			logged := srv.rdb.XLen(ctx, rediskeys.NotificationsLog).Val()
			_, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: tc.rcpt, Content: testkit.JSONValue(`1`)})
			if tc.ok {
				if err != nil {
					t.Fatalf("NOTIFY = %v, want accepted", err)
				}
				return
			}
			if _, reason, _, _ := grpcerr.Reason(err); code(err) != codes.PermissionDenied || reason != outbound.Reason {
				t.Fatalf("NOTIFY = %v, want PermissionDenied %s", err, outbound.Reason)
			}
			if srv.rdb.ZCard(ctx, rediskeys.NotificationsDue).Val() != due || srv.rdb.XLen(ctx, rediskeys.NotificationsLog).Val() != logged {
				t.Fatal("a refused NOTIFY was stored")
			}
		})
	}

	// ESCALATE: a caller-named webhook off the list is refused and no task
	// comes into being; the configured default (private, unlisted) and the
	// same URL named by the caller are the operator's.
	_, err := c.Escalate(ctx, &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: "t-off", Reason: "scope_limit", Context: testkit.JSONValue(`{}`),
		Recipient: "https://evil.example/hook"})
	if _, reason, _, _ := grpcerr.Reason(err); code(err) != codes.PermissionDenied || reason != outbound.Reason {
		t.Fatalf("ESCALATE to an unlisted webhook = %v", err)
	}
	if _, err := c.GetTask(ctx, &taskv1.GetTaskRequest{CallerAgentId: owner, TaskId: "t-off"}); code(err) != codes.NotFound {
		t.Fatalf("a refused ESCALATE left a task: %v", err)
	}
	for i, rcpt := range []string{"", "https://pager.internal/escalations?token=t", "https://hooks.example.com/agtp"} {
		r, err := c.Escalate(ctx, &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: "t-ok-" + string(rune('a'+i)), Reason: "scope_limit",
			Context: testkit.JSONValue(`{}`), Recipient: rcpt})
		if err != nil || enumname.Of(r.GetEscalation().GetRouting()) != RoutingPending {
			t.Fatalf("ESCALATE to %q = %v, %v", rcpt, r, err)
		}
	}
}

// TestDeliveryRefusesInternalAddressesAtDialTime: a recipient whose name
// resolves to loopback when the worker dials it (as a name re-pointed
// after it was accepted would) fails at once, on the first attempt,
// without a connection being made: webhook and AGTP alike.
func TestDeliveryRefusesInternalAddressesAtDialTime(t *testing.T) {
	addr, accepted := testkit.CountingListener(t)
	_, port, _ := net.SplitHostPort(addr)
	_, srv := start(t, Options{Outbound: outbound.Options{Webhooks: []string{"https://*:*"}, Peers: []string{"*:*"}},
		NotifyBackoff: time.Millisecond, NotifyMaxBackoff: time.Millisecond})
	ctx := context.Background()
	now := srv.opts.Now().UTC()
	for _, tc := range []struct {
		rcpt string
		d    dest
	}{
		{rcpt: "https://localhost:" + port + "/hook", d: dest{kind: KindWebhook}},
		{rcpt: "agtp://" + reviewer + "@localhost:" + port, d: dest{kind: KindRemoteAgent, agentID: reviewer, addr: "localhost:" + port}},
	} {
		// Queued past the request-time check, as if the name had
		// resolved elsewhere then.
		n := &notification{ID: newID("ntf-"), Sender: owner, Recipient: tc.rcpt, Content: []byte(`1`), Urgency: "informational",
			Guarantee: AtLeastOnce, Expiry: now.Add(time.Hour), Status: NotifyQueued, Created: now}
		if err := srv.queue(ctx, n, tc.d, now); err != nil {
			t.Fatal(err)
		}
		if err := srv.deliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		var got notification
		if ok, err := getJSON(ctx, srv.rdb, rediskeys.Notification(n.ID), &got); !ok || err != nil {
			t.Fatalf("notification %s not stored: %v", n.ID, err)
		}
		if got.Status != NotifyFailed || got.Attempts != 1 || !strings.Contains(got.LastError, "loopback") {
			t.Fatalf("%s: status %s after %d attempts, error %q; want failed at once naming loopback", tc.rcpt, got.Status, got.Attempts, got.LastError)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the loopback listener accepted %d connections", n)
	}
}

// TestOperatorRecipientsMayBeInternal: a broadcast group member the
// operator configured is dialled even on loopback, with no list entry.
func TestOperatorRecipientsMayBeInternal(t *testing.T) {
	addr, accepted := testkit.CountingListener(t)
	_, port, _ := net.SplitHostPort(addr)
	c, srv := start(t, Options{Groups: map[string][]string{"ops": {"https://127.0.0.1:" + port + "/hook", "agtp://" + reviewer + "@127.0.0.1:" + port}}})
	ctx := context.Background()
	if _, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: "group:ops", Content: testkit.JSONValue(`1`), Guarantee: taskv1.DeliveryGuarantee_DELIVERY_GUARANTEE_AT_MOST_ONCE}); err != nil {
		t.Fatal(err)
	}
	if err := srv.deliverDue(ctx); err != nil {
		t.Fatal(err)
	}
	// The listener is no TLS server: both attempts fail after connecting.
	deadline := time.Now().Add(5 * time.Second)
	for accepted.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := accepted.Load(); n < 2 {
		t.Fatalf("the operator's loopback members got %d connections, want 2", n)
	}
}

// TestQueuedNotificationsFollowANarrowedList: a notification accepted
// while its webhook was listed fails at its next attempt once the list
// no longer has it (as after a restart with a narrower list), without a
// connection being made.
func TestQueuedNotificationsFollowANarrowedList(t *testing.T) {
	addr, accepted := testkit.CountingListener(t)
	_, port, _ := net.SplitHostPort(addr)
	c, srv := start(t, Options{Outbound: loopbackPeers})
	ctx := context.Background()
	r, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: "https://127.0.0.1:" + port + "/hook", Content: testkit.JSONValue(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if srv.out, err = outbound.New(outbound.Options{Webhooks: []string{"https://hooks.example.com"}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.deliverDue(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := c.GetNotification(ctx, &taskv1.GetNotificationRequest{CallerAgentId: owner, NotificationId: r.GetNotification().GetNotificationId()})
	if err != nil || enumname.Of(g.GetNotification().GetState()) != NotifyFailed || !strings.Contains(g.GetNotification().GetLastError(), "no longer") {
		t.Fatalf("notification after the list was narrowed = %v, %v", g.GetNotification(), err)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the delisted webhook got %d connections", n)
	}
}
