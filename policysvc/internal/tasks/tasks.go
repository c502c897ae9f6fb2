// Package tasks keeps the state of tasks named by Task-ID and the
// mechanics verbs acting on them (core §7.2.9–§7.2.13): ESCALATE pauses a
// task until a CONFIRM resolves it, NOTIFY queues a delivery that a retry
// worker pushes to a webhook, DELEGATE hops are recorded on the
// delegator's task. It implements agtp.task.v1.TaskService.
package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/policysvc/internal/changelog"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/outbound"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Task statuses.
const (
	StatusRunning   = "running"
	StatusPaused    = "paused"
	StatusEscalated = "escalated"
	StatusConfirmed = "confirmed"
	StatusRejected  = "rejected"
	StatusDeferred  = "deferred"
	StatusDelegated = "delegated"
	StatusFailed    = "failed"
)

// Escalation and confirmation statuses.
const (
	PendingReview = "pending_review"
	Accepted      = "accepted"
	Rejected      = "rejected"
	Deferred      = "deferred"
)

// Options configure the task service.
type Options struct {
	// DefaultRecipient receives escalations that name no recipient: an
	// Agent-ID, agtp:// URI, https:// webhook or admin principal
	// (default "admin": the admin API lists them).
	DefaultRecipient string `json:"default_recipient,omitempty"`
	// ReviewWindow is added to an escalation's creation time for
	// estimated_review_by when it has no deadline (default 24h).
	ReviewWindow time.Duration `json:"review_window,omitempty"`
	// TaskTTL bounds how long a task is kept after its last change
	// (default 30 days).
	TaskTTL time.Duration `json:"task_ttl,omitempty"`
	// MaxHistory bounds a task's history (default 100 events).
	MaxHistory int `json:"max_history,omitempty"`
	// ClaimTimeout is how long a CONFIRM claim blocks another before it is
	// taken over (default 30s).
	ClaimTimeout time.Duration `json:"claim_timeout,omitempty"`
	// NotifyPoll is how often the retry worker looks for due deliveries
	// (default 200ms).
	NotifyPoll time.Duration `json:"notify_poll,omitempty"`
	// NotifyBackoff is the first retry delay, doubled per attempt up to
	// NotifyMaxBackoff (defaults 500ms and 1m).
	NotifyBackoff    time.Duration `json:"notify_backoff,omitempty"`
	NotifyMaxBackoff time.Duration `json:"notify_max_backoff,omitempty"`
	// NotifyMaxAttempts ends at_least_once and exactly_once delivery
	// (default 20).
	NotifyMaxAttempts int `json:"notify_max_attempts,omitempty"`
	// NotifyTimeout bounds one webhook POST (default 10s).
	NotifyTimeout time.Duration `json:"notify_timeout,omitempty"`
	// NotifyDefaultExpiry applies when a NOTIFY names no expiry (default
	// 24h, at most the 30 days a NOTIFY may ask for).
	NotifyDefaultExpiry time.Duration `json:"notify_default_expiry,omitempty"`
	// CAFile is a PEM bundle of roots trusted, besides the system roots,
	// for webhook recipients and for the AGTP servers of remote agent
	// recipients.
	CAFile string `json:"ca_file,omitempty"`
	// ClientCertFile and ClientKeyFile are the certificate this service
	// presents to the AGTP servers of remote recipients: the suite's AGTP
	// server certificate, which a receiving server that lists this suite
	// as a trusted peer takes as proof of the sending agent
	// (docs/identity.md, "Proven callers"). Empty presents none.
	ClientCertFile string `json:"client_cert_file,omitempty"`
	ClientKeyFile  string `json:"client_key_file,omitempty"`
	// Groups are the broadcast groups a NOTIFY may name as
	// group:<name>: each member an Agent-ID or agtp:// agent URI, or an
	// https:// webhook.
	Groups map[string][]string `json:"groups,omitempty"`
	// GroupsFile is a JSON object of more groups ({"name": [members]}),
	// read by New.
	GroupsFile string `json:"groups_file,omitempty"`
	// Outbound lists the webhooks and AGTP hosts a caller may name as a
	// recipient and whether they may be private (docs/mechanics.md,
	// "Outbound destinations"). DefaultRecipient and the group members
	// are the operator's own and need no entry.
	Outbound outbound.Options `json:"outbound,omitzero"`
	// HTTPClient posts webhooks; nil builds one trusting the system roots
	// and CAFile that dials through the outbound policy (tests only: an
	// injected client skips the dial-time address check).
	HTTPClient *http.Client `json:"-"`
	// AGTPClient delivers to remote agents; nil builds one trusting the
	// system roots and CAFile that dials through the outbound policy.
	AGTPClient *client.Client `json:"-"`
	// Now is the clock (tests).
	Now func() time.Time `json:"-"`
}

func (o *Options) defaults() {
	if o.DefaultRecipient == "" {
		o.DefaultRecipient = "admin"
	}
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&o.ReviewWindow, 24*time.Hour)
	set(&o.TaskTTL, 30*24*time.Hour)
	set(&o.ClaimTimeout, 30*time.Second)
	set(&o.NotifyPoll, 200*time.Millisecond)
	set(&o.NotifyBackoff, 500*time.Millisecond)
	set(&o.NotifyMaxBackoff, time.Minute)
	set(&o.NotifyTimeout, 10*time.Second)
	set(&o.NotifyDefaultExpiry, 24*time.Hour)
	if o.MaxHistory <= 0 {
		o.MaxHistory = 100
	}
	if o.NotifyMaxAttempts <= 0 {
		o.NotifyMaxAttempts = 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate checks the options after defaults.
func (o Options) Validate() error {
	if len(o.DefaultRecipient) > maxRecipient {
		return fmt.Errorf("default_recipient longer than %d", maxRecipient)
	}
	if o.NotifyMaxBackoff < o.NotifyBackoff {
		return errors.New("notify_max_backoff is below notify_backoff")
	}
	if o.NotifyDefaultExpiry > maxNotifyLifetime {
		return fmt.Errorf("notify_default_expiry is above the maximum notification lifetime, %v", maxNotifyLifetime)
	}
	return nil
}

// Server implements taskv1.TaskServiceServer.
type Server struct {
	taskv1.UnimplementedTaskServiceServer
	rdb  redis.UniversalClient
	log  *slog.Logger
	opts Options
	http *http.Client
	agtp *client.Client
	out  *outbound.Policy
	// changes signs what ResolveEscalation changes (nil: it refuses).
	changes *changelog.Recorder
}

// RecordChanges has ResolveEscalation sign each resolution through r
// before it applies it; without it ResolveEscalation refuses.
func (s *Server) RecordChanges(r *changelog.Recorder) { s.changes = r }

// New builds the task service.
func New(rdb redis.UniversalClient, log *slog.Logger, opts Options) (*Server, error) {
	opts.defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if rdb == nil {
		return nil, errors.New("tasks: redis client is nil")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{rdb: rdb, log: log, opts: opts}
	if err := s.loadGroups(); err != nil {
		return nil, fmt.Errorf("tasks: %w", err)
	}
	if err := s.validateGroups(); err != nil {
		return nil, fmt.Errorf("tasks: groups: %w", err)
	}
	var err error
	if s.out, err = s.outboundPolicy(); err != nil {
		return nil, fmt.Errorf("tasks: %w", err)
	}
	if s.http, s.agtp, err = deliveryClients(opts, s.out); err != nil {
		return nil, fmt.Errorf("tasks: %w", err)
	}
	return s, nil
}

var _ taskv1.TaskServiceServer = (*Server)(nil)

// Bounds on what a caller controls.
const (
	maxID        = 128
	maxRecipient = 512
	maxContext   = 64 << 10
	maxReason    = 1024
	maxHistory   = 1000
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

func validID(s string) bool { return len(s) <= maxID && idPattern.MatchString(s) }

// requestedName reads a request parameter that moved from a string to
// enum E (docs/operations.md, "Enums and documents"): the name of v when
// it is set, else old, else def. A name E does not have, or a number it
// does not declare, is refused with <param>-invalid (underscores as
// hyphens), the reason the front door gives for the same parameter.
func requestedName[E enumname.Enum](v E, old, def, param string) (string, error) {
	name := enumname.Requested(v, old)
	switch {
	case name == "":
		return def, nil
	case enumname.Value[E](name) == 0:
		return "", grpcerr.InvalidArgument(enumname.Refusal[E](param))
	}
	return name, nil
}

// EscalationReasons is the ESCALATE reason vocabulary (core §3.3).
var EscalationReasons = map[string]bool{
	"confidence_threshold": true, "scope_limit": true, "ethical_flag": true,
	"ambiguous_instruction": true, "resource_unavailable": true,
}

// task is the stored state of a task.
type task struct {
	TaskID  string      `json:"task_id"`
	Owner   string      `json:"owner"`
	Status  string      `json:"status"`
	Created time.Time   `json:"created"`
	Updated time.Time   `json:"updated"`
	Pending string      `json:"pending_escalation,omitempty"`
	History []taskEvent `json:"history"`
}

type taskEvent struct {
	At     time.Time `json:"at"`
	Event  string    `json:"event"`
	Status string    `json:"status"`
	Actor  string    `json:"actor,omitempty"`
	Ref    string    `json:"ref,omitempty"`
	Detail string    `json:"detail,omitempty"`
}

func (s *Server) record(t *task, now time.Time, event, status, actor, ref, detail string) {
	t.Status = status
	t.Updated = now
	t.History = append(t.History, taskEvent{At: now, Event: event, Status: status, Actor: actor, Ref: ref, Detail: detail})
	if n := len(t.History) - s.opts.MaxHistory; n > 0 {
		t.History = append([]taskEvent(nil), t.History[n:]...)
	}
}

func (t *task) proto() *taskv1.Task {
	// Status is the first release's string, filled for its clients
	// beside State.
	out := &taskv1.Task{TaskId: t.TaskID, OwnerAgentId: t.Owner,
		//lint:ignore SA1019 the first release's field, filled for its clients
		Status: t.Status, State: enumname.Value[taskv1.TaskStatus](t.Status),
		CreatedAt: timestamppb.New(t.Created), UpdatedAt: timestamppb.New(t.Updated)}
	for _, e := range t.History {
		out.History = append(out.History, &taskv1.TaskEvent{At: timestamppb.New(e.At), Event: e.Event,
			//lint:ignore SA1019 the first release's field, filled for its clients
			Status: e.Status, State: enumname.Value[taskv1.TaskStatus](e.Status), Actor: e.Actor, Ref: e.Ref, Detail: e.Detail})
	}
	return out
}

func ended(status string) bool {
	return status == StatusConfirmed || status == StatusRejected || status == StatusFailed
}

// getJSON reads one JSON key; found is false when it does not exist.
func getJSON(ctx context.Context, c redis.Cmdable, key string, v any) (bool, error) {
	b, err := c.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, json.Unmarshal(b, v)
}

// getExisting is getJSON for a record that must exist: a missing one is
// errNoTarget (404 to the caller).
func getExisting(ctx context.Context, c redis.Cmdable, key string, v any) error {
	ok, err := getJSON(ctx, c, key, v)
	if err == nil && !ok {
		err = errNoTarget
	}
	return err
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are encoded
	}
	return b
}

// watch runs fn in an optimistic transaction over keys of one slot,
// retrying when another writer got in between.
func (s *Server) watch(ctx context.Context, fn func(tx *redis.Tx) error, keys ...string) error {
	for range 16 {
		err := s.rdb.Watch(ctx, fn, keys...)
		if errors.Is(err, redis.TxFailedErr) {
			continue
		}
		return err
	}
	return grpcerr.Unavailable("task-contended", "the task is changing too fast; retry")
}

func newID(prefix string) string { return prefix + uuid.NewString() }

// storeErr passes refusals through and masks store failures.
func storeErr(op string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return grpcerr.Internal(fmt.Errorf("%s: %w", op, err))
}

// GetTask reads a task; a task of another owner is not found.
func (s *Server) GetTask(ctx context.Context, in *taskv1.GetTaskRequest) (*taskv1.GetTaskResponse, error) {
	if in.GetCallerAgentId() == "" || !validID(in.GetTaskId()) {
		return nil, grpcerr.NotFound("task-not-found", "no task with that task_id")
	}
	var t task
	ok, err := getJSON(ctx, s.rdb, rediskeys.Task(in.GetCallerAgentId(), in.GetTaskId()), &t)
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("get task: %w", err))
	}
	if !ok {
		return nil, grpcerr.NotFound("task-not-found", "no task with that task_id")
	}
	return &taskv1.GetTaskResponse{Task: t.proto()}, nil
}

// document is a request's JSON value parameter (ESCALATE's context,
// NOTIFY's content): the Value a current client sends, else the first
// release's bytes. It must be at most maxContext bytes and have a Value
// form, so that it is served in both fields.
func document(v *structpb.Value, old []byte) ([]byte, bool) {
	b, err := jsondoc.PreferValue(v, old)
	if err != nil || len(b) == 0 || len(b) > maxContext || !json.Valid(b) {
		return nil, false
	}
	if v == nil {
		if _, err := jsondoc.Value(b); err != nil {
			return nil, false
		}
	}
	return b, true
}
