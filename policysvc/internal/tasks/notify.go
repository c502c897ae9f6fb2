package tasks

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/outbound"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Delivery guarantees (core §7.2.13) the code acts on; the whole set is
// the DeliveryGuarantee enum's names.
const (
	AtMostOnce  = "at_most_once"
	AtLeastOnce = "at_least_once"
)

// informational is the urgency a NOTIFY without one gets (core §7.2.13).
const informational = "informational"

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
	Kind      string          `json:"kind,omitempty"` // "" is a webhook (records from before kinds)
	Addr      string          `json:"addr,omitempty"` // host:port of a remote agent's server
	AgentID   string          `json:"agent_id,omitempty"`
	Content   json.RawMessage `json:"content"`
	Urgency   string          `json:"urgency"`
	Guarantee string          `json:"delivery_guarantee"`
	Expiry    time.Time       `json:"expiry"`
	Status    string          `json:"status"`
	Attempts  int             `json:"attempts"`
	LastError string          `json:"last_error,omitempty"`
	Created   time.Time       `json:"created"`
	Delivered time.Time       `json:"delivered,omitzero"`
	// Members are a group notification's deliveries (their ids); Parent
	// is the group notification of a delivery.
	Members []string `json:"members,omitempty"`
	Parent  string   `json:"parent,omitempty"`
	// Lease is the token of the worker attempting the notification
	// (holdScript reads it as "lease"); "" while no attempt is under way.
	Lease string `json:"lease,omitempty"`
}

func (n *notification) kind() string {
	if n.Kind == "" {
		return KindWebhook
	}
	return n.Kind
}

func (n *notification) proto() *taskv1.Notification {
	// ContentJson and Status are the first release's fields, filled for
	// its clients beside Content and State; content stored before Values
	// were checked on input may have no Value form, and is then served in
	// ContentJson only.
	content, _ := jsondoc.Value(n.Content)
	out := &taskv1.Notification{NotificationId: n.ID, SenderAgentId: n.Sender, Recipient: n.Recipient,
		//lint:ignore SA1019 the first release's field, filled for its clients
		ContentJson: n.Content, Content: content,
		//lint:ignore SA1019 the first release's field, filled for its clients
		Urgency: n.Urgency, UrgencyLevel: enumname.Value[taskv1.NotificationUrgency](n.Urgency),
		//lint:ignore SA1019 the first release's field, filled for its clients
		DeliveryGuarantee: n.Guarantee, Guarantee: enumname.Value[taskv1.DeliveryGuarantee](n.Guarantee),
		Expiry: timestamppb.New(n.Expiry),
		//lint:ignore SA1019 the first release's field, filled for its clients
		Status: n.Status, State: enumname.Value[taskv1.NotificationStatus](n.Status),
		Attempts: int32(n.Attempts), LastError: n.LastError, CreatedAt: timestamppb.New(n.Created),
		//lint:ignore SA1019 the first release's field, filled for its clients
		RecipientKind: n.kind(), RecipientType: enumname.Value[taskv1.RecipientKind](n.kind())}
	if !n.Delivered.IsZero() {
		out.DeliveredAt = timestamppb.New(n.Delivered)
	}
	return out
}

// Notify validates a notification and queues it, or delivers it at once
// to an agent hosted here (its inbox). A group fans out into one delivery
// per member. With notification_id set it is an inbound delivery relayed
// by another server, de-duplicated on (sender, notification_id).
func (s *Server) Notify(ctx context.Context, in *taskv1.NotifyRequest) (*taskv1.NotifyResponse, error) {
	if in.GetSenderAgentId() == "" {
		return nil, grpcerr.Unauthenticated("agent-unauthenticated", "NOTIFY needs Agent-ID")
	}
	rcpt := in.GetRecipient()
	if rcpt == "" || len(rcpt) > maxRecipient {
		return nil, grpcerr.InvalidArgument("recipient-invalid", fmt.Sprintf("recipient is required, at most %d characters", maxRecipient))
	}
	d, err := s.classify(rcpt)
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 a client of the first release sends content_json only
	content, ok := document(in.GetContent(), in.GetContentJson())
	if !ok {
		return nil, grpcerr.InvalidArgument("content-invalid", fmt.Sprintf("content is required: a JSON value of at most %d bytes", maxContext))
	}
	//lint:ignore SA1019 a client of the first release sends the urgency as a string only
	urgency, err := requestedName(in.GetUrgencyLevel(), in.GetUrgency(), informational, "urgency")
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 a client of the first release sends the guarantee as a string only
	g, err := requestedName(in.GetGuarantee(), in.GetDeliveryGuarantee(), AtLeastOnce, "delivery_guarantee")
	if err != nil {
		return nil, err
	}
	now := s.opts.Now().UTC()
	expiry := now.Add(s.opts.NotifyDefaultExpiry)
	if e := in.GetExpiry(); e != nil {
		if err := e.CheckValid(); err != nil {
			return nil, grpcerr.InvalidArgument("expiry-invalid", "expiry is not a valid timestamp: "+err.Error())
		}
		expiry = e.AsTime().UTC()
		if !expiry.After(now) {
			return nil, grpcerr.InvalidArgument("expiry-passed", "expiry is in the past")
		}
		if latest := now.Add(maxNotifyLifetime); expiry.After(latest) {
			return nil, grpcerr.InvalidArgument("expiry-too-far", fmt.Sprintf("expiry is at most %d days ahead", maxNotifyLifetime/(24*time.Hour)),
				"latest_expiry", latest.Format(time.RFC3339))
		}
	}
	n := &notification{Sender: in.GetSenderAgentId(), Recipient: rcpt, Content: content,
		Urgency: urgency, Guarantee: g, Expiry: expiry, Status: NotifyQueued, Created: now}
	if id := in.GetNotificationId(); id != "" {
		if !validID(id) {
			return nil, grpcerr.InvalidArgument("notification-id-invalid", "Notification-ID must be 1-128 characters of letters, digits and ._:-")
		}
		if d.kind != KindAgent {
			return nil, grpcerr.InvalidArgument("recipient-not-hosted", "a relayed notification (Notification-ID) must name an agent hosted on this server")
		}
		n.ID = id
		n.Kind, n.AgentID = KindAgent, d.agentID
		dup, err := s.deliverInbox(ctx, n, now)
		if err != nil {
			return nil, err
		}
		n.Status, n.Attempts, n.Delivered = NotifyDelivered, 1, now
		out := n.proto()
		out.Duplicate = dup
		s.log.InfoContext(ctx, "notification received", "notification_id", id, "sender", n.Sender, "recipient", d.agentID, "duplicate", dup)
		return &taskv1.NotifyResponse{Notification: out}, nil
	}
	if err := s.checkDestination(ctx, in.GetSenderAgentId(), rcpt, d); err != nil {
		return nil, err
	}
	n.ID = newID("ntf-")
	if d.kind == KindGroup {
		return s.notifyGroup(ctx, n, d.group)
	}
	if err := s.queue(ctx, n, d, now); err != nil {
		return nil, err
	}
	return &taskv1.NotifyResponse{Notification: n.proto()}, nil
}

// notifyTTL is how long a notification's keys are kept: until its expiry,
// then the task TTL so its sender can still read the outcome.
func notifyTTL(expiry, now time.Time, taskTTL time.Duration) time.Duration {
	return rediskeys.KeepUntil(expiry, now, maxNotifyLifetime, taskTTL)
}

// queue stores one delivery: an agent hosted here gets it in its inbox at
// once; the others are put in the due set for the retry worker.
func (s *Server) queue(ctx context.Context, n *notification, d dest, now time.Time) error {
	n.Kind, n.AgentID, n.Addr = d.kind, d.agentID, d.addr
	if d.kind == KindAgent {
		if _, err := s.deliverInbox(ctx, n, now); err != nil {
			return err
		}
		n.Status, n.Attempts, n.Delivered = NotifyDelivered, 1, now
	}
	if err := s.rdb.Set(ctx, rediskeys.Notification(n.ID), mustJSON(n), notifyTTL(n.Expiry, now, s.opts.TaskTTL)).Err(); err != nil {
		return storeErr("notify", err)
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: rediskeys.NotificationsLog, MaxLen: 100_000, Approx: true,
			Values: map[string]any{"notification_id": n.ID, "event": n.Status, "sender": n.Sender, "recipient": n.Recipient, "kind": n.Kind, "guarantee": n.Guarantee}})
		if n.Status == NotifyQueued {
			p.ZAdd(ctx, rediskeys.NotificationsDue, redis.Z{Score: float64(now.UnixMilli()), Member: n.ID})
		}
		return nil
	})
	if err != nil {
		return storeErr("notify queue", err)
	}
	return nil
}

// notifyGroup fans a notification out to the members of a broadcast
// group: one delivery each, with its own id (<id>.<n>), state and retries.
func (s *Server) notifyGroup(ctx context.Context, n *notification, group string) (*taskv1.NotifyResponse, error) {
	now := n.Created
	members := s.opts.Groups[group]
	n.Kind = KindGroup
	out := n.proto()
	for i, m := range members {
		d, err := s.classify(m)
		if err != nil {
			return nil, grpcerr.Internal(fmt.Errorf("group %s member %d: %w", group, i, err))
		}
		c := *n
		c.ID, c.Recipient, c.Parent, c.Members = n.ID+"."+strconv.Itoa(i), m, n.ID, nil
		if err := s.queue(ctx, &c, d, now); err != nil {
			return nil, err
		}
		n.Members = append(n.Members, c.ID)
		out.Deliveries = append(out.Deliveries, c.proto())
	}
	if err := s.rdb.Set(ctx, rediskeys.Notification(n.ID), mustJSON(n), notifyTTL(n.Expiry, now, s.opts.TaskTTL)).Err(); err != nil {
		return nil, storeErr("notify group", err)
	}
	s.summarize(n, out.Deliveries)
	//lint:ignore SA1019 the first release's field, filled for its clients beside State
	out.Status, out.State, out.Attempts = n.Status, enumname.Value[taskv1.NotificationStatus](n.Status), int32(n.Attempts)
	return &taskv1.NotifyResponse{Notification: out}, nil
}

// summarize sets a group notification's status from its deliveries:
// queued while any is, delivered when all are, failed otherwise.
func (s *Server) summarize(n *notification, deliveries []*taskv1.Notification) {
	n.Status, n.Attempts = NotifyDelivered, 0
	failed := false
	for _, d := range deliveries {
		n.Attempts += int(d.GetAttempts())
		switch d.GetState() {
		case taskv1.NotificationStatus_NOTIFICATION_STATUS_QUEUED:
			n.Status = NotifyQueued
		case taskv1.NotificationStatus_NOTIFICATION_STATUS_FAILED, taskv1.NotificationStatus_NOTIFICATION_STATUS_EXPIRED:
			failed = true
		}
	}
	if failed && n.Status != NotifyQueued {
		n.Status = NotifyFailed
	}
}

// GetNotification reads a notification's delivery state for its sender;
// a group's answer lists every member's delivery.
func (s *Server) GetNotification(ctx context.Context, in *taskv1.GetNotificationRequest) (*taskv1.GetNotificationResponse, error) {
	notFound := grpcerr.NotFound("notification-not-found", "no notification with that notification_id")
	if !validID(in.GetNotificationId()) {
		return nil, notFound
	}
	var n notification
	ok, err := getJSON(ctx, s.rdb, rediskeys.Notification(in.GetNotificationId()), &n)
	if err != nil {
		return nil, storeErr("get notification", err)
	}
	if !ok || n.Sender != in.GetCallerAgentId() {
		return nil, notFound
	}
	if n.kind() != KindGroup {
		return &taskv1.GetNotificationResponse{Notification: n.proto()}, nil
	}
	var deliveries []*taskv1.Notification
	for _, id := range n.Members {
		var c notification
		ok, err := getJSON(ctx, s.rdb, rediskeys.Notification(id), &c)
		if err != nil {
			return nil, storeErr("get notification", err)
		}
		if ok {
			deliveries = append(deliveries, c.proto())
		}
	}
	s.summarize(&n, deliveries)
	out := n.proto()
	out.Deliveries = deliveries
	return &taskv1.GetNotificationResponse{Notification: out}, nil
}

// leaseScript moves the first due notification (score <= ARGV[1]) to
// ARGV[2], the end of its lease, and returns its id (nil when none is
// due): one worker owns an attempt, and a worker that dies leaves it due
// again when the lease ends. Each notification is leased just before its
// own attempt, for as long as one attempt may take: a lease taken for a
// batch ran out while the worker was still on the batch's first ones, and
// another worker made the later ones' attempts again.
var leaseScript = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1)
if #ids == 0 then return false end
redis.call('ZADD', KEYS[1], ARGV[2], ids[1])
return ids[1]`)

// holdScript writes a notification's record (ARGV[2], keeping its TTL)
// only while the lease token on it is ARGV[1] ("" for none), and answers
// 1 when it wrote: a worker whose lease ran out and was taken over by
// another writes nothing, neither its attempt nor its outcome.
var holdScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local ok, n = pcall(cjson.decode, cur)
if not ok or type(n) ~= 'table' then return 0 end
local lease = n.lease
if type(lease) ~= 'string' then lease = '' end
if lease ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1`)

// notifyBatch bounds the notifications one pass of the worker attempts.
const notifyBatch = 32

// interrupted is the last_error of an at_most_once notification whose one
// attempt was made by a worker that did not settle it within its lease.
const interrupted = "attempt interrupted: outcome unknown"

// Run is the NOTIFY retry worker; it returns when ctx is done.
func (s *Server) Run(ctx context.Context) error {
	tick := time.NewTicker(s.opts.NotifyPoll)
	defer tick.Stop()
	if s.opts.AGTPClient == nil {
		defer func() { _ = s.agtp.Close() }()
	}
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

// deliverDue makes one delivery attempt for each due notification, up to
// notifyBatch of them.
func (s *Server) deliverDue(ctx context.Context) error {
	for range notifyBatch {
		now := s.opts.Now()
		// One attempt is bounded by NotifyTimeout (post, sendAGTP); the
		// poll interval covers the store round trips around it.
		lease := now.Add(s.opts.NotifyTimeout + s.opts.NotifyPoll)
		id, err := leaseScript.Run(ctx, s.rdb, []string{rediskeys.NotificationsDue}, now.UnixMilli(), lease.UnixMilli()).Text()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lease notification: %w", err)
		}
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
	// held is the token on the record now: "" between attempts, or the
	// token of a worker whose lease ran out before it settled.
	held := n.Lease
	now := s.opts.Now().UTC()
	if !now.Before(n.Expiry) {
		n.Status = NotifyExpired
		return s.settle(ctx, &n, held, 0)
	}
	if n.Guarantee == AtMostOnce && n.Attempts > 0 {
		// Its one attempt was made (docs/mechanics.md, NOTIFY: at_most_once
		// is one attempt) and not settled: another would be a second
		// delivery.
		n.Status, n.LastError = NotifyFailed, interrupted
		return s.settle(ctx, &n, held, 0)
	}
	// The attempt is recorded under this worker's token before it is
	// made, so that no other worker makes an at_most_once attempt again
	// and only this one settles it.
	n.Attempts++
	n.Lease = newID("")
	if won, err := s.hold(ctx, &n, held); err != nil || !won {
		return err
	}
	switch {
	case n.Parent == "" && !s.stillListed(&n):
		// Queued before the lists were narrowed. (A group's members are
		// the operator's own; addresses are checked as they are dialled.)
		err = &outbound.Error{Destination: n.Recipient, Why: "no longer on this server's outbound lists"}
	case n.kind() == KindRemoteAgent:
		err = s.sendAGTP(ctx, &n)
	default:
		err = s.post(ctx, &n)
	}
	if err == nil {
		n.Status, n.Delivered, n.LastError = NotifyDelivered, now, ""
		return s.settle(ctx, &n, n.Lease, 0)
	}
	n.LastError = failureClass(err)
	var perm *permanentError
	switch {
	case errors.Is(err, outbound.ErrNotAllowed):
		// The recipient's name resolved to an internal address: no
		// retry changes the policy.
		s.log.WarnContext(ctx, "notification refused at dial time", "notification_id", n.ID, "error", failureDetail(err))
		n.Status = NotifyFailed
		return s.settle(ctx, &n, n.Lease, 0)
	case n.Guarantee == AtMostOnce || n.Attempts >= s.opts.NotifyMaxAttempts || errors.As(err, &perm):
		s.log.InfoContext(ctx, "notification attempt failed", "notification_id", n.ID, "attempt", n.Attempts, "error", failureDetail(err))
		n.Status = NotifyFailed
		return s.settle(ctx, &n, n.Lease, 0)
	}
	s.log.InfoContext(ctx, "notification attempt failed", "notification_id", n.ID, "attempt", n.Attempts, "error", failureDetail(err))
	backoff := s.opts.NotifyBackoff << min(n.Attempts-1, 20)
	if backoff > s.opts.NotifyMaxBackoff || backoff <= 0 {
		backoff = s.opts.NotifyMaxBackoff
	}
	return s.settle(ctx, &n, n.Lease, backoff)
}

// hold stores n while token is the lease on its record; won is false when
// another worker holds it.
func (s *Server) hold(ctx context.Context, n *notification, token string) (won bool, err error) {
	wrote, err := holdScript.Run(ctx, s.rdb, []string{rediskeys.Notification(n.ID)}, token, mustJSON(n)).Int()
	if err != nil {
		return false, fmt.Errorf("hold notification: %w", err)
	}
	if wrote != 1 {
		s.log.InfoContext(ctx, "notification held by another worker", "notification_id", n.ID)
	}
	return wrote == 1, nil
}

// settle stores an attempt's outcome, if the worker still holds the
// notification (token): retry after a delay, or drop the notification
// from the due set for good. A worker that lost it leaves the due set to
// the one that holds it now.
func (s *Server) settle(ctx context.Context, n *notification, token string, retryIn time.Duration) error {
	n.Lease = ""
	if won, err := s.hold(ctx, n, token); err != nil || !won {
		return err
	}
	now := s.opts.Now()
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
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
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return &webhookStatusError{status: resp.StatusCode}
	}
	return nil
}

// webhookStatusError is a webhook's answer other than 2xx.
type webhookStatusError struct{ status int }

func (e *webhookStatusError) Error() string { return fmt.Sprintf("webhook answered %d", e.status) }

// failureClass is what a failed delivery attempt stores as last_error,
// which the notification's sender reads (QUERY /notifications/{id}): the
// kind of failure, never the error itself. A transport error quotes the
// webhook URL, whose query or userinfo may carry the operator's token,
// and names the addresses dialled, which for a recipient the operator
// configured (a broadcast group's member, a trusted or default
// recipient) are internal; the log has the detail (failureDetail).
func failureClass(err error) string {
	var status *webhookStatusError
	var refused *outbound.Error
	var dns *net.DNSError
	var answered *agtpAnswerError
	switch {
	case errors.As(err, &status):
		return "HTTP " + strconv.Itoa(status.status)
	case errors.As(err, &refused):
		// Why names the address class, never the address.
		return "destination not allowed: " + refused.Why
	case isTimeout(err):
		return "timed out"
	case isTLSFailure(err):
		return "TLS handshake failed"
	case errors.As(err, &dns):
		return "name not resolved"
	case errors.Is(err, client.ErrNoResponse):
		return "connection closed before an answer"
	case errors.As(err, &answered):
		return "agtp " + answered.outcome()
	}
	return "connection failed"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func isTLSFailure(err error) bool {
	var cv *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var alert tls.AlertError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &cv) || errors.As(err, &rh) || errors.As(err, &alert) ||
		errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci)
}

// failureDetail is err for the log, without the URL a transport error
// quotes (its query may carry a token; the notification_id names the
// recipient).
func failureDetail(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}
