package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Delivery guarantees (core §7.2.13).
const (
	AtMostOnce  = "at_most_once"
	AtLeastOnce = "at_least_once"
	ExactlyOnce = "exactly_once"
)

// Notification statuses.
const (
	NotifyQueued    = "queued"
	NotifyDelivered = "delivered"
	NotifyFailed    = "failed"
	NotifyExpired   = "expired"
)

// HeaderNotificationID carries the notification_id on a webhook POST; the
// receiver de-duplicates on it, which is what makes at_least_once
// delivery exactly once at the handler.
const HeaderNotificationID = "Notification-ID"

type notification struct {
	ID        string          `json:"notification_id"`
	Sender    string          `json:"sender"`
	Recipient string          `json:"recipient"`
	Content   json.RawMessage `json:"content"`
	Urgency   string          `json:"urgency"`
	Guarantee string          `json:"delivery_guarantee"`
	Expiry    time.Time       `json:"expiry"`
	Status    string          `json:"status"`
	Attempts  int             `json:"attempts"`
	LastError string          `json:"last_error,omitempty"`
	Created   time.Time       `json:"created"`
	Delivered time.Time       `json:"delivered,omitzero"`
}

func (n *notification) proto() *taskv1.Notification {
	out := &taskv1.Notification{NotificationId: n.ID, SenderAgentId: n.Sender, Recipient: n.Recipient, ContentJson: n.Content,
		Urgency: n.Urgency, DeliveryGuarantee: n.Guarantee, Expiry: timestamppb.New(n.Expiry), Status: n.Status,
		Attempts: int32(n.Attempts), LastError: n.LastError, CreatedAt: timestamppb.New(n.Created)}
	if !n.Delivered.IsZero() {
		out.DeliveredAt = timestamppb.New(n.Delivered)
	}
	return out
}

// Notify validates and queues a notification. Only https webhook
// recipients are delivered by this worker; agent and broadcast recipients
// are refused until AGTP delivery lands (docs/mechanics.md).
func (s *Server) Notify(ctx context.Context, in *taskv1.NotifyRequest) (*taskv1.NotifyResponse, error) {
	if in.GetSenderAgentId() == "" {
		return nil, grpcerr.Unauthenticated("agent-unauthenticated", "NOTIFY needs Agent-ID")
	}
	rcpt := in.GetRecipient()
	if rcpt == "" || len(rcpt) > maxRecipient {
		return nil, grpcerr.InvalidArgument("recipient-invalid", fmt.Sprintf("recipient is required, at most %d characters", maxRecipient))
	}
	u, err := url.Parse(rcpt)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return nil, grpcerr.InvalidArgument("recipient-unsupported", "this server delivers NOTIFY to https:// webhook recipients only")
	}
	if len(in.GetContentJson()) == 0 || len(in.GetContentJson()) > maxContext || !json.Valid(in.GetContentJson()) {
		return nil, grpcerr.InvalidArgument("content-invalid", fmt.Sprintf("content is required: a JSON value of at most %d bytes", maxContext))
	}
	urgency := in.GetUrgency()
	switch urgency {
	case "":
		urgency = "informational"
	case "critical", "informational", "background":
	default:
		return nil, grpcerr.InvalidArgument("urgency-invalid", "urgency must be critical, informational or background")
	}
	g := in.GetDeliveryGuarantee()
	switch g {
	case "":
		g = AtLeastOnce
	case AtMostOnce, AtLeastOnce, ExactlyOnce:
	default:
		return nil, grpcerr.InvalidArgument("delivery-guarantee-invalid", "delivery_guarantee must be at_most_once, at_least_once or exactly_once")
	}
	now := s.opts.Now().UTC()
	expiry := now.Add(s.opts.NotifyDefaultExpiry)
	if e := in.GetExpiry(); e != nil {
		expiry = e.AsTime().UTC()
		if !expiry.After(now) {
			return nil, grpcerr.InvalidArgument("expiry-passed", "expiry is in the past")
		}
	}
	n := &notification{ID: newID("ntf-"), Sender: in.GetSenderAgentId(), Recipient: rcpt, Content: in.GetContentJson(),
		Urgency: urgency, Guarantee: g, Expiry: expiry, Status: NotifyQueued, Created: now}
	ttl := expiry.Sub(now) + s.opts.TaskTTL
	if err := s.rdb.Set(ctx, rediskeys.Notification(n.ID), mustJSON(n), ttl).Err(); err != nil {
		return nil, storeErr("notify", err)
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: rediskeys.NotificationsLog, MaxLen: 100_000, Approx: true,
			Values: map[string]any{"notification_id": n.ID, "event": "queued", "sender": n.Sender, "recipient": rcpt, "guarantee": g}})
		p.ZAdd(ctx, rediskeys.NotificationsDue, redis.Z{Score: float64(now.UnixMilli()), Member: n.ID})
		return nil
	})
	if err != nil {
		return nil, storeErr("notify queue", err)
	}
	return &taskv1.NotifyResponse{Notification: n.proto()}, nil
}

// GetNotification reads a notification's delivery state for its sender.
func (s *Server) GetNotification(ctx context.Context, in *taskv1.GetNotificationRequest) (*taskv1.GetNotificationResponse, error) {
	var n notification
	ok, err := getJSON(ctx, s.rdb, rediskeys.Notification(in.GetNotificationId()), &n)
	if err != nil {
		return nil, storeErr("get notification", err)
	}
	if !ok || !validID(in.GetNotificationId()) || n.Sender != in.GetCallerAgentId() {
		return nil, grpcerr.NotFound("notification-not-found", "no notification with that notification_id")
	}
	return &taskv1.GetNotificationResponse{Notification: n.proto()}, nil
}

// leaseScript moves up to ARGV[2] due notifications (score <= ARGV[1]) to
// ARGV[3], the end of their lease, and returns them: one worker owns an
// attempt, and a worker that dies leaves it due again when the lease ends.
var leaseScript = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], ARGV[3], id) end
return ids`)

const notifyBatch = 32

// Run is the NOTIFY retry worker; it returns when ctx is done.
func (s *Server) Run(ctx context.Context) error {
	tick := time.NewTicker(s.opts.NotifyPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := s.deliverDue(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "notify worker", "error", err)
		}
	}
}

// deliverDue makes one delivery attempt for each due notification.
func (s *Server) deliverDue(ctx context.Context) error {
	now := s.opts.Now()
	lease := now.Add(s.opts.NotifyTimeout + s.opts.NotifyPoll)
	ids, err := leaseScript.Run(ctx, s.rdb, []string{rediskeys.NotificationsDue},
		now.UnixMilli(), notifyBatch, lease.UnixMilli()).StringSlice()
	if err != nil {
		return fmt.Errorf("lease notifications: %w", err)
	}
	for _, id := range ids {
		if err := s.attempt(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) attempt(ctx context.Context, id string) error {
	key := rediskeys.Notification(id)
	var n notification
	ok, err := getJSON(ctx, s.rdb, key, &n)
	if err != nil {
		return fmt.Errorf("load notification: %w", err)
	}
	if !ok || n.Status != NotifyQueued {
		return s.rdb.ZRem(ctx, rediskeys.NotificationsDue, id).Err()
	}
	now := s.opts.Now().UTC()
	if !now.Before(n.Expiry) {
		n.Status = NotifyExpired
		return s.settle(ctx, &n, 0)
	}
	n.Attempts++
	err = s.post(ctx, &n)
	switch {
	case err == nil:
		n.Status, n.Delivered, n.LastError = NotifyDelivered, now, ""
		return s.settle(ctx, &n, 0)
	case n.Guarantee == AtMostOnce || n.Attempts >= s.opts.NotifyMaxAttempts:
		n.Status, n.LastError = NotifyFailed, err.Error()
		return s.settle(ctx, &n, 0)
	}
	n.LastError = err.Error()
	backoff := s.opts.NotifyBackoff << min(n.Attempts-1, 20)
	if backoff > s.opts.NotifyMaxBackoff || backoff <= 0 {
		backoff = s.opts.NotifyMaxBackoff
	}
	return s.settle(ctx, &n, backoff)
}

// settle stores an attempt's outcome: retry after a delay, or drop the
// notification from the due set for good.
func (s *Server) settle(ctx context.Context, n *notification, retryIn time.Duration) error {
	now := s.opts.Now()
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, rediskeys.Notification(n.ID), mustJSON(n), redis.KeepTTL)
		if retryIn > 0 {
			p.ZAdd(ctx, rediskeys.NotificationsDue, redis.Z{Score: float64(now.Add(retryIn).UnixMilli()), Member: n.ID})
		} else {
			p.ZRem(ctx, rediskeys.NotificationsDue, n.ID)
			p.XAdd(ctx, &redis.XAddArgs{Stream: rediskeys.NotificationsLog, MaxLen: 100_000, Approx: true,
				Values: map[string]any{"notification_id": n.ID, "event": n.Status, "attempts": strconv.Itoa(n.Attempts), "error": n.LastError}})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("settle notification: %w", err)
	}
	if retryIn == 0 {
		s.log.InfoContext(ctx, "notification settled", "notification_id", n.ID, "status", n.Status, "attempts", n.Attempts, "error", n.LastError)
	}
	return nil
}

// post delivers one notification to its webhook.
func (s *Server) post(ctx context.Context, n *notification) error {
	body := mustJSON(map[string]any{"notification_id": n.ID, "sender": n.Sender, "content": n.Content,
		"urgency": n.Urgency, "delivery_guarantee": n.Guarantee, "expiry": n.Expiry.Format(time.RFC3339), "attempt": n.Attempts})
	ctx, cancel := context.WithTimeout(ctx, s.opts.NotifyTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.Recipient, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderNotificationID, n.ID)
	req.Header.Set("Idempotency-Key", n.ID)
	resp, err := s.opts.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %d", resp.StatusCode)
	}
	return nil
}
