package server

import (
	"context"
	"fmt"
	"time"

	"github.com/agtpsuite/agtp/policysvc/internal/taskrun"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/batchrpc"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/idempotency"
)

// Reasons of RETRY's refusals (standard methods §8.5).
const (
	ReasonTaskNotFound         = taskrun.NotFound
	ReasonTaskAlreadySucceeded = taskrun.AlreadySucceeded
	ReasonTaskOutcomeUnknown   = taskrun.OutcomeUnknown
	ReasonMaxAttemptsExhausted = taskrun.AttemptsExceeded
	ReasonRetryDelayed         = taskrun.Delayed
)

func taskRunOf(r *policyv1.TaskRun) *taskrun.Run {
	return &taskrun.Run{
		TaskID: r.GetTaskId(), Method: r.GetMethod(), Target: r.GetTarget(), Body: r.GetBody(),
		ContentType: r.GetContentType(), IdempotencyKey: r.GetIdempotencyKey(), Idempotent: r.GetEndpointIdempotent(),
	}
}

// indexTaskRun keeps a decided request that names a Task-ID for RETRY: a
// refusal with its status, an allowed request with a token for
// CompleteTaskRun. A replay is an earlier request's answer and is not
// indexed. Nor is any request while the Task-ID's entry is a
// non-idempotent request that succeeded or has no outcome yet
// (taskrun.Store.Record): a refused duplicate must not make RETRY repeat
// an effect that happened (standard methods §8.5). The index is a
// convenience of RETRY, so a Redis failure here is logged and does not
// fail the decision.
func (s *Server) indexTaskRun(ctx context.Context, req *policyv1.AuthorizeRequest, resp *policyv1.AuthorizeResponse) {
	r := req.GetTaskRun()
	if r == nil || req.GetAgentId() == "" {
		return
	}
	var status int
	var token string
	switch resp.GetDecision() {
	case policyv1.Decision_DECISION_DENY:
		status = int(resp.GetDenial().GetStatus())
	case policyv1.Decision_DECISION_ALLOW:
		token = idempotency.NewToken()
	default:
		return
	}
	batchrpc.Blocking(ctx)
	indexed, err := s.runs.Record(ctx, req.GetAgentId(), taskRunOf(r), status, token, time.Now())
	if err != nil {
		s.log.WarnContext(ctx, "task not indexed for RETRY", "err", err, "agent_id", req.GetAgentId())
		return
	}
	if indexed {
		resp.TaskRunToken = token
	}
}

// CompleteTaskRun records the status an indexed request ended with.
func (s *Server) CompleteTaskRun(ctx context.Context, req *policyv1.CompleteTaskRunRequest) (*policyv1.CompleteTaskRunResponse, error) {
	switch {
	case len(req.GetAgentId()) == 0 || len(req.GetAgentId()) > maxIDLen:
		return nil, grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, "agent_id is required")
	case len(req.GetTaskId()) == 0 || len(req.GetTaskId()) > taskrun.MaxTaskID:
		return nil, grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, "task_id must be 1-256 bytes")
	case len(req.GetToken()) != 32 || !isHex(req.GetToken()):
		return nil, grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, "token must be one Authorize returned")
	case req.GetStatus() < 100 || req.GetStatus() > 599:
		return nil, grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, "status must be 100-599")
	}
	// A lost race (the Task-ID was reused, or the entry expired) is not
	// the caller's error: the newer entry wins.
	if _, err := s.runs.Complete(ctx, req.GetAgentId(), req.GetTaskId(), req.GetToken(), int(req.GetStatus())); err != nil {
		return nil, s.redisError(ctx, err)
	}
	return &policyv1.CompleteTaskRunResponse{}, nil
}

// RetryTask decides a RETRY (standard methods §8.5): another agent's task
// is as unknown as a missing one (404, never 403), a non-idempotent
// original that succeeded is 409 and never re-run, max_attempts counts the
// original, and a delay not yet passed is 503 with retry_after_seconds.
func (s *Server) RetryTask(ctx context.Context, req *policyv1.RetryTaskRequest) (*policyv1.RetryTaskResponse, error) {
	switch {
	case len(req.GetAgentId()) == 0 || len(req.GetAgentId()) > maxIDLen:
		return nil, grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, "agent_id is required")
	case len(req.GetOriginalTaskId()) == 0 || len(req.GetOriginalTaskId()) > taskrun.MaxTaskID:
		return nil, grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, "original_task_id must be 1-256 bytes")
	case req.GetMaxAttempts() < 0 || req.GetMaxAttempts() > taskrun.MaxAttempts:
		return nil, grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, "max_attempts must be 0-1000")
	case req.GetDelaySeconds() < 0 || time.Duration(req.GetDelaySeconds())*time.Second > taskrun.MaxDelay:
		return nil, grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, "delay_seconds must be 0-86400")
	}
	d, err := s.runs.Retry(ctx, req.GetAgentId(), req.GetOriginalTaskId(), int(req.GetMaxAttempts()),
		time.Duration(req.GetDelaySeconds())*time.Second, time.Now())
	if err != nil {
		return nil, s.redisError(ctx, err)
	}
	resp := &policyv1.RetryTaskResponse{Attempt: int32(d.Attempt), PreviousStatus: int32(d.PreviousStatus)}
	switch d.Verdict {
	case taskrun.Allowed:
		r := d.Run
		resp.TaskRun = &policyv1.TaskRun{
			TaskId: r.TaskID, Method: r.Method, Target: r.Target, Body: r.Body, ContentType: r.ContentType,
			IdempotencyKey: r.IdempotencyKey, EndpointIdempotent: r.Idempotent,
		}
	case taskrun.NotFound:
		resp.Denial = deny(agtp.StatusNotFound, ReasonTaskNotFound,
			"the caller has no task with this original_task_id (tasks are kept 24 hours after their last request)")
	case taskrun.AlreadySucceeded:
		resp.Denial = deny(agtp.StatusConflict, ReasonTaskAlreadySucceeded,
			"the original task is not idempotent and already succeeded; running it again would repeat its effect")
	case taskrun.OutcomeUnknown:
		resp.Denial = deny(agtp.StatusConflict, ReasonTaskOutcomeUnknown,
			"the original task is not idempotent, has no recorded outcome (it may still be running) and carried no Idempotency-Key to detect a duplicate")
	case taskrun.AttemptsExceeded:
		resp.Denial = deny(agtp.StatusConflict, ReasonMaxAttemptsExhausted,
			"the task has already been attempted max_attempts times")
	case taskrun.Delayed:
		secs := int64((d.Wait + time.Second - 1) / time.Second)
		resp.Denial = deny(agtp.StatusUnavailable, ReasonRetryDelayed,
			"the delay since the task's last attempt has not passed; retry after retry_after_seconds")
		resp.Denial.RetryAfterSeconds = max(secs, 1)
	default:
		return nil, grpcerr.Internal(fmt.Errorf("unknown retry verdict %q", d.Verdict))
	}
	return resp, nil
}
