package builtin

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// RETRY (standard methods §8.5) re-runs a request an agent sent under a
// Task-ID. policysvc indexes every request that carries a Task-ID and an
// Agent-ID and reaches an operator endpoint, in the Authorize call the
// request makes anyway (the pipeline's policy stage); a non-idempotent one
// reports its handler's status once it answered (a record hook of the
// pipeline). This built-in asks policysvc whether the task may run again
// and runs it through the whole pipeline under a new Task-ID.

// Reasons of the RETRY built-in's own refusals (policysvc words the
// others: task-not-found, task-already-succeeded, task-outcome-unknown,
// max-attempts-exhausted, retry-delayed).
const (
	ReasonOriginalTaskIDRequired = "original-task-id-required"
	ReasonRetryParameterInvalid  = "retry-parameter-invalid"
)

// Bounds of a RETRY's parameters.
const (
	maxRetryAttempts = 1000
	maxRetryDelay    = 86400
)

// retryKey carries, in a re-run's context, the task it re-runs.
type retryKey struct{}

// WithRetryOf marks ctx as the re-run of the task originalTaskID, so the
// re-run's Attribution-Record links the original task.
func WithRetryOf(ctx context.Context, originalTaskID string) context.Context {
	return context.WithValue(ctx, retryKey{}, originalTaskID)
}

// RetryOf is the original task a re-run's context names, "" for any other
// request.
func RetryOf(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	id, _ := ctx.Value(retryKey{}).(string)
	return id
}

// retry serves the RETRY built-in.
func (bi *Registry) retry(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	orig := str(params, "original_task_id")
	if orig == "" {
		return call.Fail(agtp.StatusBadRequest, ReasonOriginalTaskIDRequired,
			"RETRY needs original_task_id, the Task-ID of the invocation to re-attempt (standard methods §8.5)", nil)
	}
	maxAttempts, ok := intParam(params, "max_attempts", 1, maxRetryAttempts)
	if !ok {
		return call.Fail(agtp.StatusBadRequest, ReasonRetryParameterInvalid, "max_attempts must be an integer from 1 to 1000", nil)
	}
	delay, ok := intParam(params, "delay", 0, maxRetryDelay)
	if !ok {
		return call.Fail(agtp.StatusBadRequest, ReasonRetryParameterInvalid, "delay must be an integer number of seconds from 0 to 86400", nil)
	}
	out, err := bi.Policy.RetryTask(ctx, &policyv1.RetryTaskRequest{
		AgentId: call.AgentID, OriginalTaskId: orig, MaxAttempts: int32(maxAttempts), DelaySeconds: int32(delay),
	})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	if d := out.GetDenial(); d != nil {
		extra := map[string]any{"original_task_id": orig}
		if out.GetAttempt() > 0 {
			extra["attempts"] = out.GetAttempt()
		}
		if d.GetRetryAfterSeconds() > 0 {
			extra["retry_after_seconds"] = d.GetRetryAfterSeconds()
		}
		resp := call.Fail(int(d.GetStatus()), d.GetReason(), d.GetExplanation(), extra)
		if d.GetRetryAfterSeconds() > 0 {
			resp.Header.Set("Retry-After", strconv.FormatInt(d.GetRetryAfterSeconds(), 10))
		}
		return resp
	}
	run := out.GetTaskRun()

	// The re-run is a new task (§8.5 "new task receipt"): the RETRY's own
	// Task-ID when it has one of its own, else a fresh one.
	newTask := call.Header.Get(agtp.HeaderTaskID)
	if newTask == "" || newTask == orig {
		newTask = answer.NewID()
	}
	req := &agtp.Request{Method: run.GetMethod(), Target: run.GetTarget(), Path: run.GetTarget(), Body: run.GetBody()}
	if i := strings.IndexByte(req.Path, '?'); i >= 0 {
		req.Path, req.RawQuery = req.Path[:i], req.Path[i+1:]
	}
	for _, name := range answer.InheritedHeaders {
		if val, ok := call.Header.Lookup(name); ok && name != agtp.HeaderTaskID {
			req.Header.Set(name, val)
		}
	}
	req.Header.Set(agtp.HeaderTaskID, newTask)
	if v := call.Header.Get(agtp.HeaderRequestID); v != "" {
		req.Header.Set(agtp.HeaderRequestID, v)
	}
	// The original's Idempotency-Key detects a partially processed
	// original. A non-idempotent original without one gets a key of its
	// Task-ID, so that its retries detect each other: once one succeeded,
	// the next replays it instead of repeating the effect.
	switch {
	case run.GetIdempotencyKey() != "":
		req.Header.Set(agtp.HeaderIdempotencyKey, run.GetIdempotencyKey())
	case !run.GetEndpointIdempotent():
		req.Header.Set(agtp.HeaderIdempotencyKey, answer.DerivedKey("retry", orig))
	}
	if len(run.GetBody()) > 0 {
		ct := run.GetContentType()
		if ct == "" {
			ct = agtp.MediaTypeJSON
		}
		req.Header.Set(agtp.HeaderContentType, ct)
		req.Header.Set(agtp.HeaderContentLength, strconv.Itoa(len(run.GetBody())))
	}

	inner := bi.ServeInner(WithRetryOf(ctx, orig), call.Conn, req)
	if id := inner.Header.Get(agtp.HeaderAuditID); id != "" {
		call.Priors = append(call.Priors, attribution.PriorAction{AgentID: call.AgentID, AuditID: id})
	}
	return retryAnswer(call, inner, orig, newTask, int(out.GetAttempt()))
}

// retryAnswer is the re-run's answer with the link to the original task:
// a JSON object body gets original_task_id, task_id (the new task) and
// attempt; another body is wrapped as the result.
func retryAnswer(call *Call, inner *agtp.Response, orig, newTask string, attempt int) *agtp.Response {
	body := map[string]any{}
	if json.Unmarshal(inner.Body, &body) != nil {
		body = map[string]any{"status": inner.Status}
		if len(inner.Body) > 0 {
			body["result"] = string(inner.Body)
		}
	}
	body["original_task_id"] = orig
	body["task_id"] = newTask
	body["attempt"] = attempt
	b, err := json.Marshal(body)
	if err != nil {
		return call.Fail(agtp.StatusServerError, "internal", "the RETRY answer could not be encoded", nil)
	}
	resp := agtp.NewResponse(inner.Status, agtp.MediaTypeJSON, b)
	if v := inner.Header.Get(agtp.HeaderIdempotentReplayed); v != "" {
		resp.Header.Set(agtp.HeaderIdempotentReplayed, v)
	}
	if inner.Status >= 400 {
		var eb struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(inner.Body, &eb)
		call.Rejection = eb.Reason
	}
	return resp
}
