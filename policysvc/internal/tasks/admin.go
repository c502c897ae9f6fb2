package tasks

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/paging"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// ListEscalations lists pending escalations oldest first, for a human
// principal working the review queue. Access to the admin API is the
// service's mTLS: only suite peers and operators reach it.
//
// Pages follow the pending set's order (raised time, then id); a token
// holds the last position returned, so escalations resolved or raised
// meanwhile neither repeat nor hide others. With routed_to, a page reads
// past the escalations routed elsewhere, at most escalationScanLimit
// of them per page, and returns a shorter page (with a token) when it
// reaches that bound.
func (s *Server) ListEscalations(ctx context.Context, in *taskv1.ListEscalationsRequest) (*taskv1.ListEscalationsResponse, error) {
	size := in.GetPageSize()
	if size == 0 {
		//lint:ignore SA1019 the first release's name for page_size, still honoured
		size = in.GetLimit()
	}
	page, err := escalationPaging.Parse(size, in.GetPageToken(), in.GetRoutedTo())
	if err != nil {
		return nil, err
	}
	var pos *paging.ZPos
	if page.After != "" {
		p, err := paging.ParseZPos(page.After)
		if err != nil {
			return nil, grpcerr.InvalidArgument(paging.ReasonPageTokenInvalid, err.Error())
		}
		pos = &p
	}
	out := &taskv1.ListEscalationsResponse{}
	for scanned := 0; len(out.Escalations) < page.Size && scanned < escalationScanLimit; {
		zs, err := paging.ZAfter(ctx, s.rdb, rediskeys.EscalationsPending, "-inf", "+inf", pos, page.Size-len(out.Escalations))
		if err != nil {
			return nil, storeErr("list escalations", err)
		}
		if len(zs) == 0 {
			return out, nil
		}
		scanned += len(zs)
		for _, z := range zs {
			id, _ := z.Member.(string)
			pos = &paging.ZPos{Score: z.Score, Member: id}
			e, err := s.loadEscalation(ctx, id)
			if err != nil {
				if errors.Is(err, errNoTarget) {
					// Expired with its task: the listing forgets it.
					if err := s.rdb.ZRem(ctx, rediskeys.EscalationsPending, id).Err(); err != nil {
						return nil, storeErr("list escalations", err)
					}
					continue
				}
				return nil, err
			}
			if e.Status != PendingReview && e.Status != Deferred {
				continue
			}
			if in.GetRoutedTo() != "" && e.RoutedTo != in.GetRoutedTo() {
				continue
			}
			out.Escalations = append(out.Escalations, e.proto())
		}
	}
	// A full page (or a bounded scan) has a next page when anything
	// follows its last position.
	more, err := paging.ZAfter(ctx, s.rdb, rediskeys.EscalationsPending, "-inf", "+inf", pos, 1)
	if err != nil {
		return nil, storeErr("list escalations", err)
	}
	if len(more) > 0 {
		out.NextPageToken = page.Next(pos.String())
	}
	return out, nil
}

// EventEscalationResolved is the lifecycle event of an escalation
// resolved through ResolveEscalation.
const EventEscalationResolved = "escalation_resolved"

// escalationPaging is ListEscalations' page sizes.
var escalationPaging = paging.Spec{RPC: taskv1.TaskService_ListEscalations_FullMethodName, Default: 100, Max: 500}

// escalationScanLimit bounds the pending escalations one ListEscalations
// page reads when routed_to skips some.
const escalationScanLimit = 5000

func (s *Server) loadEscalation(ctx context.Context, id string) (*escalation, error) {
	v, err := s.rdb.Get(ctx, rediskeys.EscalationIndex(id)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, errNoTarget
	}
	if err != nil {
		return nil, storeErr("escalation index", err)
	}
	owner, taskID, _ := strings.Cut(v, "\x00")
	var e escalation
	ok, err := getJSON(ctx, s.rdb, rediskeys.TaskEscalation(owner, taskID, id), &e)
	if err != nil {
		return nil, storeErr("escalation", err)
	}
	if !ok {
		return nil, errNoTarget
	}
	return &e, nil
}

// ResolveEscalation resolves a pending escalation as a human principal.
// It applies the same transition as a CONFIRM by the recipient. The
// resolution is signed first, by auditsvc, into the escalating agent's
// lifecycle stream as an "escalation_resolved" event naming the caller
// and the person (changelog), and that event is the confirmation's
// attestation; the task's history records it under
// "admin:<principal> via <operator identity>". A resolution that could
// not be signed is not made.
func (s *Server) ResolveEscalation(ctx context.Context, in *taskv1.ResolveEscalationRequest) (*taskv1.ResolveEscalationResponse, error) {
	principal := in.GetPrincipal()
	if p, ok := access.Person(ctx); ok {
		// The console resolves as the person signed in to it, whatever
		// the request names.
		principal = p
	}
	if principal == "" || len(principal) > maxID {
		return nil, grpcerr.InvalidArgument("principal-required", "name the resolving principal (at most 128 characters)")
	}
	//lint:ignore SA1019 a client of the first release sends the status as a string only
	status := enumname.Requested(in.GetOutcome(), in.GetStatus())
	if err := validConfirmStatus(status, in.GetReason()); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(in.GetEscalationId(), escalationPrefix) {
		return nil, errNoTarget
	}
	tg, err := s.resolveTarget(ctx, "", in.GetEscalationId())
	if err != nil {
		return nil, err
	}
	actor := "admin:" + principal
	if id, ok := access.Caller(ctx); ok {
		// The principal is who the operator answers for; the operator
		// is who its certificate says.
		actor += " via " + id.String()
	}
	now := s.opts.Now().UTC()
	taskKey, escKey, confirmKey := tg.keys()
	var t task
	var e escalation
	var replayed bool
	err = s.watch(ctx, func(tx *redis.Tx) error {
		t, e, replayed = task{}, escalation{}, false
		if err := getExisting(ctx, tx, escKey, &e); err != nil {
			return err
		}
		if err := getExisting(ctx, tx, taskKey, &t); err != nil {
			return err
		}
		if e.Status != PendingReview && e.Status != Deferred {
			// Only the same request again (same actor, status and reason,
			// as for CONFIRM) is answered with the resolution; anyone else
			// is refused, so no one is told a resolution they did not make
			// was theirs (docs/mechanics.md, admin resolution).
			var c confirmation
			if _, err := getJSON(ctx, tx, confirmKey, &c); err != nil {
				return err
			}
			if c.Claim == "" && c.Status == status && c.Confirmer == actor && c.Reason == in.GetReason() {
				replayed = true
				return nil
			}
			by := ""
			if c.Confirmer != "" {
				by = " by " + c.Confirmer
			}
			return grpcerr.Conflict("already-confirmed", "escalation "+e.ID+" was already resolved: "+e.Status+by)
		}
		if err := confirmable(&t, "escalation", &e); err != nil {
			return err
		}
		// Signed inside the transaction's optimistic retry: a retry signs
		// the same change again, which auditsvc answers with the event
		// appended the first time (changelog's request ID).
		attestation, err := s.changes.Record(ctx, e.Owner, EventEscalationResolved, map[string]any{
			"method": "CONFIRM", "target_kind": "escalation", "target_id": e.ID, "task_id": e.TaskID,
			"confirm_status": status, "reason": in.GetReason(), "principal": principal,
		}, e.ID, status, principal, in.GetReason())
		if err != nil {
			return err
		}
		c := confirmation{TargetID: e.ID, TargetKind: "escalation", TaskID: e.TaskID, Status: status, Reason: in.GetReason(),
			Confirmer: actor, Attestation: attestation, At: now}
		s.apply(&t, &e, "escalation", status, actor, attestation, in.GetReason(), now)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, confirmKey, mustJSON(c), s.opts.TaskTTL)
			p.Set(ctx, taskKey, mustJSON(t), s.opts.TaskTTL)
			p.Set(ctx, escKey, mustJSON(e), s.opts.TaskTTL)
			return nil
		})
		return err
	}, taskKey, escKey, confirmKey)
	if err != nil {
		return nil, storeErr("resolve escalation", err)
	}
	if e.Status != Deferred {
		if err := s.rdb.ZRem(ctx, rediskeys.EscalationsPending, e.ID).Err(); err != nil {
			s.log.WarnContext(ctx, "escalation listing not updated", "escalation_id", e.ID, "error", err)
		}
	}
	if !replayed {
		s.log.InfoContext(ctx, "escalation resolved by admin", "escalation_id", e.ID, "principal", principal, "status", e.Status, "task_status", t.Status)
	}
	return &taskv1.ResolveEscalationResponse{Escalation: e.proto(), Task: t.proto()}, nil
}

// RecordDelegation records one verified DELEGATE hop on the delegator's
// task (a new task when none is named). A paused task is refused, 409
// task-paused, and an ended one, 409 task-ended; a detail longer than
// maxReason is cut to it.
func (s *Server) RecordDelegation(ctx context.Context, in *taskv1.RecordDelegationRequest) (*taskv1.RecordDelegationResponse, error) {
	owner := in.GetDelegatorAgentId()
	if owner == "" || in.GetDelegateeAgentId() == "" {
		return nil, grpcerr.InvalidArgument("delegation-invalid", "delegator and delegatee are required")
	}
	taskID := in.GetTaskId()
	if taskID == "" {
		taskID = newID("task-")
	}
	if !validID(taskID) {
		return nil, grpcerr.InvalidArgument("task-id-invalid", "task_id must be 1-128 characters of letters, digits and ._:-")
	}
	//lint:ignore SA1019 a client of the first release sends the status as a string only
	status := enumname.Requested(in.GetOutcome(), in.GetStatus())
	if status == "" {
		status = StatusDelegated
	}
	if status != StatusDelegated && status != StatusFailed {
		return nil, grpcerr.InvalidArgument("status-invalid", "a delegation is delegated or failed")
	}
	id := newID("dlg-")
	now := s.opts.Now().UTC()
	key := rediskeys.Task(owner, taskID)
	var t task
	err := s.watch(ctx, func(tx *redis.Tx) error {
		t = task{}
		found, err := getJSON(ctx, tx, key, &t)
		if err != nil {
			return err
		}
		if !found {
			t = task{TaskID: taskID, Owner: owner, Created: now}
			s.record(&t, now, "created", StatusRunning, owner, "", "")
		}
		// A paused task runs no work and an ended one none again: the
		// front door checks before it runs the calls, this is the check
		// that holds (docs/mechanics.md, DELEGATE).
		if t.Status == StatusEscalated || t.Status == StatusPaused || t.Pending != "" {
			return grpcerr.Conflict("task-paused", "task "+taskID+" is paused by an escalation")
		}
		if ended(t.Status) {
			return grpcerr.Conflict("task-ended", "task "+taskID+" has ended ("+t.Status+")")
		}
		detail := "to " + in.GetDelegateeAgentId() + " scope " + strings.Join(in.GetAuthorityScope(), " ") + " task_hash " + in.GetTaskHash()
		if in.GetAuditId() != "" {
			detail += " audit_id " + in.GetAuditId()
		}
		if d := in.GetDetail(); d != "" {
			// Bounded like an escalation's routing detail, but cut
			// rather than refused: the hop ran, and is recorded.
			if len(d) > maxReason {
				d = strings.ToValidUTF8(d[:maxReason], "") + " (truncated)"
			}
			detail += ": " + d
		}
		s.record(&t, now, "delegated", status, owner, id, detail)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, mustJSON(t), s.opts.TaskTTL)
			return nil
		})
		return err
	}, key)
	if err != nil {
		return nil, storeErr("record delegation", err)
	}
	s.log.InfoContext(ctx, "delegation hop", "delegation_id", id, "delegator", owner, "delegatee", in.GetDelegateeAgentId(),
		"scope", in.GetAuthorityScope(), "task_id", taskID, "audit_id", in.GetAuditId(), "status", status)
	return &taskv1.RecordDelegationResponse{DelegationId: id, Task: t.proto()}, nil
}

// RecordEscalationRouting records how the push of an escalation to its
// webhook went; the task's history gets an event, its status is kept. A
// failed push leaves the escalation listed for the admin API.
func (s *Server) RecordEscalationRouting(ctx context.Context, in *taskv1.RecordEscalationRoutingRequest) (*taskv1.RecordEscalationRoutingResponse, error) {
	//lint:ignore SA1019 a client of the first release sends the status as a string only
	st := enumname.Requested(in.GetRouting(), in.GetStatus())
	if st != RoutingDelivered && st != RoutingFailed {
		return nil, grpcerr.InvalidArgument("status-invalid", "routing status is delivered or failed")
	}
	if len(in.GetDetail()) > maxReason {
		return nil, grpcerr.InvalidArgument("detail-invalid", "detail is too long")
	}
	if !strings.HasPrefix(in.GetEscalationId(), escalationPrefix) {
		return nil, errNoTarget
	}
	tg, err := s.resolveTarget(ctx, "", in.GetEscalationId())
	if err != nil {
		return nil, err
	}
	taskKey, escKey, _ := tg.keys()
	now := s.opts.Now().UTC()
	var e escalation
	err = s.watch(ctx, func(tx *redis.Tx) error {
		var t task
		e = escalation{}
		if err := getExisting(ctx, tx, escKey, &e); err != nil {
			return err
		}
		if err := getExisting(ctx, tx, taskKey, &t); err != nil {
			return err
		}
		if e.Routing == RoutingDelivered {
			return nil // a late report of an earlier attempt changes nothing
		}
		e.Routing, e.RoutingDetail, e.RoutedAt = st, in.GetDetail(), now
		event := "routed"
		if st == RoutingFailed {
			event = "routing_failed"
		}
		s.record(&t, now, event, t.Status, "server", e.ID, in.GetDetail())
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, escKey, mustJSON(e), s.opts.TaskTTL)
			p.Set(ctx, taskKey, mustJSON(t), s.opts.TaskTTL)
			return nil
		})
		return err
	}, taskKey, escKey)
	if err != nil {
		return nil, storeErr("record escalation routing", err)
	}
	s.log.InfoContext(ctx, "escalation routed", "escalation_id", e.ID, "routed_to", e.RoutedTo, "routing", e.Routing, "detail", e.RoutingDetail)
	return &taskv1.RecordEscalationRoutingResponse{Escalation: e.proto()}, nil
}
