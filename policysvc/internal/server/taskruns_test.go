package server_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/policysvc/internal/server"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
)

func withTaskRun(r *policyv1.AuthorizeRequest, taskID string) *policyv1.AuthorizeRequest {
	r.TaskRun = &policyv1.TaskRun{TaskId: taskID, Method: r.GetMethod(), Target: "/orders?x=1", Body: []byte(`{"item":"a"}`),
		ContentType: "application/json", EndpointIdempotent: r.GetEndpointIdempotent()}
	return r
}

func retry(t *testing.T, c policyv1.PolicyServiceClient, agent, task string, maxAttempts int32) *policyv1.RetryTaskResponse {
	t.Helper()
	resp, err := c.RetryTask(context.Background(), &policyv1.RetryTaskRequest{AgentId: agent, OriginalTaskId: task, MaxAttempts: maxAttempts})
	if err != nil {
		t.Fatalf("RetryTask: %v", err)
	}
	return resp
}

func TestTaskRunsForRetry(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{}, nil)
	ctx := context.Background()

	// An allowed non-idempotent request is indexed with a token; once it
	// completed with 201, RETRY refuses to repeat it.
	ok := authorize(t, c, withTaskRun(request(agentA), "t-ok"))
	wantAllow(t, ok)
	if len(ok.GetTaskRunToken()) != 32 {
		t.Fatalf("task_run_token = %q", ok.GetTaskRunToken())
	}
	if _, err := c.CompleteTaskRun(ctx, &policyv1.CompleteTaskRunRequest{AgentId: agentA, TaskId: "t-ok", Token: ok.GetTaskRunToken(), Status: 201}); err != nil {
		t.Fatal(err)
	}

	// A request policy refused is indexed with its status and may be
	// re-run: the RETRY returns what to run.
	refused := request(agentA)
	refused.AuthorityScope, refused.AuthorityScopePresent = "orders:read", true
	refused.RequiredScopes = []string{"orders:write"}
	deny := authorize(t, c, withTaskRun(refused, "t-refused"))
	wantDenial(t, deny, 262, "scope-required")

	// Without a Task-ID nothing is indexed.
	wantAllow(t, authorize(t, c, request(agentA)))

	for _, tc := range []struct {
		name, agent, task string
		maxAttempts       int32
		status            int32
		reason            string
	}{
		{"unknown task", agentA, "t-none", 0, 404, server.ReasonTaskNotFound},
		{"another agent's task", agentB, "t-refused", 0, 404, server.ReasonTaskNotFound},
		{"succeeded non-idempotent", agentA, "t-ok", 0, 409, server.ReasonTaskAlreadySucceeded},
		{"refused may run again", agentA, "t-refused", 0, 0, ""},
		{"attempts exhausted", agentA, "t-refused", 2, 409, server.ReasonMaxAttemptsExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := retry(t, c, tc.agent, tc.task, tc.maxAttempts)
			if tc.status == 0 {
				run := r.GetTaskRun()
				if r.GetDenial() != nil || run.GetMethod() != "EXECUTE" || run.GetTarget() != "/orders?x=1" ||
					string(run.GetBody()) != `{"item":"a"}` || r.GetAttempt() != 2 || r.GetPreviousStatus() != 262 {
					t.Fatalf("retry = %v", r)
				}
				return
			}
			if d := r.GetDenial(); d.GetStatus() != tc.status || d.GetReason() != tc.reason || r.GetTaskRun() != nil {
				t.Fatalf("retry = %v, want %d %s", r, tc.status, tc.reason)
			}
		})
	}

	// Malformed calls are the caller's bug, not a verdict.
	_, err := c.RetryTask(ctx, &policyv1.RetryTaskRequest{AgentId: agentA})
	wantCode(t, err, codes.InvalidArgument, server.ReasonInvalidPolicyRequest)
	_, err = c.CompleteTaskRun(ctx, &policyv1.CompleteTaskRunRequest{AgentId: agentA, TaskId: "t-ok", Token: "nope", Status: 200})
	wantCode(t, err, codes.InvalidArgument, server.ReasonInvalidPolicyRequest)
	big := withTaskRun(request(agentA), "t-big")
	big.TaskRun.Body = make([]byte, 64<<10+1)
	_, err = c.Authorize(ctx, big)
	wantCode(t, err, codes.InvalidArgument, server.ReasonInvalidPolicyRequest)
}

// A non-idempotent request that succeeded under a Task-ID is never re-run
// by RETRY (standard methods §8.5, docs/policy.md). A later request under
// the same Task-ID that policy refused (the agent re-sent it and hit its
// rate limit) did nothing: it leaves the entry as it is, whether the first
// request's 201 is in already or lands after the refusal.
func TestRefusedDuplicateKeepsTheTaskSuccess(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{RateLimits: server.RateLimitOptions{
		Tiers: map[string]rateT{"default": {Limit: 1, Period: time.Hour}}}}, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name, agent   string
		completeFirst bool
	}{
		{"completed before the duplicate", agentA, true},
		{"completed after the duplicate", agentB, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			complete := func(token string) {
				t.Helper()
				if _, err := c.CompleteTaskRun(ctx, &policyv1.CompleteTaskRunRequest{
					AgentId: tc.agent, TaskId: "t-pay", Token: token, Status: 201}); err != nil {
					t.Fatal(err)
				}
			}
			ok := authorize(t, c, withTaskRun(request(tc.agent), "t-pay"))
			wantAllow(t, ok)
			if tc.completeFirst {
				complete(ok.GetTaskRunToken())
			}
			dup := authorize(t, c, withTaskRun(request(tc.agent), "t-pay"))
			wantDenial(t, dup, 429, "rate-limited")
			if !tc.completeFirst {
				complete(ok.GetTaskRunToken())
			}
			r := retry(t, c, tc.agent, "t-pay", 0)
			if d := r.GetDenial(); d.GetStatus() != 409 || d.GetReason() != server.ReasonTaskAlreadySucceeded || r.GetPreviousStatus() != 201 {
				t.Fatalf("RETRY of a task whose non-idempotent request succeeded (201) = denial %v, run %v (previous status %d); want 409 %s",
					d, r.GetTaskRun() != nil, r.GetPreviousStatus(), server.ReasonTaskAlreadySucceeded)
			}
		})
	}
}

// BenchmarkAuthorizeTaskRun is BenchmarkAuthorize's claim case with a
// Task-ID indexed for RETRY, and the completion the front door sends
// after a non-idempotent handler: the cost a request with a Task-ID pays.
func BenchmarkAuthorizeTaskRun(b *testing.B) {
	srv, err := server.New(benchRedis(b), discard, benchOptions())
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	runAuthorize(b, func(ctx context.Context, r *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
		task := "task-" + strconv.FormatInt(n.Add(1), 10)
		r.TaskRun = &policyv1.TaskRun{TaskId: task, Method: r.GetMethod(), Target: "/orders", Body: []byte(`{"item":"a"}`)}
		resp, err := srv.Authorize(ctx, r)
		if err != nil {
			return nil, err
		}
		_, err = srv.CompleteTaskRun(ctx, &policyv1.CompleteTaskRunRequest{AgentId: r.GetAgentId(), TaskId: task, Token: resp.GetTaskRunToken(), Status: 201})
		return resp, err
	}, true)
}
