package tasks

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/outbound"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

func monitorReq(caller, target, callback string, events ...string) *taskv1.MonitorRequest {
	return &taskv1.MonitorRequest{CallerAgentId: caller, TargetAgentId: target, Events: events, Callback: callback,
		TargetAgentStatus: identityv1.AgentStatus_AGENT_STATUS_ACTIVE, TargetRevision: 1}
}

func TestMonitorRefusals(t *testing.T) {
	c, _ := start(t, Options{Outbound: outbound.Options{Peers: []string{"peer.example:4480"}}})
	ctx := context.Background()
	for name, tc := range map[string]struct {
		req    *taskv1.MonitorRequest
		code   codes.Code
		reason string
	}{
		"no caller":        {monitorReq("", reviewer, "agtp://"+owner, "*"), codes.Unauthenticated, "agent-unauthenticated"},
		"bad target":       {monitorReq(owner, "nope", "agtp://"+owner, "*"), codes.InvalidArgument, ReasonMonitorTargetInvalid},
		"no events":        {monitorReq(owner, reviewer, "agtp://"+owner), codes.InvalidArgument, ReasonMonitorEventsInvalid},
		"unknown event":    {monitorReq(owner, reviewer, "agtp://"+owner, "exploded"), codes.InvalidArgument, ReasonMonitorEventsInvalid},
		"star and more":    {monitorReq(owner, reviewer, "agtp://"+owner, "*", "suspended"), codes.InvalidArgument, ReasonMonitorEventsInvalid},
		"twice":            {monitorReq(owner, reviewer, "agtp://"+owner, "suspended", "suspended"), codes.InvalidArgument, ReasonMonitorEventsInvalid},
		"webhook callback": {monitorReq(owner, reviewer, "https://hooks.example/x", "*"), codes.InvalidArgument, ReasonCallbackInvalid},
		"bare id callback": {monitorReq(owner, reviewer, owner, "*"), codes.InvalidArgument, ReasonCallbackInvalid},
		"another's inbox":  {monitorReq(owner, reviewer, "agtp://"+stranger, "*"), codes.PermissionDenied, ReasonCallbackNotAuthorized},
		"another's remote": {monitorReq(owner, reviewer, "agtp://"+stranger+"@peer.example", "*"), codes.PermissionDenied, ReasonCallbackNotAuthorized},
		"unlisted host":    {monitorReq(owner, reviewer, "agtp://"+owner+"@evil.example", "*"), codes.PermissionDenied, outbound.Reason},
		"ttl over the max": {func() *taskv1.MonitorRequest {
			r := monitorReq(owner, reviewer, "agtp://"+owner, "*")
			r.TtlSeconds = 8 * 86400
			return r
		}(), codes.InvalidArgument, ReasonMonitorTTLInvalid},
		"negative ttl": {func() *taskv1.MonitorRequest {
			r := monitorReq(owner, reviewer, "agtp://"+owner, "*")
			r.TtlSeconds = -1
			return r
		}(), codes.InvalidArgument, ReasonMonitorTTLInvalid},
		"cancel no id":      {nil, codes.InvalidArgument, ReasonSubscriptionIDMalformed},
		"cancel unknown id": {nil, codes.NotFound, ReasonMonitorNotFound},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			switch {
			case tc.req != nil:
				_, err = c.Monitor(ctx, tc.req)
			case strings.Contains(name, "no id"):
				_, err = c.CancelMonitor(ctx, &taskv1.CancelMonitorRequest{CallerAgentId: owner})
			default:
				_, err = c.CancelMonitor(ctx, &taskv1.CancelMonitorRequest{CallerAgentId: owner, SubscriptionId: "mon-nothing"})
			}
			if got, reason, _, _ := grpcerr.Reason(err); got != tc.code || reason != tc.reason {
				t.Fatalf("err = %v, want %v %s", err, tc.code, tc.reason)
			}
		})
	}
}

// event publishes an agent event as identitysvc does.
func event(t *testing.T, rdb redis.UniversalClient, id string, st identityv1.AgentStatus, rev uint64) {
	t.Helper()
	b, err := proto.Marshal(&identityv1.WatchAgentsResponse{AgentId: id, Agent: &identityv1.AgentRecord{AgentId: id, Status: st, Revision: rev, UpdatedAt: timestamppb.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Publish(context.Background(), rediskeys.AgentEvents, b).Err(); err != nil {
		t.Fatal(err)
	}
}

type monitorContent struct {
	SubscriptionID string `json:"subscription_id"`
	Target         string `json:"target"`
	Event          string `json:"event"`
	Status         string `json:"status"`
	OccurredAt     string `json:"occurred_at"`
	Revision       uint64 `json:"revision"`
}

func contents(t *testing.T, entries []*taskv1.InboxEntry) []monitorContent {
	t.Helper()
	var out []monitorContent
	for _, e := range entries {
		var m monitorContent
		if err := json.Unmarshal(testkit.ValueJSON(e.GetContent()), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestMonitorDeliversOnceAcrossReplicas runs two followers on one Redis,
// as two policysvc replicas do: every event reaches the subscriber's inbox
// once, named from the previous status, and only the events it asked for.
func TestMonitorDeliversOnceAcrossReplicas(t *testing.T) {
	r := testkit.StartRedis(t)
	var servers []*Server
	var clients []taskv1.TaskServiceClient
	ctx := testkit.Context(t)
	for range 2 {
		rdb := r.Client(t)
		srv, err := New(rdb, slog.New(slog.DiscardHandler), Options{})
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, srv)
		go func() { _ = srv.FollowMonitors(ctx) }()
	}
	clients = append(clients, startWith(t, servers[0]))
	pub := r.Client(t)
	testkit.WaitFor(t, 5*time.Second, "two followers subscribed", func() bool {
		n, err := pub.PubSubNumSub(context.Background(), rediskeys.AgentEvents).Result()
		return err == nil && n[rediskeys.AgentEvents] == 2
	})
	all, err := clients[0].Monitor(ctx, monitorReq(owner, reviewer, "agtp://"+owner, "*"))
	if err != nil {
		t.Fatal(err)
	}
	sub := all.GetSubscription()
	if !strings.HasPrefix(sub.GetSubscriptionId(), "mon-") || sub.GetTargetAgentId() != reviewer ||
		sub.GetExpiresAt().AsTime().Sub(sub.GetCreatedAt().AsTime()) != MonitorDefaultTTL {
		t.Fatalf("subscription = %v", sub)
	}
	// A second subscriber asks for reinstated only.
	if _, err := clients[0].Monitor(ctx, monitorReq(stranger, reviewer, "agtp://"+stranger, MonitorReinstated)); err != nil {
		t.Fatal(err)
	}
	event(t, pub, reviewer, identityv1.AgentStatus_AGENT_STATUS_SUSPENDED, 2)
	event(t, pub, reviewer, identityv1.AgentStatus_AGENT_STATUS_SUSPENDED, 2) // a repeated publication
	event(t, pub, reviewer, identityv1.AgentStatus_AGENT_STATUS_ACTIVE, 3)
	event(t, pub, owner, identityv1.AgentStatus_AGENT_STATUS_SUSPENDED, 7) // nobody monitors it
	testkit.WaitFor(t, 5*time.Second, "two notifications", func() bool { return len(inbox(t, clients[0], owner)) >= 2 })
	testkit.WaitFor(t, 5*time.Second, "one notification", func() bool { return len(inbox(t, clients[0], stranger)) >= 1 })
	// Both followers have handled everything once the memo of the last
	// revision exists and the second had time to read it; an extra
	// delivery would be in the inbox by then.
	time.Sleep(200 * time.Millisecond)
	// Replicas race to deliver successive revisions, so the inbox may hold
	// them in either order; each names its revision.
	got := contents(t, inbox(t, clients[0], owner))
	slices.SortFunc(got, func(a, b monitorContent) int { return cmp.Compare(a.Revision, b.Revision) })
	if len(got) != 2 || got[0].Event != MonitorSuspended || got[0].Status != "suspended" || got[1].Event != MonitorReinstated ||
		got[0].SubscriptionID != sub.GetSubscriptionId() || got[0].Target != reviewer || got[0].OccurredAt == "" {
		t.Fatalf("owner's inbox = %+v", got)
	}
	if s := inbox(t, clients[0], owner)[0].GetSenderAgentId(); s != reviewer {
		t.Fatalf("sender = %s, want the monitored agent", s)
	}
	if got := contents(t, inbox(t, clients[0], stranger)); len(got) != 1 || got[0].Event != MonitorReinstated {
		t.Fatalf("stranger's inbox = %+v", got)
	}
	// Cancelled: later events deliver nothing; another agent cannot
	// cancel it (not found) and a repeated cancel is not found.
	if _, err := clients[0].CancelMonitor(ctx, &taskv1.CancelMonitorRequest{CallerAgentId: stranger, SubscriptionId: sub.GetSubscriptionId()}); grpcerr.StatusFor(code(err)) != 404 {
		t.Fatalf("cancel by another agent: %v", err)
	}
	if _, err := clients[0].CancelMonitor(ctx, &taskv1.CancelMonitorRequest{CallerAgentId: owner, SubscriptionId: sub.GetSubscriptionId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := clients[0].CancelMonitor(ctx, &taskv1.CancelMonitorRequest{CallerAgentId: owner, SubscriptionId: sub.GetSubscriptionId()}); code(err) != codes.NotFound {
		t.Fatalf("second cancel: %v", err)
	}
	if n, _ := pub.Exists(ctx, rediskeys.MonitorSubscription(reviewer, sub.GetSubscriptionId())).Result(); n != 0 {
		t.Fatal("the cancelled subscription is still stored")
	}
	event(t, pub, reviewer, identityv1.AgentStatus_AGENT_STATUS_SUSPENDED, 4)
	event(t, pub, reviewer, identityv1.AgentStatus_AGENT_STATUS_ACTIVE, 5)
	testkit.WaitFor(t, 5*time.Second, "stranger's second reinstated", func() bool { return len(inbox(t, clients[0], stranger)) >= 2 })
	if got := inbox(t, clients[0], owner); len(got) != 2 {
		t.Fatalf("owner got %d notifications after cancelling, want 2", len(got))
	}
}

// TestMonitorEventNames: each lifecycle change is named from the status
// before it, and the content carries the state's wire name (RETIRED is
// the event revoked and the state retired).
func TestMonitorEventNames(t *testing.T) {
	r := testkit.StartRedis(t)
	srv, err := New(r.Client(t), slog.New(slog.DiscardHandler), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	go func() { _ = srv.FollowMonitors(ctx) }()
	client := startWith(t, srv)
	pub := r.Client(t)
	testkit.WaitFor(t, 5*time.Second, "the follower subscribed", func() bool {
		n, err := pub.PubSubNumSub(context.Background(), rediskeys.AgentEvents).Result()
		return err == nil && n[rediskeys.AgentEvents] == 1
	})
	if _, err := client.Monitor(ctx, monitorReq(owner, reviewer, "agtp://"+owner, "*")); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		status      identityv1.AgentStatus
		event, name string
	}{
		{identityv1.AgentStatus_AGENT_STATUS_DEPRECATED, MonitorDeprecated, "deprecated"},
		{identityv1.AgentStatus_AGENT_STATUS_ACTIVE, MonitorReinstated, "active"},
		{identityv1.AgentStatus_AGENT_STATUS_SUSPENDED, MonitorSuspended, "suspended"},
		{identityv1.AgentStatus_AGENT_STATUS_RETIRED, MonitorRevoked, "retired"},
	}
	for i, w := range want {
		event(t, pub, reviewer, w.status, uint64(i+2))
		testkit.WaitFor(t, 5*time.Second, w.event, func() bool { return len(inbox(t, client, owner)) >= i+1 })
	}
	got := contents(t, inbox(t, client, owner))
	if len(got) != len(want) {
		t.Fatalf("inbox = %+v", got)
	}
	for i, w := range want {
		if got[i].Event != w.event || got[i].Status != w.name {
			t.Errorf("change %d: event %q status %q, want %q %q", i, got[i].Event, got[i].Status, w.event, w.name)
		}
	}
}

func TestMonitorExpiresAndIsCapped(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	c, srv := start(t, Options{Now: clock})
	ctx := context.Background()
	req := monitorReq(owner, reviewer, "agtp://"+owner, MonitorSuspended)
	req.TtlSeconds = 60
	r, err := c.Monitor(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.GetSubscription().GetExpiresAt().AsTime().Sub(clock()); got != time.Minute {
		t.Fatalf("expires in %v, want 1m", got)
	}
	// Past its expiry the subscription delivers nothing.
	now.Add((61 * time.Second).Milliseconds())
	ev := &identityv1.WatchAgentsResponse{AgentId: reviewer, Agent: &identityv1.AgentRecord{AgentId: reviewer, Status: identityv1.AgentStatus_AGENT_STATUS_SUSPENDED, Revision: 2}}
	if err := srv.monitorEvent(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if got := inbox(t, c, owner); len(got) != 0 {
		t.Fatalf("an expired subscription delivered %v", got)
	}
	// The cap counts live subscriptions only. The front door names the
	// target's status now (suspended since revision 2).
	for i := range MonitorMaxPerCaller {
		req := monitorReq(owner, reviewer, "agtp://"+owner, "*")
		if i%2 == 0 {
			req.TargetAgentStatus = identityv1.AgentStatus_AGENT_STATUS_SUSPENDED
		} else {
			// As a front door of the first release names it.
			//lint:ignore SA1019 a front door of the first release sends the status as a string
			req.TargetAgentStatus, req.TargetStatus = 0, "suspended"
		}
		req.TargetRevision = 2
		if _, err := c.Monitor(ctx, req); err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
	}
	_, err = c.Monitor(ctx, monitorReq(owner, reviewer, "agtp://"+owner, "*"))
	if _, reason, _, _ := grpcerr.Reason(err); reason != ReasonMonitorLimitReached {
		t.Fatalf("over the cap: %v", err)
	}
	// The index finds the target's subscriptions only.
	rdb := srv.rdb
	if n, _ := rdb.ZCard(ctx, rediskeys.MonitorIndex(reviewer)).Result(); n != MonitorMaxPerCaller {
		t.Fatalf("index holds %d, want %d (the expired one pruned)", n, MonitorMaxPerCaller)
	}
	// One event, one delivery per live subscription.
	ev.Agent.Status, ev.Agent.Revision = identityv1.AgentStatus_AGENT_STATUS_ACTIVE, 3
	if err := srv.monitorEvent(ctx, ev); err != nil {
		t.Fatal(err)
	}
	got := contents(t, inbox(t, c, owner))
	if len(got) != MonitorMaxPerCaller || got[0].Event != MonitorReinstated {
		t.Fatalf("got %d deliveries (%+v), want %d reinstated", len(got), got[:min(len(got), 1)], MonitorMaxPerCaller)
	}
}

func TestMonitorNotificationIDIsDeterministic(t *testing.T) {
	a, b := MonitorNotificationID("mon-1", "7"), MonitorNotificationID("mon-1", "7")
	if a != b || a == MonitorNotificationID("mon-1", "8") || a == MonitorNotificationID("mon-2", "7") || !validID(a) {
		t.Fatalf("ids %s %s", a, b)
	}
}
