package tasks

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/outbound"
	"github.com/agtpsuite/agtp/services/paging"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Recipient kinds of a notification (docs/mechanics.md).
const (
	// KindWebhook is an https:// URL the worker POSTs to.
	KindWebhook = "webhook"
	// KindAgent is an agent hosted on this server (Agent-ID or
	// agtp://<agent-id>): the notification goes into its inbox at once.
	KindAgent = "agent"
	// KindRemoteAgent is agtp://<agent-id>@host[:port]: the worker sends
	// NOTIFY over AGTP to that host, which delivers it to the agent.
	KindRemoteAgent = "remote_agent"
	// KindGroup is group:<name>, a broadcast group of the options.
	KindGroup = "group"
)

// GroupPrefix starts a broadcast-group recipient.
const GroupPrefix = "group:"

// Bounds of the delivery side.
const (
	maxGroups       = 256
	maxGroupMembers = 256
	maxInbox        = 10_000
	// maxNotifyLifetime is the furthest ahead a notification's expiry
	// may lie (docs/mechanics.md): it keeps what a caller can pin in
	// Redis, the record and a relayed notification_id's de-duplication
	// marker, to a bounded time beyond the task TTL.
	maxNotifyLifetime = 30 * 24 * time.Hour
)

// inboxPaging is ListInbox's page sizes.
var inboxPaging = paging.Spec{RPC: taskv1.TaskService_ListInbox_FullMethodName, Default: 100, Max: 500}

// dest is a classified recipient.
type dest struct {
	kind    string
	agentID string // agent and remote_agent
	addr    string // remote_agent: host:port
	group   string
}

// classify reads a recipient: an https:// webhook, an agent hosted here,
// an agent on another host, or a broadcast group.
func (s *Server) classify(rcpt string) (dest, error) {
	unsupported := grpcerr.InvalidArgument("recipient-unsupported",
		"recipient must be an Agent-ID, agtp://<agent-id>[@host[:port]], an https:// webhook or group:<name>")
	switch {
	case strings.HasPrefix(rcpt, "https://"):
		u, err := url.Parse(rcpt)
		if err != nil || u.Host == "" || u.User != nil {
			return dest{}, grpcerr.InvalidArgument("recipient-invalid", "a webhook recipient is an https:// URL with a host and no credentials")
		}
		return dest{kind: KindWebhook}, nil
	case strings.HasPrefix(rcpt, GroupPrefix):
		name := strings.TrimPrefix(rcpt, GroupPrefix)
		if _, ok := s.opts.Groups[name]; !ok {
			return dest{}, grpcerr.NotFound("recipient-not-found", "no broadcast group "+strconv.Quote(name))
		}
		return dest{kind: KindGroup, group: name}, nil
	case agtp.IsCanonicalID(rcpt):
		return dest{kind: KindAgent, agentID: rcpt}, nil
	}
	id, addr, ok := agtp.ParseAgentURI(rcpt)
	switch {
	case !ok:
		return dest{}, unsupported
	case addr == "":
		return dest{kind: KindAgent, agentID: id}, nil
	}
	return dest{kind: KindRemoteAgent, agentID: id, addr: addr}, nil
}

// outboundPolicy builds the outbound policy of the options, trusting the
// operator's own recipients: the default escalation recipient and every
// broadcast group member that is a webhook or a remote agent.
func (s *Server) outboundPolicy() (*outbound.Policy, error) {
	o := s.opts.Outbound
	o.TrustedWebhooks = slices.Clone(o.TrustedWebhooks)
	o.TrustedPeers = slices.Clone(o.TrustedPeers)
	if strings.HasPrefix(s.opts.DefaultRecipient, "https://") {
		o.TrustedWebhooks = append(o.TrustedWebhooks, s.opts.DefaultRecipient)
	}
	for _, members := range s.opts.Groups {
		for _, m := range members {
			d, err := s.classify(m)
			switch {
			case err != nil:
			case d.kind == KindWebhook:
				o.TrustedWebhooks = append(o.TrustedWebhooks, m)
			case d.kind == KindRemoteAgent:
				o.TrustedPeers = append(o.TrustedPeers, d.addr)
			}
		}
	}
	return outbound.New(o)
}

// checkDestination refuses a caller-named recipient this server may not
// reach (403 recipient-not-allowed), before anything is stored.
func (s *Server) checkDestination(ctx context.Context, caller, rcpt string, d dest) error {
	var err error
	switch d.kind {
	case KindWebhook:
		err = s.out.CheckWebhook(rcpt)
	case KindRemoteAgent:
		err = s.out.CheckPeer(d.addr)
	}
	if err != nil {
		s.log.WarnContext(ctx, "outbound destination refused", "caller", caller, "error", err)
		return grpcerr.PermissionDenied(outbound.Reason, err.Error())
	}
	return nil
}

// stillListed reports whether a queued notification's destination is
// still trusted or on the lists.
func (s *Server) stillListed(n *notification) bool {
	if n.kind() == KindRemoteAgent {
		return s.out.ListedPeer(n.Addr) == nil
	}
	return s.out.ListedWebhook(n.Recipient) == nil
}

// loadGroups adds the groups of GroupsFile to Groups; a name in both is
// an error.
func (s *Server) loadGroups() error {
	if s.opts.GroupsFile == "" {
		return nil
	}
	b, err := os.ReadFile(s.opts.GroupsFile)
	if err != nil {
		return fmt.Errorf("groups file: %w", err)
	}
	var more map[string][]string
	if err := json.Unmarshal(b, &more); err != nil {
		return fmt.Errorf("groups file %s: %w", s.opts.GroupsFile, err)
	}
	groups := make(map[string][]string, len(s.opts.Groups)+len(more))
	for k, v := range s.opts.Groups {
		groups[k] = v
	}
	for k, v := range more {
		if _, dup := groups[k]; dup {
			return fmt.Errorf("groups file %s: group %q is also configured in code", s.opts.GroupsFile, k)
		}
		groups[k] = v
	}
	s.opts.Groups = groups
	return nil
}

// validateGroups checks the configured broadcast groups: every member a
// recipient that is not itself a group.
func (s *Server) validateGroups() error {
	if len(s.opts.Groups) > maxGroups {
		return fmt.Errorf("more than %d broadcast groups", maxGroups)
	}
	var errs []error
	for name, members := range s.opts.Groups {
		if !validID(name) {
			errs = append(errs, fmt.Errorf("group %q: a name is 1-128 characters of letters, digits and ._:-", name))
		}
		if len(members) == 0 || len(members) > maxGroupMembers {
			errs = append(errs, fmt.Errorf("group %q: 1 to %d members", name, maxGroupMembers))
		}
		for _, m := range members {
			d, err := s.classify(m)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("group %q: member %q: %w", name, m, err))
			case d.kind == KindGroup:
				errs = append(errs, fmt.Errorf("group %q: member %q is a group; groups do not nest", name, m))
			}
		}
	}
	return errors.Join(errs...)
}

// inboxScript appends a notification to an agent's inbox unless the
// (sender, notification_id) was delivered before: receiver-side
// de-duplication, so a delivery the sender repeats (its answer was lost)
// reaches the agent once. The inbox is kept for the longest window of
// the notifications in it: a delivery only ever lengthens its TTL, since
// one with a short expiry, from any sender, would otherwise take the
// earlier ones with it. KEYS: seen marker, inbox stream. ARGV: marker
// and entry TTL ms, stream cap, then the entry's field/value pairs.
// Returns 1 and the entry id, or 0 and the earlier entry id.
var inboxScript = redis.NewScript(`
local prev = redis.call('GET', KEYS[1])
if prev then return {0, prev} end
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 3))
redis.call('SET', KEYS[1], id, 'PX', ARGV[1])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[2], ARGV[1]) end
return {1, id}`)

// deliverInbox puts a notification in the inbox of an agent hosted here;
// duplicate is true when it was already there.
func (s *Server) deliverInbox(ctx context.Context, n *notification, now time.Time) (duplicate bool, err error) {
	window := notifyTTL(n.Expiry, now, s.opts.TaskTTL)
	res, err := inboxScript.Run(ctx, s.rdb,
		[]string{rediskeys.InboxSeen(n.AgentID, n.Sender, n.ID), rediskeys.Inbox(n.AgentID)},
		window.Milliseconds(), maxInbox,
		"notification_id", n.ID, "sender", n.Sender, "content", string(n.Content), "urgency", n.Urgency,
		"delivery_guarantee", n.Guarantee, "expiry", n.Expiry.Format(time.RFC3339Nano), "received", strconv.FormatInt(now.UnixMilli(), 10),
	).Slice()
	if err != nil {
		return false, storeErr("deliver to inbox", err)
	}
	if len(res) != 2 {
		return false, grpcerr.Internal(fmt.Errorf("inbox script answered %v", res))
	}
	added, _ := res[0].(int64)
	if added == 1 {
		s.log.InfoContext(ctx, "notification delivered to inbox", "notification_id", n.ID, "sender", n.Sender, "agent_id", n.AgentID)
	}
	return added != 1, nil
}

// ListInbox pages the notifications delivered to an agent hosted here.
// Like the escalation listing, it is an operator API (the service's
// mTLS).
func (s *Server) ListInbox(ctx context.Context, in *taskv1.ListInboxRequest) (*taskv1.ListInboxResponse, error) {
	if !agtp.IsCanonicalID(in.GetAgentId()) {
		return nil, grpcerr.InvalidArgument("agent-id-invalid", "agent_id must be a canonical Agent-ID")
	}
	size, token := in.GetPageSize(), in.GetPageToken()
	if size == 0 {
		//lint:ignore SA1019 the first release's name for page_size, still honoured
		size = in.GetLimit()
	}
	if token == "" {
		//lint:ignore SA1019 the first release's name for page_token, still honoured
		token = in.GetCursor()
	}
	page, err := inboxPaging.Parse(size, token, in.GetAgentId())
	if err != nil {
		return nil, err
	}
	// The position is the stream ID of the last entry returned; XRANGE
	// from just after it costs O(page).
	start := "-"
	if c := page.After; c != "" {
		if len(c) > 64 || strings.Trim(c, "0123456789-") != "" {
			return nil, grpcerr.InvalidArgument(paging.ReasonPageTokenInvalid, "page_token does not hold an inbox position")
		}
		start = "(" + c
	}
	msgs, err := s.rdb.XRangeN(ctx, rediskeys.Inbox(in.GetAgentId()), start, "+", int64(page.Size)+1).Result()
	if err != nil {
		return nil, storeErr("list inbox", err)
	}
	out := &taskv1.ListInboxResponse{}
	if len(msgs) > page.Size {
		msgs = msgs[:page.Size]
		out.NextPageToken = page.Next(msgs[len(msgs)-1].ID)
		//lint:ignore SA1019 kept for clients of the first release
		out.NextCursor = out.NextPageToken
	}
	for _, m := range msgs {
		field := func(k string) string { v, _ := m.Values[k].(string); return v }
		content := []byte(field("content"))
		value, _ := jsondoc.Value(content) // unset when it has no Value form: ContentJson carries it
		e := &taskv1.InboxEntry{NotificationId: field("notification_id"), SenderAgentId: field("sender"),
			//lint:ignore SA1019 the first release's field, filled for its clients beside Content
			ContentJson: content, Content: value,
			//lint:ignore SA1019 the first release's field, filled for its clients beside UrgencyLevel
			Urgency: field("urgency"), UrgencyLevel: enumname.Value[taskv1.NotificationUrgency](field("urgency")),
			//lint:ignore SA1019 the first release's field, filled for its clients beside Guarantee
			DeliveryGuarantee: field("delivery_guarantee"), Guarantee: enumname.Value[taskv1.DeliveryGuarantee](field("delivery_guarantee"))}
		if t, err := time.Parse(time.RFC3339Nano, field("expiry")); err == nil {
			e.Expiry = timestamppb.New(t)
		}
		if ms, err := strconv.ParseInt(field("received"), 10, 64); err == nil {
			e.ReceivedAt = timestamppb.New(time.UnixMilli(ms))
		}
		out.Entries = append(out.Entries, e)
	}
	return out, nil
}

// permanentError is a delivery refusal that another attempt cannot
// change (the receiving server does not know the recipient or the
// sender, or refuses the notification).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// notifyBody is the envelope of a NOTIFY relayed to another server.
type notifyBody struct {
	Method     string       `json:"method"`
	Parameters notifyParams `json:"parameters"`
}

type notifyParams struct {
	Recipient         string          `json:"recipient"`
	Content           json.RawMessage `json:"content"`
	Urgency           string          `json:"urgency"`
	DeliveryGuarantee string          `json:"delivery_guarantee"`
	Expiry            string          `json:"expiry"`
}

// sendAGTP delivers one notification to an agent on another server: a
// NOTIFY over AGTP, as the sender (Agent-ID), naming the agent by its
// Agent-ID and carrying the notification_id in Notification-ID so that
// the receiving server de-duplicates a repeated delivery.
func (s *Server) sendAGTP(ctx context.Context, n *notification) error {
	body, err := json.Marshal(notifyBody{Method: "NOTIFY", Parameters: notifyParams{Recipient: n.AgentID, Content: n.Content,
		Urgency: n.Urgency, DeliveryGuarantee: n.Guarantee, Expiry: n.Expiry.Format(time.RFC3339)}})
	if err != nil {
		return &permanentError{err}
	}
	req, err := agtp.NewRequest("NOTIFY", "/")
	if err != nil {
		return &permanentError{err}
	}
	req.Header.Set(agtp.HeaderAgentID, n.Sender)
	req.Header.Set(HeaderNotificationID, n.ID)
	req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	req.Body = body
	ctx, cancel := context.WithTimeout(ctx, s.opts.NotifyTimeout)
	defer cancel()
	resp, err := s.agtp.Do(ctx, req, n.Addr)
	if err != nil {
		return fmt.Errorf("agtp %s: %w", n.Addr, err)
	}
	switch st := resp.Status; {
	case st >= 200 && st <= 299:
		return nil
	case st == agtp.StatusTimeout, st == agtp.StatusRateLimited, st == agtp.StatusTooEarly, st >= 500:
		return &agtpAnswerError{addr: n.Addr, status: st}
	default:
		return &permanentError{&agtpAnswerError{addr: n.Addr, status: st, reason: reasonOf(resp.Body), refused: true}}
	}
}

// agtpAnswerError is a remote agent's server that answered a relayed
// NOTIFY without taking it: for a while (refused false), or for good.
type agtpAnswerError struct {
	addr    string
	status  int
	reason  string
	refused bool
}

func (e *agtpAnswerError) Error() string { return "agtp " + e.addr + " " + e.outcome() }

// outcome is the answer without the server's address.
func (e *agtpAnswerError) outcome() string {
	if e.refused {
		return fmt.Sprintf("refused the notification: %d %s", e.status, e.reason)
	}
	return fmt.Sprintf("answered %d", e.status)
}

// reasonOf is the reason member of an AGTP error body, for the log.
func reasonOf(body []byte) string {
	var b struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(body, &b)
	if len(b.Reason) > 64 {
		return b.Reason[:64]
	}
	return b.Reason
}

// deliveryClients builds the webhook HTTP client and the AGTP client,
// trusting the system roots plus CAFile and dialling through the
// outbound policy, which refuses internal addresses as they are
// resolved.
func deliveryClients(o Options, pol *outbound.Policy) (*http.Client, *client.Client, error) {
	roots, err := outbound.RootCAs(o.CAFile)
	if err != nil {
		return nil, nil, err
	}
	hc := o.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		tr.DialContext = pol.DialContext
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
		hc = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	ac := o.AGTPClient
	if ac == nil {
		if ac, err = client.New(client.Options{RootCAs: roots, MaxConnsPerHost: 4, DialContext: pol.DialContext,
			CertFile: o.ClientCertFile, KeyFile: o.ClientKeyFile}); err != nil {
			return nil, nil, err
		}
	}
	return hc, ac, nil
}
