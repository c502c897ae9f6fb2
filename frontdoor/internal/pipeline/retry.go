package pipeline

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// RETRY (standard methods §8.5) re-runs a request an agent sent under a
// Task-ID. policysvc indexes every request that carries a Task-ID and an
// Agent-ID and reaches an operator endpoint, in the Authorize call the
// request makes anyway; a non-idempotent one reports its handler's status
// once it answered (CompleteTaskRun). The RETRY built-in asks policysvc
// whether the task may run again and runs it through the whole pipeline
// under a new Task-ID.

// Reasons of the RETRY built-in's own refusals (policysvc words the
// others: task-not-found, task-already-succeeded, task-outcome-unknown,
// max-attempts-exhausted, retry-delayed).
const (
	ReasonOriginalTaskIDRequired = "original-task-id-required"
	ReasonRetryParameterInvalid  = "retry-parameter-invalid"
)

// Bounds of what is indexed for RETRY: a larger request is not indexed,
// and a RETRY naming it gets 404.
const (
	maxTaskRunBody   = 64 << 10
	maxTaskRunTarget = 8 << 10
	maxTaskIDLen     = 256
	maxRetryAttempts = 1000
	maxRetryDelay    = 86400
)

// recordOriginalTaskID is the Attribution-Record member that links a
// RETRY, and the request it re-ran, to the original task.
const recordOriginalTaskID = "original_task_id"

// taskRun is what policysvc indexes for a RETRY of this request, nil
// when it is not indexed: no Task-ID, anonymous, a built-in, or a body
// or target over the bounds.
func taskRun(x *exchange, ep *catalogv1.Endpoint) *policyv1.TaskRun {
	taskID, ok := x.req.Header.Lookup(agtp.HeaderTaskID)
	if !ok || taskID == "" || len(taskID) > maxTaskIDLen || x.agentID == "" {
		return nil
	}
	if strings.HasPrefix(ep.GetHandlerName(), builtinPrefix) || len(x.req.Body) > maxTaskRunBody {
		return nil
	}
	target := x.req.Path
	if x.req.RawQuery != "" {
		target += "?" + x.req.RawQuery
	}
	if len(target) > maxTaskRunTarget || !strings.HasPrefix(target, "/") {
		return nil
	}
	return &policyv1.TaskRun{
		TaskId: taskID, Method: x.req.Method, Target: target, Body: x.req.Body,
		ContentType: x.req.Header.Get(agtp.HeaderContentType), IdempotencyKey: x.idemKey,
		EndpointIdempotent: ep.GetIsIdempotent(),
	}
}

// completeTaskRun tells policysvc how an indexed non-idempotent request
// ended, so that a RETRY never repeats one that succeeded. It is the
// handler's status, not the one sent: a 503 audit-unavailable still
// follows a side effect. Idempotent requests are re-run whatever their
// status, so they cost nothing here.
func (p *Pipeline) completeTaskRun(x *exchange, resp *agtp.Response) {
	token := x.authz.GetTaskRunToken()
	if token == "" || x.replayed {
		return
	}
	if x.matched && x.decision.Endpoint != nil && x.decision.Endpoint.Proto.GetIsIdempotent() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 2*time.Second)
	defer cancel()
	in := &policyv1.CompleteTaskRunRequest{AgentId: x.agentID, TaskId: x.req.Header.Get(agtp.HeaderTaskID), Token: token, Status: int32(resp.Status)}
	if _, err := p.Policy.CompleteTaskRun(ctx, in); err != nil {
		// The entry keeps an unknown outcome: a RETRY of it runs only
		// under its Idempotency-Key.
		p.Log.WarnContext(ctx, "task outcome not recorded for RETRY", "error", err, "agent_id", x.agentID)
	}
}

// retryKey carries, in a re-run's context, the task it re-runs.
type retryKey struct{}

type retryLink struct {
	originalTaskID string
}

// retry serves the RETRY built-in.
func (p *Pipeline) retry(x *exchange, params map[string]any) *agtp.Response {
	orig := str(params, "original_task_id")
	if orig == "" {
		return x.fail(agtp.StatusBadRequest, ReasonOriginalTaskIDRequired,
			"RETRY needs original_task_id, the Task-ID of the invocation to re-attempt (standard methods §8.5)", nil)
	}
	maxAttempts, ok := intParam(params, "max_attempts", 1, maxRetryAttempts)
	if !ok {
		return x.fail(agtp.StatusBadRequest, ReasonRetryParameterInvalid, "max_attempts must be an integer from 1 to 1000", nil)
	}
	delay, ok := intParam(params, "delay", 0, maxRetryDelay)
	if !ok {
		return x.fail(agtp.StatusBadRequest, ReasonRetryParameterInvalid, "delay must be an integer number of seconds from 0 to 86400", nil)
	}
	out, err := p.Policy.RetryTask(x.ctx, &policyv1.RetryTaskRequest{
		AgentId: x.agentID, OriginalTaskId: orig, MaxAttempts: int32(maxAttempts), DelaySeconds: int32(delay),
	})
	if err != nil {
		return p.dependencyFailure(x, "policysvc", err)
	}
	if d := out.GetDenial(); d != nil {
		extra := map[string]any{"original_task_id": orig}
		if out.GetAttempt() > 0 {
			extra["attempts"] = out.GetAttempt()
		}
		if d.GetRetryAfterSeconds() > 0 {
			extra["retry_after_seconds"] = d.GetRetryAfterSeconds()
		}
		resp := x.fail(int(d.GetStatus()), d.GetReason(), d.GetExplanation(), extra)
		if d.GetRetryAfterSeconds() > 0 {
			resp.Header.Set("Retry-After", strconv.FormatInt(d.GetRetryAfterSeconds(), 10))
		}
		return resp
	}
	run := out.GetTaskRun()

	// The re-run is a new task (§8.5 "new task receipt"): the RETRY's own
	// Task-ID when it has one of its own, else a fresh one.
	newTask := x.req.Header.Get(agtp.HeaderTaskID)
	if newTask == "" || newTask == orig {
		newTask = newResponseID()
	}
	req := &agtp.Request{Method: run.GetMethod(), Target: run.GetTarget(), Path: run.GetTarget(), Body: run.GetBody()}
	if i := strings.IndexByte(req.Path, '?'); i >= 0 {
		req.Path, req.RawQuery = req.Path[:i], req.Path[i+1:]
	}
	for _, name := range inheritedHeaders {
		if val, ok := x.req.Header.Lookup(name); ok && name != agtp.HeaderTaskID {
			req.Header.Set(name, val)
		}
	}
	req.Header.Set(agtp.HeaderTaskID, newTask)
	if v := x.req.Header.Get(agtp.HeaderRequestID); v != "" {
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
		req.Header.Set(agtp.HeaderIdempotencyKey, derivedKey("retry", orig))
	}
	if len(run.GetBody()) > 0 {
		ct := run.GetContentType()
		if ct == "" {
			ct = agtp.MediaTypeJSON
		}
		req.Header.Set(agtp.HeaderContentType, ct)
		req.Header.Set(agtp.HeaderContentLength, strconv.Itoa(len(run.GetBody())))
	}

	ctx := context.WithValue(x.ctx, retryKey{}, retryLink{originalTaskID: orig})
	inner := p.serveInner(ctx, x, req)
	if id := inner.Header.Get(agtp.HeaderAuditID); id != "" {
		x.priors = append(x.priors, attribution.PriorAction{AgentID: x.agentID, AuditID: id})
	}
	return retryAnswer(x, inner, orig, newTask, int(out.GetAttempt()))
}

// retryAnswer is the re-run's answer with the link to the original task:
// a JSON object body gets original_task_id, task_id (the new task) and
// attempt; another body is wrapped as the result.
func retryAnswer(x *exchange, inner *agtp.Response, orig, newTask string, attempt int) *agtp.Response {
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
		return x.fail(agtp.StatusServerError, "internal", "the RETRY answer could not be encoded", nil)
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
		x.rejection = eb.Reason
	}
	return resp
}

// retryRecord links a record to the original task: the RETRY's own (from
// its validated input) and the re-run's (from its context).
func retryRecord(x *exchange, payload *attribution.Payload) {
	orig := ""
	var link retryLink
	if x.ctx != nil {
		link, _ = x.ctx.Value(retryKey{}).(retryLink)
	}
	if link.originalTaskID != "" {
		orig = link.originalTaskID
	} else if x.inputMethod == "RETRY" && x.input != nil {
		var in struct {
			Orig string `json:"original_task_id"`
		}
		if json.Unmarshal(x.input, &in) == nil {
			orig = in.Orig
		}
	}
	if orig == "" || len(orig) > maxTaskIDLen {
		return
	}
	v, err := json.Marshal(orig)
	if err != nil {
		return
	}
	if payload.Extra == nil {
		payload.Extra = map[string]json.RawMessage{}
	}
	payload.Extra[recordOriginalTaskID] = v
}

// intParam reads an optional integer parameter within [lo, hi]; absent
// is 0.
func intParam(params map[string]any, name string, lo, hi int) (int, bool) {
	v, present := params[name]
	if !present || v == nil {
		return 0, true
	}
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) || int(f) < lo || int(f) > hi {
		return 0, false
	}
	return int(f), true
}
