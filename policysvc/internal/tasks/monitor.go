package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agtpsuite/agtp/services/textcut"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/subscription"
)

// MONITOR (standard methods §8.3) of an agent's lifecycle: a subscription
// is stored under its target's hash tag and indexed per target, so an
// event finds its subscriptions in O(subscriptions of that target). Every
// replica follows rediskeys.AgentEvents; the notification of one event to
// one subscription has a deterministic id, and enqueueing it is
// idempotent, so N replicas deliver it once.

// Lifecycle events a subscription may name (MonitorAllEvents: all).
const (
	MonitorActivated  = "activated"
	MonitorSuspended  = "suspended"
	MonitorRevoked    = "revoked"
	MonitorDeprecated = "deprecated"
	MonitorReinstated = "reinstated"
	MonitorAllEvents  = "*"
)

var monitorEvents = []string{MonitorActivated, MonitorSuspended, MonitorRevoked, MonitorDeprecated, MonitorReinstated}

// Bounds of MONITOR subscriptions.
const (
	MonitorDefaultTTL   = 24 * time.Hour
	MonitorMaxTTL       = 7 * 24 * time.Hour
	MonitorMaxPerCaller = 100
	// monitorEventMemo is how long the event name of one revision is
	// kept for replicas that read the channel later than the first.
	monitorEventMemo = time.Hour
	// monitorStateTTL bounds how long the last status of a target is
	// kept after its subscriptions ended.
	monitorStateTTL = MonitorMaxTTL + 24*time.Hour
	// monitorEventTimeout bounds the store work for one event.
	monitorEventTimeout = 5 * time.Second
)

// Reasons of MONITOR refusals.
const (
	ReasonMonitorEventsInvalid    = "monitor-events-invalid"
	ReasonMonitorTargetInvalid    = "monitor-target-invalid"
	ReasonCallbackInvalid         = "callback-invalid"
	ReasonCallbackNotAuthorized   = "callback-not-authorized"
	ReasonMonitorTTLInvalid       = "monitor-ttl-invalid"
	ReasonMonitorLimitReached     = "monitor-limit-reached"
	ReasonMonitorNotFound         = "monitor-not-found"
	ReasonSubscriptionIDMalformed = "subscription-id-invalid"
)

type monitorSub struct {
	ID         string    `json:"subscription_id"`
	Subscriber string    `json:"subscriber"`
	Target     string    `json:"target"`
	Events     []string  `json:"events"`
	Callback   string    `json:"callback"`
	Created    time.Time `json:"created"`
	Expires    time.Time `json:"expires"`
}

func (m *monitorSub) proto() *taskv1.MonitorSubscription {
	return &taskv1.MonitorSubscription{SubscriptionId: m.ID, SubscriberAgentId: m.Subscriber, TargetAgentId: m.Target,
		Events: m.Events, Callback: m.Callback, CreatedAt: timestamppb.New(m.Created), ExpiresAt: timestamppb.New(m.Expires)}
}

func (m *monitorSub) wants(event string) bool {
	return slices.Contains(m.Events, MonitorAllEvents) || slices.Contains(m.Events, event)
}

// MonitorEvents checks a subscription's event list: "*" alone, or
// distinct names of monitorEvents.
func MonitorEvents(events []string) ([]string, error) {
	if len(events) == 0 {
		return nil, errors.New("events is required: a list of activated, suspended, revoked, deprecated, reinstated, or [\"*\"]")
	}
	if len(events) > len(monitorEvents) {
		return nil, fmt.Errorf("events names at most %d lifecycle events", len(monitorEvents))
	}
	seen := map[string]bool{}
	for _, e := range events {
		switch {
		case e == MonitorAllEvents && len(events) > 1:
			return nil, errors.New(`"*" stands alone in events`)
		case e != MonitorAllEvents && !slices.Contains(monitorEvents, e):
			return nil, fmt.Errorf("event %q is not a lifecycle event (activated, suspended, revoked, deprecated, reinstated, or \"*\")", textcut.Cut(e, 64))
		case seen[e]:
			return nil, fmt.Errorf("event %q is named twice", e)
		}
		seen[e] = true
	}
	return slices.Clone(events), nil
}

// MonitorCallback reads a callback: agtp://<agent-id> (an inbox here) or
// agtp://<agent-id>@host[:port]. It returns the callback's agent and, for
// a remote one, its host:port.
func MonitorCallback(callback string) (agentID, addr string, ok bool) {
	if len(callback) > maxRecipient {
		return "", "", false
	}
	return agtp.ParseAgentURI(callback)
}

// ownScript registers a subscription with its subscriber, within the cap:
// expired entries are dropped first. KEYS: owned set. ARGV: now ms, cap,
// member, expiry ms. Returns 1, or 0 at the cap.
var ownScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3])
local ttl = tonumber(ARGV[4]) - tonumber(ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1`)

// subscribeScript stores a subscription on its target, drops the
// target's expired ones from the index and seeds the target's last status
// when it is newer than what is held. KEYS: subscription, index, state.
// ARGV: record, expiry ms, ttl ms, id, status, revision, state ttl ms,
// now ms.
var subscribeScript = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[8])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
local rev = tonumber(redis.call('HGET', KEYS[3], 'revision') or '-1')
if ARGV[5] ~= '' and tonumber(ARGV[6]) > rev then
  redis.call('HSET', KEYS[3], 'status', ARGV[5], 'revision', ARGV[6])
end
redis.call('PEXPIRE', KEYS[3], ARGV[7])
return 1`)

// targetStatus names the target's status a MONITOR request reports: the
// enum a current front door sends, else the first release's string. A
// revision with neither is a pending agent (its status is the enum's
// zero value); "" is no status known, and records none.
func targetStatus(in *taskv1.MonitorRequest) string {
	if st := in.GetTargetAgentStatus(); st != identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED {
		if enumname.Of(st) == "" {
			return "" // a status this release does not know: the watch names it
		}
		return callerpolicy.StateName(st)
	}
	//lint:ignore SA1019 a front door of the first release sends the status as a string only
	if st := in.GetTargetStatus(); st != "" {
		return st
	}
	if in.GetTargetRevision() > 0 {
		return callerpolicy.StateName(identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED)
	}
	return ""
}

// Monitor stores a subscription to a target's lifecycle events.
func (s *Server) Monitor(ctx context.Context, in *taskv1.MonitorRequest) (*taskv1.MonitorResponse, error) {
	caller := in.GetCallerAgentId()
	if caller == "" {
		return nil, grpcerr.Unauthenticated("agent-unauthenticated", "MONITOR needs Agent-ID")
	}
	if !agtp.IsCanonicalID(in.GetTargetAgentId()) {
		return nil, grpcerr.InvalidArgument(ReasonMonitorTargetInvalid, "target must be the canonical Agent-ID of an agent registered here")
	}
	events, err := MonitorEvents(in.GetEvents())
	if err != nil {
		return nil, grpcerr.InvalidArgument(ReasonMonitorEventsInvalid, err.Error())
	}
	cbAgent, addr, ok := MonitorCallback(in.GetCallback())
	if !ok {
		return nil, grpcerr.InvalidArgument(ReasonCallbackInvalid, "callback must be an AGTP endpoint naming the receiving agent: agtp://<agent-id> or agtp://<agent-id>@host[:port]")
	}
	// The front door checked this already; the store does not rely on it.
	if cbAgent != caller {
		return nil, grpcerr.PermissionDenied(ReasonCallbackNotAuthorized, "the callback must name the requesting agent itself (standard methods §10.5)")
	}
	if addr != "" {
		if err := s.out.CheckPeer(addr); err != nil {
			return nil, grpcerr.PermissionDenied("recipient-not-allowed", err.Error())
		}
	}
	ttl := MonitorDefaultTTL
	if t := in.GetTtlSeconds(); t != 0 {
		if t < 0 || time.Duration(t)*time.Second > MonitorMaxTTL {
			return nil, grpcerr.InvalidArgument(ReasonMonitorTTLInvalid, fmt.Sprintf("ttl is 1 to %d seconds", int64(MonitorMaxTTL/time.Second)))
		}
		ttl = time.Duration(t) * time.Second
	}
	now := s.opts.Now().UTC()
	sub := &monitorSub{ID: newID("mon-"), Subscriber: caller, Target: in.GetTargetAgentId(), Events: events,
		Callback: in.GetCallback(), Created: now, Expires: now.Add(ttl)}
	member := sub.ID + "|" + sub.Target
	added, err := ownScript.Run(ctx, s.rdb, []string{rediskeys.MonitorOwned(caller)},
		now.UnixMilli(), MonitorMaxPerCaller, member, sub.Expires.UnixMilli()).Int()
	if err != nil {
		return nil, storeErr("monitor", err)
	}
	if added != 1 {
		return nil, grpcerr.Conflict(ReasonMonitorLimitReached, fmt.Sprintf("an agent holds at most %d MONITOR subscriptions; cancel one first", MonitorMaxPerCaller))
	}
	err = subscribeScript.Run(ctx, s.rdb,
		[]string{rediskeys.MonitorSubscription(sub.Target, sub.ID), rediskeys.MonitorIndex(sub.Target), rediskeys.MonitorState(sub.Target)},
		mustJSON(sub), sub.Expires.UnixMilli(), ttl.Milliseconds(), sub.ID, targetStatus(in), in.GetTargetRevision(), monitorStateTTL.Milliseconds(), now.UnixMilli(),
	).Err()
	if err != nil {
		// The subscriber's entry points at nothing; drop it so it does
		// not count against the cap.
		_ = s.rdb.ZRem(context.WithoutCancel(ctx), rediskeys.MonitorOwned(caller), member).Err()
		return nil, storeErr("monitor", err)
	}
	s.log.InfoContext(ctx, "monitor subscription", "subscription_id", sub.ID, "subscriber", caller, "target", sub.Target,
		"events", events, "remote", addr != "", "expires", sub.Expires)
	return &taskv1.MonitorResponse{Subscription: sub.proto()}, nil
}

// CancelMonitor ends one of the caller's subscriptions; another agent's
// is not found.
func (s *Server) CancelMonitor(ctx context.Context, in *taskv1.CancelMonitorRequest) (*taskv1.CancelMonitorResponse, error) {
	notFound := grpcerr.NotFound(ReasonMonitorNotFound, "the caller holds no MONITOR subscription with that subscription_id")
	id := in.GetSubscriptionId()
	if in.GetCallerAgentId() == "" {
		return nil, grpcerr.Unauthenticated("agent-unauthenticated", "a monitor_cancel needs Agent-ID")
	}
	if !validID(id) {
		return nil, grpcerr.InvalidArgument(ReasonSubscriptionIDMalformed, "subscription_id is 1-128 characters of letters, digits and ._:-")
	}
	owned := rediskeys.MonitorOwned(in.GetCallerAgentId())
	members, err := s.rdb.ZRange(ctx, owned, 0, -1).Result()
	if err != nil {
		return nil, storeErr("cancel monitor", err)
	}
	var member, target string
	for _, m := range members {
		if sid, t, ok := strings.Cut(m, "|"); ok && sid == id {
			member, target = m, t
			break
		}
	}
	if member == "" {
		return nil, notFound
	}
	key := rediskeys.MonitorSubscription(target, id)
	var sub monitorSub
	found, err := getJSON(ctx, s.rdb, key, &sub)
	if err != nil {
		return nil, storeErr("cancel monitor", err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		p.ZRem(ctx, rediskeys.MonitorIndex(target), id)
		return nil
	})
	if err != nil {
		return nil, storeErr("cancel monitor", err)
	}
	if err := s.rdb.ZRem(ctx, owned, member).Err(); err != nil {
		return nil, storeErr("cancel monitor", err)
	}
	if !found || !sub.Expires.After(s.opts.Now()) {
		return nil, notFound
	}
	s.log.InfoContext(ctx, "monitor subscription cancelled", "subscription_id", id, "subscriber", in.GetCallerAgentId(), "target", target)
	return &taskv1.CancelMonitorResponse{Subscription: sub.proto()}, nil
}

// eventScript names the lifecycle event of one revision of a monitored
// agent, once for every replica: the first replica to run it compares the
// status with the last one seen and memoises the name; the others read the
// memo. A target without live subscriptions costs one ZCOUNT. KEYS: state,
// memo, index. ARGV: status, revision, memo ttl ms, now ms, state ttl ms.
// Returns the event name, "" for none.
var eventScript = redis.NewScript(`
local memo = redis.call('GET', KEYS[2])
if memo then if memo == '-' then return '' end return memo end
if redis.call('ZCOUNT', KEYS[3], ARGV[4], '+inf') == 0 then return '' end
local prev = redis.call('HGET', KEYS[1], 'status')
local rev = tonumber(redis.call('HGET', KEYS[1], 'revision') or '-1')
if tonumber(ARGV[2]) <= rev then return '' end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'revision', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
local ev = ''
if ARGV[1] ~= prev then
  if ARGV[1] == 'active' then
    if prev == 'suspended' or prev == 'deprecated' then ev = 'reinstated' else ev = 'activated' end
  elseif ARGV[1] == 'retired' then
    ev = 'revoked'
  elseif ARGV[1] ~= 'pending' then
    ev = ARGV[1]
  end
end
if ev == '' then redis.call('SET', KEYS[2], '-', 'PX', ARGV[3]) else redis.call('SET', KEYS[2], ev, 'PX', ARGV[3]) end
return ev`)

// FollowMonitors delivers lifecycle events to MONITOR subscriptions until
// ctx is done. Every replica runs it on the one subscription loop of
// services/subscription.
func (s *Server) FollowMonitors(ctx context.Context) error {
	subscription.Run(ctx, s.rdb, rediskeys.AgentEvents, subscription.Handler{
		Up: func() { s.log.InfoContext(ctx, "monitor: following agent events") },
		Down: func(err error) {
			if err != nil {
				// Pub/sub keeps nothing: an event published now reaches
				// the subscriptions only through another replica.
				s.log.WarnContext(ctx, "monitor: agent events lost until resubscribed", "error", err)
			}
		},
		Message: func(payload string) {
			var ev identityv1.WatchAgentsResponse
			if err := proto.Unmarshal([]byte(payload), &ev); err != nil {
				s.log.WarnContext(ctx, "monitor: unreadable agent event", "error", err)
				return
			}
			ectx, cancel := context.WithTimeout(ctx, monitorEventTimeout)
			defer cancel()
			if err := s.monitorEvent(ectx, &ev); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "monitor: event not delivered", "agent_id", ev.GetAgentId(), "error", err)
			}
		},
	})
	return nil
}

// monitorEvent delivers one agent event to the target's subscriptions.
func (s *Server) monitorEvent(ctx context.Context, ev *identityv1.WatchAgentsResponse) error {
	rec := ev.GetAgent()
	if ev.GetResync() || ev.GetSessionId() != "" || rec == nil || !agtp.IsCanonicalID(ev.GetAgentId()) {
		return nil
	}
	target := ev.GetAgentId()
	rev := strconv.FormatUint(rec.GetRevision(), 10)
	now := s.opts.Now().UTC()
	status := callerpolicy.StateName(rec.GetStatus())
	event, err := eventScript.Run(ctx, s.rdb,
		[]string{rediskeys.MonitorState(target), rediskeys.MonitorEvent(target, rev), rediskeys.MonitorIndex(target)},
		status, rev, monitorEventMemo.Milliseconds(), now.UnixMilli(), monitorStateTTL.Milliseconds()).Text()
	if err != nil {
		return fmt.Errorf("name event: %w", err)
	}
	if event == "" {
		return nil
	}
	index := rediskeys.MonitorIndex(target)
	if err := s.rdb.ZRemRangeByScore(ctx, index, "-inf", strconv.FormatInt(now.UnixMilli(), 10)).Err(); err != nil {
		return fmt.Errorf("prune subscriptions: %w", err)
	}
	ids, err := s.rdb.ZRangeByScore(ctx, index, &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now.UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil || len(ids) == 0 {
		return err
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = rediskeys.MonitorSubscription(target, id)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return fmt.Errorf("load subscriptions: %w", err)
	}
	occurred := now
	if u := rec.GetUpdatedAt(); u != nil {
		occurred = u.AsTime().UTC()
	}
	var errs []error
	for _, v := range vals {
		raw, ok := v.(string)
		if !ok {
			continue
		}
		var sub monitorSub
		if err := json.Unmarshal([]byte(raw), &sub); err != nil || !sub.wants(event) {
			continue
		}
		content := mustJSON(map[string]any{"subscription_id": sub.ID, "target": target, "event": event, "status": status,
			"occurred_at": occurred.Format(time.RFC3339Nano), "revision": rec.GetRevision()})
		if err := s.enqueueMonitorNotification(ctx, &sub, rev, content, now); err != nil {
			errs = append(errs, fmt.Errorf("subscription %s: %w", sub.ID, err))
		}
	}
	return errors.Join(errs...)
}

// MonitorNotificationID is the id of the NOTIFY of one revision of a
// target to one subscription: every replica computes the same.
func MonitorNotificationID(subscriptionID, revision string) string {
	sum := sha256.Sum256([]byte(subscriptionID + "\x00" + revision))
	return "mon-" + hex.EncodeToString(sum[:20])
}

// enqueueMonitorNotification queues one delivery unless a replica has
// already: the notification record is created only if absent, and only
// its creator queues it, so retries, backoff, expiry and the allowlist
// re-check are the retry worker's. The sender is the monitored agent.
func (s *Server) enqueueMonitorNotification(ctx context.Context, sub *monitorSub, rev string, content []byte, now time.Time) error {
	d, err := s.classify(sub.Callback)
	if err != nil {
		return err
	}
	n := &notification{ID: MonitorNotificationID(sub.ID, rev), Sender: sub.Target, Recipient: sub.Callback, Content: content,
		Urgency: informational, Guarantee: AtLeastOnce, Expiry: now.Add(s.opts.NotifyDefaultExpiry), Status: NotifyQueued, Created: now}
	first, err := s.rdb.SetNX(ctx, rediskeys.Notification(n.ID), mustJSON(n), notifyTTL(n.Expiry, now, s.opts.TaskTTL)).Result()
	if err != nil {
		return storeErr("monitor notify", err)
	}
	if !first {
		return nil
	}
	if err := s.queue(ctx, n, d, now); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "monitor notification", "notification_id", n.ID, "subscription_id", sub.ID, "target", sub.Target)
	return nil
}
