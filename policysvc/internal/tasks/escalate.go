package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// escalation is the stored ESCALATE record.
type escalation struct {
	ID        string          `json:"escalation_id"`
	TaskID    string          `json:"task_id"`
	Owner     string          `json:"owner"`
	Reason    string          `json:"reason"`
	Context   json.RawMessage `json:"context"`
	Priority  string          `json:"priority"`
	RoutedTo  string          `json:"routed_to"`
	Deadline  time.Time       `json:"deadline,omitzero"`
	Status    string          `json:"status"`
	Created   time.Time       `json:"created"`
	ReviewBy  time.Time       `json:"review_by"`
	PrevState string          `json:"previous_task_status"`
	// Routing is how the escalation reached its recipient (routing
	// statuses); RoutingDetail says why a push failed.
	Routing       string    `json:"routing,omitempty"`
	RoutingDetail string    `json:"routing_detail,omitempty"`
	RoutedAt      time.Time `json:"routed_at,omitzero"`
}

// Routing statuses of an escalation. The admin API lists every pending
// escalation whatever its routing, so a failed push is never a dropped
// escalation.
const (
	// RoutingListed: the recipient is the admin API or an agent, which
	// find it listed (ListEscalations).
	RoutingListed = "listed"
	// RoutingPending: a webhook recipient the front door is pushing to.
	RoutingPending   = "pending"
	RoutingDelivered = "delivered"
	RoutingFailed    = "failed"
)

func (e *escalation) proto() *taskv1.Escalation {
	// ContextJson, Status, Priority and RoutingStatus are the first
	// release's fields, filled for its clients beside the enums and the
	// Value. A context stored before Values were checked on input may
	// have no Value form: it is then served in ContextJson only.
	ctxValue, _ := jsondoc.Value(e.Context)
	out := &taskv1.Escalation{EscalationId: e.ID, TaskId: e.TaskID, OwnerAgentId: e.Owner, Reason: e.Reason,
		//lint:ignore SA1019 the first release's fields, filled for its clients
		ContextJson: e.Context, Priority: e.Priority, RoutedTo: e.RoutedTo, Status: e.Status,
		Context:       ctxValue,
		State:         enumname.Value[taskv1.EscalationState](e.Status),
		PriorityLevel: enumname.Value[taskv1.EscalationPriority](e.Priority),
		CreatedAt:     timestamppb.New(e.Created), EstimatedReviewBy: timestamppb.New(e.ReviewBy),
		//lint:ignore SA1019 the first release's field, filled for its clients
		RoutingStatus: e.Routing, Routing: enumname.Value[taskv1.EscalationRouting](e.Routing), RoutingDetail: e.RoutingDetail}
	if !e.Deadline.IsZero() {
		out.Deadline = timestamppb.New(e.Deadline)
	}
	if !e.RoutedAt.IsZero() {
		out.RoutedAt = timestamppb.New(e.RoutedAt)
	}
	return out
}

// confirmation is the stored CONFIRM of one target.
type confirmation struct {
	TargetID    string    `json:"target_id"`
	TargetKind  string    `json:"target_kind"`
	TaskID      string    `json:"task_id"`
	Status      string    `json:"status"`
	Reason      string    `json:"reason,omitempty"`
	Confirmer   string    `json:"confirmer"`
	Attestation string    `json:"attestation_id,omitempty"`
	At          time.Time `json:"confirmed_at,omitzero"`
	// Claim is set while the attestation is being signed.
	Claim     string    `json:"claim,omitempty"`
	ClaimedAt time.Time `json:"claimed_at,omitzero"`
}

func (c *confirmation) proto() *taskv1.Confirmation {
	return &taskv1.Confirmation{TargetId: c.TargetID, TaskId: c.TaskID,
		//lint:ignore SA1019 the first release's field, filled for its clients beside Target
		TargetKind: c.TargetKind, Target: enumname.Value[taskv1.ConfirmationTarget](c.TargetKind),
		//lint:ignore SA1019 the first release's field, filled for its clients beside Outcome
		Status: c.Status, Outcome: enumname.Value[taskv1.ConfirmationOutcome](c.Status),
		Reason: c.Reason, ConfirmerAgentId: c.Confirmer, AttestationId: c.Attestation, ConfirmedAt: timestamppb.New(c.At)}
}

const escalationPrefix = "esc-"

// Escalate records an escalation and pauses its task. A Task-ID the
// caller has not used before starts a task owned by the caller: the draft
// has no verb that creates tasks, and Task-IDs are caller-chosen. A task
// that is already escalated answers its pending escalation (ESCALATE is
// idempotent).
func (s *Server) Escalate(ctx context.Context, in *taskv1.EscalateRequest) (*taskv1.EscalateResponse, error) {
	owner := in.GetCallerAgentId()
	if owner == "" {
		return nil, grpcerr.Unauthenticated("agent-unauthenticated", "ESCALATE needs Agent-ID")
	}
	if !validID(in.GetTaskId()) {
		return nil, grpcerr.InvalidArgument("task-id-invalid", "task_id must be 1-128 characters of letters, digits and ._:-")
	}
	if !EscalationReasons[in.GetReason()] {
		return nil, grpcerr.InvalidArgument("reason-invalid", "reason must be one of confidence_threshold, scope_limit, ethical_flag, ambiguous_instruction, resource_unavailable (core §3.3)")
	}
	//lint:ignore SA1019 a client of the first release sends context_json only
	doc, ok := document(in.GetContext(), in.GetContextJson())
	if !ok {
		return nil, grpcerr.InvalidArgument("context-invalid", fmt.Sprintf("context is required: a JSON value of at most %d bytes", maxContext))
	}
	//lint:ignore SA1019 a client of the first release sends the priority as a string only
	priority, err := requestedName(in.GetPriorityLevel(), in.GetPriority(), "normal", "priority")
	if err != nil {
		return nil, err
	}
	routed := in.GetRecipient()
	if len(routed) > maxRecipient {
		return nil, grpcerr.InvalidArgument("recipient-invalid", fmt.Sprintf("recipient is longer than %d", maxRecipient))
	}
	if routed == "" {
		routed = s.opts.DefaultRecipient
	}
	if mayConfirm(owner, &escalation{RoutedTo: routed}) {
		// Its recipient resolves an escalation; one routed back to the
		// escalating agent would be resolved by it (core §7.2.10).
		return nil, grpcerr.InvalidArgument("recipient-invalid", "an escalation goes to a reviewer other than the escalating agent")
	}
	routing := RoutingListed
	if strings.HasPrefix(routed, "https://") {
		if u, err := url.Parse(routed); err != nil || u.Host == "" || u.User != nil {
			return nil, grpcerr.InvalidArgument("recipient-invalid", "a webhook recipient is an https:// URL with a host and no credentials")
		}
		// The front door pushes it: a caller-named webhook must be one
		// this server may reach (the configured default is trusted).
		if err := s.checkDestination(ctx, owner, routed, dest{kind: KindWebhook}); err != nil {
			return nil, err
		}
		routing = RoutingPending
	}
	now := s.opts.Now().UTC()
	e := &escalation{ID: newID(escalationPrefix), TaskID: in.GetTaskId(), Owner: owner, Reason: in.GetReason(),
		Context: doc, Priority: priority, RoutedTo: routed, Status: PendingReview, Created: now,
		ReviewBy: now.Add(s.opts.ReviewWindow), Routing: routing}
	if d := in.GetDeadline(); d != nil {
		e.Deadline = d.AsTime().UTC()
		if e.Deadline.Before(e.ReviewBy) {
			e.ReviewBy = e.Deadline
		}
	}
	taskKey := rediskeys.Task(owner, e.TaskID)
	var t task
	var out *escalation
	err = s.watch(ctx, func(tx *redis.Tx) error {
		t = task{}
		found, err := getJSON(ctx, tx, taskKey, &t)
		if err != nil {
			return err
		}
		if !found {
			t = task{TaskID: e.TaskID, Owner: owner, Status: StatusRunning, Created: now, Updated: now}
			s.record(&t, now, "created", StatusRunning, owner, "", "")
		}
		if ended(t.Status) {
			return grpcerr.Conflict("task-ended", "task "+e.TaskID+" has ended ("+t.Status+")")
		}
		if t.Pending != "" {
			var prev escalation
			ok, err := getJSON(ctx, tx, rediskeys.TaskEscalation(owner, e.TaskID, t.Pending), &prev)
			if err != nil {
				return err
			}
			if ok && (prev.Status == PendingReview || prev.Status == Deferred) {
				out = &prev
				return nil
			}
		}
		e.PrevState = t.Status
		t.Pending = e.ID
		s.record(&t, now, "escalated", StatusEscalated, owner, e.ID, e.Reason)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, taskKey, mustJSON(t), s.opts.TaskTTL)
			p.Set(ctx, rediskeys.TaskEscalation(owner, e.TaskID, e.ID), mustJSON(e), s.opts.TaskTTL)
			return nil
		})
		out = e
		return err
	}, taskKey)
	if err != nil {
		return nil, storeErr("escalate", err)
	}
	if out == e {
		// The index and the admin listing live in other slots; written
		// after the task so that a crash leaves a paused task whose
		// escalation the owner can still read, never a listed one without
		// a task. The listing is scored by creation, and an escalation
		// created a task TTL ago has expired with its index key, so each
		// new one drops those: the set holds one task TTL's worth of
		// escalations, however many are never resolved.
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, rediskeys.EscalationIndex(e.ID), owner+"\x00"+e.TaskID, s.opts.TaskTTL)
			p.ZAdd(ctx, rediskeys.EscalationsPending, redis.Z{Score: float64(now.UnixMilli()), Member: e.ID})
			p.ZRemRangeByScore(ctx, rediskeys.EscalationsPending, "-inf", "("+strconv.FormatInt(now.Add(-s.opts.TaskTTL).UnixMilli(), 10))
			return nil
		})
		if err != nil {
			return nil, storeErr("escalate index", err)
		}
		s.log.InfoContext(ctx, "task escalated", "task_id", e.TaskID, "owner", owner, "escalation_id", e.ID, "routed_to", e.RoutedTo, "reason", e.Reason, "priority", e.Priority)
	}
	return &taskv1.EscalateResponse{Escalation: out.proto(), Task: t.proto()}, nil
}

// target is what a CONFIRM names.
type target struct {
	kind   string // escalation or task
	owner  string
	taskID string
	id     string
}

func (t target) keys() (taskKey, escKey, confirmKey string) {
	taskKey = rediskeys.Task(t.owner, t.taskID)
	if t.kind == "escalation" {
		escKey = rediskeys.TaskEscalation(t.owner, t.taskID, t.id)
	}
	return taskKey, escKey, rediskeys.TaskConfirmation(t.owner, t.taskID, t.id)
}

var errNoTarget = grpcerr.NotFound("target-not-found", "no escalation or task with that target_id")

// resolveTarget finds the escalation or the caller's own task a CONFIRM
// names.
func (s *Server) resolveTarget(ctx context.Context, caller, id string) (target, error) {
	if !validID(id) {
		return target{}, errNoTarget
	}
	if strings.HasPrefix(id, escalationPrefix) {
		v, err := s.rdb.Get(ctx, rediskeys.EscalationIndex(id)).Result()
		if errors.Is(err, redis.Nil) {
			return target{}, errNoTarget
		}
		if err != nil {
			return target{}, storeErr("escalation index", err)
		}
		owner, taskID, _ := strings.Cut(v, "\x00")
		return target{kind: "escalation", owner: owner, taskID: taskID, id: id}, nil
	}
	if caller == "" {
		return target{}, errNoTarget
	}
	return target{kind: "task", owner: caller, taskID: id, id: id}, nil
}

// mayConfirm says whether the caller may resolve an escalation: only its
// recipient may, named by Agent-ID or by an agtp:// URI carrying the ID.
// The owner resolving its own escalation would defeat it (core §7.2.10).
func mayConfirm(caller string, e *escalation) bool {
	r := e.RoutedTo
	if rest, ok := strings.CutPrefix(r, "agtp://"); ok {
		// agtp://<id> (hosted here) or agtp://<id>@host.
		r, _, _ = strings.Cut(rest, "@")
	}
	return caller != "" && r == caller
}

func validConfirmStatus(status, reason string) error {
	switch status {
	case Accepted:
	case Rejected, Deferred:
		if strings.TrimSpace(reason) == "" {
			return grpcerr.InvalidArgument("reason-required", "CONFIRM with status "+status+" needs a reason (core §7.2.11)")
		}
	default:
		return grpcerr.InvalidArgument("status-invalid", "status must be accepted, rejected or deferred")
	}
	if len(reason) > maxReason {
		return grpcerr.InvalidArgument("reason-invalid", fmt.Sprintf("reason is longer than %d", maxReason))
	}
	return nil
}

// BeginConfirm claims the confirmation of a target or returns the one
// already made. A deferred confirmation may be superseded by a later one.
func (s *Server) BeginConfirm(ctx context.Context, in *taskv1.BeginConfirmRequest) (*taskv1.BeginConfirmResponse, error) {
	//lint:ignore SA1019 a client of the first release sends the status as a string only
	status := enumname.Requested(in.GetOutcome(), in.GetStatus())
	if err := validConfirmStatus(status, in.GetReason()); err != nil {
		return nil, err
	}
	tg, err := s.resolveTarget(ctx, in.GetCallerAgentId(), in.GetTargetId())
	if err != nil {
		return nil, err
	}
	now := s.opts.Now().UTC()
	taskKey, escKey, confirmKey := tg.keys()
	keys := []string{taskKey, confirmKey}
	if escKey != "" {
		keys = append(keys, escKey)
	}
	//lint:ignore SA1019 the first release's field, filled for its clients beside Target
	out := &taskv1.BeginConfirmResponse{TargetKind: tg.kind, Target: enumname.Value[taskv1.ConfirmationTarget](tg.kind), TaskId: tg.taskID}
	err = s.watch(ctx, func(tx *redis.Tx) error {
		var t task
		ok, err := getJSON(ctx, tx, taskKey, &t)
		if err != nil {
			return err
		}
		if !ok {
			return errNoTarget
		}
		var e escalation
		if tg.kind == "escalation" {
			ok, err := getJSON(ctx, tx, escKey, &e)
			if err != nil {
				return err
			}
			if !ok {
				return errNoTarget
			}
			if !mayConfirm(in.GetCallerAgentId(), &e) {
				if in.GetCallerAgentId() == e.Owner {
					return grpcerr.PermissionDenied("confirm-not-recipient", "an escalation is resolved by its recipient ("+e.RoutedTo+"), not by the escalating agent")
				}
				return errNoTarget
			}
		} else if t.Pending != "" && t.Status == StatusEscalated {
			return grpcerr.Conflict("task-escalated", "task "+t.TaskID+" waits on escalation "+t.Pending+"; its recipient resolves it")
		}
		var c confirmation
		ok, err = getJSON(ctx, tx, confirmKey, &c)
		if err != nil {
			return err
		}
		if ok && c.Claim == "" {
			if c.Status == status && c.Confirmer == in.GetCallerAgentId() && c.Reason == in.GetReason() {
				out.Confirmation = c.proto()
				return nil
			}
			if c.Status != Deferred {
				return grpcerr.Conflict("already-confirmed", "target "+tg.id+" was already confirmed with status "+c.Status)
			}
		}
		if ok && c.Claim != "" && now.Sub(c.ClaimedAt) < s.opts.ClaimTimeout {
			if c.Status == status && c.Confirmer == in.GetCallerAgentId() {
				return grpcerr.Unavailable("confirm-in-progress", "the same CONFIRM is being attested; retry shortly")
			}
			return grpcerr.Conflict("confirm-in-progress", "another CONFIRM of this target is in progress")
		}
		if err := confirmable(&t, tg.kind, &e); err != nil {
			return err
		}
		claim := newID("")
		c = confirmation{TargetID: tg.id, TargetKind: tg.kind, TaskID: tg.taskID, Status: status, Reason: in.GetReason(),
			Confirmer: in.GetCallerAgentId(), Claim: claim, ClaimedAt: now}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, confirmKey, mustJSON(c), s.opts.TaskTTL)
			return nil
		})
		out.ClaimToken = claim
		return err
	}, keys...)
	if err != nil {
		return nil, storeErr("begin confirm", err)
	}
	return out, nil
}

// CompleteConfirm stores the attestation of a claimed confirmation and
// applies it: an accepted escalation resumes its task, a rejected one ends
// it, a deferred one keeps it paused.
func (s *Server) CompleteConfirm(ctx context.Context, in *taskv1.CompleteConfirmRequest) (*taskv1.CompleteConfirmResponse, error) {
	if in.GetClaimToken() == "" || in.GetAttestationId() == "" {
		return nil, grpcerr.InvalidArgument("claim-invalid", "claim_token and attestation_id are required")
	}
	tg, err := s.resolveTarget(ctx, in.GetCallerAgentId(), in.GetTargetId())
	if err != nil {
		return nil, err
	}
	now := s.opts.Now().UTC()
	at := now
	if in.GetConfirmedAt() != nil {
		at = in.GetConfirmedAt().AsTime().UTC()
	}
	taskKey, escKey, confirmKey := tg.keys()
	keys := []string{taskKey, confirmKey}
	if escKey != "" {
		keys = append(keys, escKey)
	}
	var t task
	var c confirmation
	err = s.watch(ctx, func(tx *redis.Tx) error {
		t, c = task{}, confirmation{}
		ok, err := getJSON(ctx, tx, confirmKey, &c)
		if err != nil {
			return err
		}
		if !ok {
			return errNoTarget
		}
		if c.Claim == "" && c.Attestation == in.GetAttestationId() {
			return getExisting(ctx, tx, taskKey, &t) // already completed: a retried CompleteConfirm
		}
		if c.Claim != in.GetClaimToken() {
			return grpcerr.Conflict("claim-lost", "the CONFIRM claim was taken over; repeat the CONFIRM")
		}
		if err := getExisting(ctx, tx, taskKey, &t); err != nil {
			return err
		}
		var e escalation
		if escKey != "" {
			if err := getExisting(ctx, tx, escKey, &e); err != nil {
				return err
			}
		}
		if err := confirmable(&t, tg.kind, &e); err != nil {
			// The task changed since the claim (an ESCALATE, another
			// resolution): the claim is dropped, so that the refusal is
			// final rather than a CONFIRM in progress until it times out.
			if _, derr := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, confirmKey)
				return nil
			}); derr != nil {
				return derr
			}
			return err
		}
		c.Claim, c.ClaimedAt, c.Attestation, c.At = "", time.Time{}, in.GetAttestationId(), at
		s.apply(&t, &e, tg.kind, c.Status, c.Confirmer, in.GetAttestationId(), c.Reason, now)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, confirmKey, mustJSON(c), s.opts.TaskTTL)
			p.Set(ctx, taskKey, mustJSON(t), s.opts.TaskTTL)
			if escKey != "" {
				p.Set(ctx, escKey, mustJSON(e), s.opts.TaskTTL)
			}
			return nil
		})
		return err
	}, keys...)
	if err != nil {
		return nil, storeErr("complete confirm", err)
	}
	if tg.kind == "escalation" && c.Status != Deferred {
		if err := s.rdb.ZRem(ctx, rediskeys.EscalationsPending, tg.id).Err(); err != nil {
			s.log.WarnContext(ctx, "escalation listing not updated", "escalation_id", tg.id, "error", err)
		}
	}
	s.log.InfoContext(ctx, "confirmed", "target_id", tg.id, "kind", tg.kind, "status", c.Status, "confirmer", c.Confirmer, "attestation_id", c.Attestation, "task_status", t.Status)
	return &taskv1.CompleteConfirmResponse{Confirmation: c.proto(), Task: t.proto()}, nil
}

// confirmable refuses a resolution that may no longer apply to task t:
// one that has ended, a task target that waits on an escalation (its
// recipient resolves it, docs/mechanics.md CONFIRM), an escalation its
// task no longer waits on. BeginConfirm checks it when it claims and
// CompleteConfirm again when it applies, in their transactions: an
// ESCALATE or another resolution may come between the two, and a CONFIRM
// applied over it would end a task under a pending escalation or resume
// an ended one.
func confirmable(t *task, kind string, e *escalation) error {
	switch {
	case ended(t.Status):
		return grpcerr.Conflict("task-ended", "task "+t.TaskID+" has ended ("+t.Status+")")
	case kind == "task" && t.Pending != "":
		return grpcerr.Conflict("task-escalated", "task "+t.TaskID+" waits on escalation "+t.Pending+"; its recipient resolves it")
	case kind == "escalation" && t.Pending != e.ID:
		return grpcerr.Conflict("already-confirmed", "task "+t.TaskID+" no longer waits on escalation "+e.ID)
	}
	return nil
}

// apply moves a task and its escalation by a resolution.
func (s *Server) apply(t *task, e *escalation, kind, status, actor, ref, reason string, now time.Time) {
	if kind == "escalation" {
		e.Status = status
		switch status {
		case Accepted:
			t.Pending = ""
			s.record(t, now, "resumed", StatusRunning, actor, ref, reason)
		case Rejected:
			t.Pending = ""
			s.record(t, now, "rejected", StatusRejected, actor, ref, reason)
		case Deferred:
			s.record(t, now, "deferred", StatusEscalated, actor, ref, reason)
		}
		return
	}
	switch status {
	case Accepted:
		s.record(t, now, "confirmed", StatusConfirmed, actor, ref, reason)
	case Rejected:
		s.record(t, now, "rejected", StatusRejected, actor, ref, reason)
	case Deferred:
		s.record(t, now, "deferred", StatusDeferred, actor, ref, reason)
	}
}
