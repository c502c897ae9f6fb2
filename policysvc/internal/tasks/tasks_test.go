package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/policysvc/internal/changelog/changelogtest"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

const (
	owner    = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	reviewer = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	stranger = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
)

func start(t *testing.T, opts Options) (taskv1.TaskServiceClient, *Server) {
	t.Helper()
	rdb := testkit.StartRedis(t).Client(t)
	srv, err := New(rdb, slog.New(slog.DiscardHandler), opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.RecordChanges(changelogtest.Start(t).Recorder)
	return startWith(t, srv), srv
}

// startWith serves srv over gRPC on loopback.
func startWith(t *testing.T, srv *Server) taskv1.TaskServiceClient {
	t.Helper()
	conn := testkit.ServeGRPC(t, func(g grpc.ServiceRegistrar) { taskv1.RegisterTaskServiceServer(g, srv) })
	return taskv1.NewTaskServiceClient(conn)
}

func code(err error) codes.Code { return status.Code(err) }

func escalate(t *testing.T, c taskv1.TaskServiceClient, taskID string) *taskv1.EscalateResponse {
	t.Helper()
	r, err := c.Escalate(context.Background(), &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: taskID,
		Reason: "ethical_flag", Context: testkit.JSONValue(`{"why":"refund over limit"}`), Recipient: reviewer})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func confirm(t *testing.T, c taskv1.TaskServiceClient, caller, target, st, reason, attestation string) (*taskv1.CompleteConfirmResponse, *taskv1.BeginConfirmResponse) {
	t.Helper()
	ctx := context.Background()
	b, err := c.BeginConfirm(ctx, &taskv1.BeginConfirmRequest{CallerAgentId: caller, TargetId: target, Outcome: enumname.Value[taskv1.ConfirmationOutcome](st), Reason: reason})
	if err != nil {
		t.Fatalf("begin confirm: %v", err)
	}
	if b.GetConfirmation() != nil {
		return nil, b
	}
	r, err := c.CompleteConfirm(ctx, &taskv1.CompleteConfirmRequest{CallerAgentId: caller, TargetId: target, ClaimToken: b.GetClaimToken(), AttestationId: attestation})
	if err != nil {
		t.Fatalf("complete confirm: %v", err)
	}
	return r, b
}

func TestEscalationPausesUntilConfirmResolvesIt(t *testing.T) {
	for _, tc := range []struct {
		status, reason, wantTask, wantEsc string
	}{
		{Accepted, "", StatusRunning, Accepted},
		{Rejected, "no", StatusRejected, Rejected},
		{Deferred, "later", StatusEscalated, Deferred},
	} {
		t.Run(tc.status, func(t *testing.T) {
			c, _ := start(t, Options{})
			r := escalate(t, c, "t-1")
			if enumname.Of(r.GetTask().GetState()) != StatusEscalated || r.GetEscalation().GetState() != taskv1.EscalationState_ESCALATION_STATE_PENDING_REVIEW ||
				r.GetEscalation().GetPriorityLevel() != taskv1.EscalationPriority_ESCALATION_PRIORITY_NORMAL || r.GetEscalation().GetRoutedTo() != reviewer {
				t.Fatalf("escalate = %v", r)
			}
			list, err := c.ListEscalations(context.Background(), &taskv1.ListEscalationsRequest{Principal: "ops"})
			if err != nil || len(list.GetEscalations()) != 1 {
				t.Fatalf("pending = %v, %v", list, err)
			}
			done, _ := confirm(t, c, reviewer, r.GetEscalation().GetEscalationId(), tc.status, tc.reason, "att-1")
			if enumname.Of(done.GetTask().GetState()) != tc.wantTask {
				t.Fatalf("task status %q, want %q", enumname.Of(done.GetTask().GetState()), tc.wantTask)
			}
			list, _ = c.ListEscalations(context.Background(), &taskv1.ListEscalationsRequest{Principal: "ops"})
			if want := map[bool]int{true: 1, false: 0}[tc.status == Deferred]; len(list.GetEscalations()) != want {
				t.Fatalf("pending after %s = %d, want %d", tc.status, len(list.GetEscalations()), want)
			}
		})
	}
}

func TestConfirmIsIdempotent(t *testing.T) {
	c, _ := start(t, Options{})
	id := escalate(t, c, "t-2").GetEscalation().GetEscalationId()
	first, _ := confirm(t, c, reviewer, id, Accepted, "", "att-1")
	_, again := confirm(t, c, reviewer, id, Accepted, "", "att-2")
	if again.GetConfirmation().GetAttestationId() != first.GetConfirmation().GetAttestationId() {
		t.Fatalf("replayed attestation %q, want %q", again.GetConfirmation().GetAttestationId(), first.GetConfirmation().GetAttestationId())
	}
	_, err := c.BeginConfirm(context.Background(), &taskv1.BeginConfirmRequest{CallerAgentId: reviewer, TargetId: id, Outcome: enumname.Value[taskv1.ConfirmationOutcome](Rejected), Reason: "changed mind"})
	if code(err) != codes.AlreadyExists && code(err) != codes.Aborted && code(err) != codes.FailedPrecondition {
		t.Fatalf("conflicting confirm = %v, want a conflict", err)
	}
}

func TestConfirmRefusals(t *testing.T) {
	c, _ := start(t, Options{})
	id := escalate(t, c, "t-3").GetEscalation().GetEscalationId()
	for _, tc := range []struct {
		name   string
		in     *taskv1.BeginConfirmRequest
		wantCo codes.Code
	}{
		{"unknown escalation is not found", &taskv1.BeginConfirmRequest{CallerAgentId: reviewer, TargetId: "esc-nope", Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted)}, codes.NotFound},
		{"unknown task is not found", &taskv1.BeginConfirmRequest{CallerAgentId: reviewer, TargetId: "nope", Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted)}, codes.NotFound},
		{"a stranger does not see the escalation", &taskv1.BeginConfirmRequest{CallerAgentId: stranger, TargetId: id, Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted)}, codes.NotFound},
		{"the owner may not resolve its own escalation", &taskv1.BeginConfirmRequest{CallerAgentId: owner, TargetId: id, Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted)}, codes.PermissionDenied},
		{"rejected needs a reason", &taskv1.BeginConfirmRequest{CallerAgentId: reviewer, TargetId: id, Outcome: enumname.Value[taskv1.ConfirmationOutcome](Rejected)}, codes.InvalidArgument},
		//lint:ignore SA1019 a client of the first release sends the status as a string
		{"status vocabulary", &taskv1.BeginConfirmRequest{CallerAgentId: reviewer, TargetId: id, Status: "maybe"}, codes.InvalidArgument},
		{"an outcome this release does not declare", &taskv1.BeginConfirmRequest{CallerAgentId: reviewer, TargetId: id, Outcome: 99}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.BeginConfirm(context.Background(), tc.in)
			if code(err) != tc.wantCo {
				t.Fatalf("err = %v, want %v", err, tc.wantCo)
			}
		})
	}
}

func TestTaskIsReadableByItsOwnerOnly(t *testing.T) {
	c, _ := start(t, Options{})
	escalate(t, c, "t-4")
	r, err := c.GetTask(context.Background(), &taskv1.GetTaskRequest{CallerAgentId: owner, TaskId: "t-4"})
	if err != nil || enumname.Of(r.GetTask().GetState()) != StatusEscalated || len(r.GetTask().GetHistory()) != 2 {
		t.Fatalf("owner read = %v, %v", r, err)
	}
	if _, err := c.GetTask(context.Background(), &taskv1.GetTaskRequest{CallerAgentId: stranger, TaskId: "t-4"}); code(err) != codes.NotFound {
		t.Fatalf("stranger read = %v, want NotFound", err)
	}
}

func TestEscalateValidatesParameters(t *testing.T) {
	c, _ := start(t, Options{})
	base := func() *taskv1.EscalateRequest {
		return &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: "t", Reason: "scope_limit", Context: testkit.JSONValue(`{}`)}
	}
	for _, tc := range []struct {
		name string
		mut  func(*taskv1.EscalateRequest)
	}{
		{"reason vocabulary", func(r *taskv1.EscalateRequest) { r.Reason = "bored" }},
		{"context required", func(r *taskv1.EscalateRequest) { r.Context = nil }},
		//lint:ignore SA1019 a client of the first release sends the context as bytes
		{"context bytes must be JSON", func(r *taskv1.EscalateRequest) { r.Context, r.ContextJson = nil, []byte(`{`) }},
		//lint:ignore SA1019 a client of the first release sends the priority as a string
		{"priority vocabulary", func(r *taskv1.EscalateRequest) { r.Priority = "asap" }},
		{"a priority this release does not declare", func(r *taskv1.EscalateRequest) { r.PriorityLevel = 99 }},
		{"task id charset", func(r *taskv1.EscalateRequest) { r.TaskId = "a b" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.mut(in)
			if _, err := c.Escalate(context.Background(), in); code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
		})
	}
	in := base()
	r1, err := c.Escalate(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if r1.GetEscalation().GetRoutedTo() != "admin" {
		t.Fatalf("default recipient = %q", r1.GetEscalation().GetRoutedTo())
	}
	r2, err := c.Escalate(context.Background(), in)
	if err != nil || r2.GetEscalation().GetEscalationId() != r1.GetEscalation().GetEscalationId() {
		t.Fatalf("repeated ESCALATE = %v, %v; want the pending escalation", r2, err)
	}
	res, err := c.ResolveEscalation(context.Background(), &taskv1.ResolveEscalationRequest{Principal: "alice", EscalationId: r1.GetEscalation().GetEscalationId(), Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted)})
	if err != nil || enumname.Of(res.GetTask().GetState()) != StatusRunning {
		t.Fatalf("admin resolve = %v, %v", res, err)
	}
}

// webhook is a receiver that is down for its first failures and
// de-duplicates on Notification-ID.
type webhook struct {
	failures atomic.Int32
	mu       sync.Mutex
	seen     map[string]int
	handled  []string
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if w.failures.Add(-1) >= 0 {
		http.Error(rw, "down", http.StatusServiceUnavailable)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	id := r.Header.Get(HeaderNotificationID)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen[id]++
	if w.seen[id] == 1 && m["notification_id"] == id {
		w.handled = append(w.handled, id)
	}
}

func TestNotifyAtLeastOnceSurvivesADownRecipient(t *testing.T) {
	wh := &webhook{seen: map[string]int{}}
	wh.failures.Store(3)
	ts := httptest.NewTLSServer(wh)
	t.Cleanup(ts.Close)
	c, srv := start(t, Options{HTTPClient: ts.Client(), Outbound: loopbackPeers, NotifyPoll: 10 * time.Millisecond, NotifyBackoff: 20 * time.Millisecond, NotifyMaxBackoff: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	r, err := c.Notify(context.Background(), &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: ts.URL + "/hook",
		Content: testkit.JSONValue(`{"msg":"hi"}`), Guarantee: taskv1.DeliveryGuarantee_DELIVERY_GUARANTEE_AT_LEAST_ONCE})
	if err != nil {
		t.Fatal(err)
	}
	id := r.GetNotification().GetNotificationId()
	deadline := time.Now().Add(5 * time.Second)
	var n *taskv1.Notification
	for time.Now().Before(deadline) {
		g, err := c.GetNotification(context.Background(), &taskv1.GetNotificationRequest{CallerAgentId: owner, NotificationId: id})
		if err != nil {
			t.Fatal(err)
		}
		if n = g.GetNotification(); enumname.Of(n.GetState()) != NotifyQueued {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if enumname.Of(n.GetState()) != NotifyDelivered || n.GetAttempts() != 4 {
		t.Fatalf("notification = %v, want delivered on attempt 4", n)
	}
	wh.mu.Lock()
	defer wh.mu.Unlock()
	if len(wh.handled) != 1 || wh.handled[0] != id {
		t.Fatalf("handled = %v, want exactly [%s]", wh.handled, id)
	}
	if _, err := c.GetNotification(context.Background(), &taskv1.GetNotificationRequest{CallerAgentId: stranger, NotificationId: id}); code(err) != codes.NotFound {
		t.Fatalf("stranger read = %v", err)
	}
}

func TestNotifyAtMostOnceIsOneAttemptAndExpiryIsRespected(t *testing.T) {
	wh := &webhook{seen: map[string]int{}}
	wh.failures.Store(100)
	ts := httptest.NewTLSServer(wh)
	t.Cleanup(ts.Close)
	now := time.Now()
	c, srv := start(t, Options{HTTPClient: ts.Client(), Outbound: loopbackPeers, Now: func() time.Time { return now }})
	r, err := c.Notify(context.Background(), &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: ts.URL, Content: testkit.JSONValue(`1`), Guarantee: taskv1.DeliveryGuarantee_DELIVERY_GUARANTEE_AT_MOST_ONCE})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.deliverDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	g, _ := c.GetNotification(context.Background(), &taskv1.GetNotificationRequest{CallerAgentId: owner, NotificationId: r.GetNotification().GetNotificationId()})
	if enumname.Of(g.GetNotification().GetState()) != NotifyFailed || g.GetNotification().GetAttempts() != 1 {
		t.Fatalf("at_most_once = %v", g.GetNotification())
	}
	r, err = c.Notify(context.Background(), &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: ts.URL, Content: testkit.JSONValue(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(48 * time.Hour) // past the default expiry
	if err := srv.deliverDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	g, _ = c.GetNotification(context.Background(), &taskv1.GetNotificationRequest{CallerAgentId: owner, NotificationId: r.GetNotification().GetNotificationId()})
	if enumname.Of(g.GetNotification().GetState()) != NotifyExpired || g.GetNotification().GetAttempts() != 0 {
		t.Fatalf("expired = %v", g.GetNotification())
	}
	if _, err := c.Notify(context.Background(), &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: "http://plain.example", Content: testkit.JSONValue(`1`)}); code(err) != codes.InvalidArgument {
		t.Fatalf("plain http recipient = %v", err)
	}
}

func TestRecordDelegationKeepsTheHopInHistory(t *testing.T) {
	c, _ := start(t, Options{})
	r, err := c.RecordDelegation(context.Background(), &taskv1.RecordDelegationRequest{DelegatorAgentId: owner, DelegateeAgentId: reviewer,
		TaskId: "t-9", AuthorityScope: []string{"orders:read"}, TaskHash: "ab", AuditId: "cd"})
	if err != nil {
		t.Fatal(err)
	}
	h := r.GetTask().GetHistory()
	if enumname.Of(r.GetTask().GetState()) != StatusDelegated || h[len(h)-1].GetRef() != r.GetDelegationId() {
		t.Fatalf("task = %v", r.GetTask())
	}
}

func BenchmarkEscalateConfirm(b *testing.B) {
	rdb := testkit.StartRedis(b).Client(b)
	srv, err := New(rdb, slog.New(slog.DiscardHandler), Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		r, err := srv.Escalate(ctx, &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: "bench-" + string(rune('a'+i%26)) + time.Now().Format("150405.000000000"),
			Reason: "scope_limit", Context: testkit.JSONValue(`{}`), Recipient: reviewer})
		if err != nil {
			b.Fatal(err)
		}
		id := r.GetEscalation().GetEscalationId()
		bc, err := srv.BeginConfirm(ctx, &taskv1.BeginConfirmRequest{CallerAgentId: reviewer, TargetId: id, Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := srv.CompleteConfirm(ctx, &taskv1.CompleteConfirmRequest{CallerAgentId: reviewer, TargetId: id, ClaimToken: bc.GetClaimToken(), AttestationId: "a"}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestResolveEscalationIsSigned pins that a resolution through the admin
// API is signed into the escalating agent's lifecycle stream, naming the
// person the console acts for (whatever the request names), and is the
// confirmation's attestation; a resolution that cannot be signed is not
// made, and a retried one signs once.
func TestResolveEscalationIsSigned(t *testing.T) {
	const person = "alice@example.test"
	rdb := testkit.StartRedis(t).Client(t)
	srv, err := New(rdb, slog.New(slog.DiscardHandler), Options{})
	if err != nil {
		t.Fatal(err)
	}
	audit := changelogtest.Start(t)
	srv.RecordChanges(audit.Recorder)
	register := func(g grpc.ServiceRegistrar) { taskv1.RegisterTaskServiceServer(g, srv) }
	agent := taskv1.NewTaskServiceClient(testkit.ServeGRPC(t, register))
	console := taskv1.NewTaskServiceClient(testkit.ServeGRPCAs(t, access.Console, register))
	r, err := agent.Escalate(context.Background(), &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: "refund-1", Reason: "confidence_threshold", Context: testkit.JSONValue(`{"order":"o-1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	escID := r.GetEscalation().GetEscalationId()
	asPerson := access.ForPerson(context.Background(), person)
	resolve := func() (*taskv1.ResolveEscalationResponse, error) {
		return console.ResolveEscalation(asPerson, &taskv1.ResolveEscalationRequest{Principal: "someone-else", EscalationId: escID, Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted), Reason: "checked"})
	}

	audit.Down(true)
	if _, err := resolve(); code(err) != codes.Unavailable {
		t.Fatalf("resolution with auditsvc down: %v, want Unavailable", err)
	}
	audit.Down(false)
	list, err := console.ListEscalations(context.Background(), &taskv1.ListEscalationsRequest{})
	if err != nil || len(list.GetEscalations()) != 1 || list.GetEscalations()[0].GetState() != taskv1.EscalationState_ESCALATION_STATE_PENDING_REVIEW {
		t.Fatalf("after the refused resolution the queue is %v, %v; want it still pending", list.GetEscalations(), err)
	}
	res, err := resolve()
	if err != nil || enumname.Of(res.GetTask().GetState()) != StatusRunning {
		t.Fatalf("resolve = %v, %v", res, err)
	}
	if _, err := resolve(); err != nil {
		t.Fatalf("repeated resolve = %v", err)
	}
	ev := audit.Events()
	if len(ev) != 1 || ev[0].GetAgentId() != owner || ev[0].GetEventType() != EventEscalationResolved {
		t.Fatalf("events = %v, want one %s in the escalating agent's stream", ev, EventEscalationResolved)
	}
	var claims map[string]any
	if err := json.Unmarshal([]byte(ev[0].GetClaims()), &claims); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"actor": "operator/console for " + person, "person": person, "principal": person, "method": "CONFIRM",
		"target_id": escID, "task_id": "refund-1", "confirm_status": Accepted, "reason": "checked"}
	for k, v := range want {
		if claims[k] != v {
			t.Errorf("claims[%s] = %v, want %v", k, claims[k], v)
		}
	}
	hist := res.GetTask().GetHistory()
	last := hist[len(hist)-1]
	if last.GetActor() != "admin:"+person+" via operator/console" || len(last.GetRef()) != 64 {
		t.Fatalf("task history ends with %v, want the person via the console and the signed event's Audit-ID", last)
	}
}

// TestResolvedEscalationIsNotAnsweredAgainByAnotherPerson: once alice
// resolved an escalation through the console, bob resolving it the same
// way is refused 409 already-confirmed naming alice (docs/mechanics.md,
// admin resolution), as is alice with another reason; only alice's same
// request again is answered, as a replay: nothing is signed, the history
// keeps alice, and the success is logged once.
func TestResolvedEscalationIsNotAnsweredAgainByAnotherPerson(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	var logged testkit.SyncBuffer
	srv, err := New(rdb, slog.New(slog.NewJSONHandler(&logged, nil)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	audit := changelogtest.Start(t)
	srv.RecordChanges(audit.Recorder)
	register := func(g grpc.ServiceRegistrar) { taskv1.RegisterTaskServiceServer(g, srv) }
	agent := taskv1.NewTaskServiceClient(testkit.ServeGRPC(t, register))
	console := taskv1.NewTaskServiceClient(testkit.ServeGRPCAs(t, access.Console, register))
	r, err := agent.Escalate(context.Background(), &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: "refund-2",
		Reason: "confidence_threshold", Context: testkit.JSONValue(`{"order":"o-2"}`)})
	if err != nil {
		t.Fatal(err)
	}
	escID := r.GetEscalation().GetEscalationId()
	resolveAs := func(person, reason string) (*taskv1.ResolveEscalationResponse, error) {
		return console.ResolveEscalation(access.ForPerson(context.Background(), person), &taskv1.ResolveEscalationRequest{
			EscalationId: escID, Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted), Reason: reason})
	}
	const alice = "admin:alice@example.test via operator/console"
	if _, err := resolveAs("alice@example.test", "checked"); err != nil {
		t.Fatal(err)
	}
	for _, again := range []struct{ person, reason string }{{"bob@example.test", "looks fine to me"}, {"bob@example.test", "checked"}, {"alice@example.test", "checked twice"}} {
		res, err := resolveAs(again.person, again.reason)
		if err == nil {
			hist := res.GetTask().GetHistory()
			t.Fatalf("%s resolving (%q) an escalation alice already resolved succeeded (history ends with actor %q); want 409 already-confirmed",
				again.person, again.reason, hist[len(hist)-1].GetActor())
		}
		if c, reason, _, _ := grpcerr.Reason(err); c != codes.Aborted || reason != "already-confirmed" || !strings.Contains(status.Convert(err).Message(), "by "+alice) {
			t.Fatalf("%s resolving (%q) = %v, want Aborted already-confirmed naming %s", again.person, again.reason, err, alice)
		}
	}
	res, err := resolveAs("alice@example.test", "checked")
	if err != nil {
		t.Fatalf("alice's same resolution again = %v, want it answered", err)
	}
	if hist := res.GetTask().GetHistory(); hist[len(hist)-1].GetActor() != alice {
		t.Fatalf("history ends with %v, want %s", hist[len(hist)-1], alice)
	}
	if ev := audit.Events(); len(ev) != 1 {
		t.Fatalf("%d signed events, want alice's one", len(ev))
	}
	if n := strings.Count(logged.String(), `"msg":"escalation resolved by admin"`); n != 1 {
		t.Fatalf("the resolution is logged %d times, want once:\n%s", n, logged.String())
	}
}

// Only an escalation's recipient may CONFIRM it, in whichever form the
// escalation named it: an Agent-ID, or an agtp:// URI hosted here or
// elsewhere.
func TestConfirmByTheRecipientInEveryForm(t *testing.T) {
	c, _ := start(t, Options{Outbound: loopbackPeers})
	ctx := context.Background()
	for i, tc := range []struct {
		recipient string
		caller    string
		may       bool
	}{
		{reviewer, reviewer, true},
		{"agtp://" + reviewer, reviewer, true},
		{"agtp://" + reviewer + "@127.0.0.1:4480", reviewer, true},
		{"agtp://" + reviewer, owner, false},
		{"agtp://" + reviewer, stranger, false},
	} {
		t.Run(tc.recipient+" by "+tc.caller[:4], func(t *testing.T) {
			r, err := c.Escalate(ctx, &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: fmt.Sprintf("form-%d", i),
				Reason: "ethical_flag", Context: testkit.JSONValue(`{"why":"check"}`), Recipient: tc.recipient})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.BeginConfirm(ctx, &taskv1.BeginConfirmRequest{CallerAgentId: tc.caller, TargetId: r.GetEscalation().GetEscalationId(),
				Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted)})
			if (err == nil) != tc.may {
				t.Fatalf("BeginConfirm = %v, want allowed %v", err, tc.may)
			}
		})
	}
}

// An escalation routed back to the escalating agent, in any form, is
// refused: its recipient resolves it, and the escalating agent may not.
func TestEscalateRefusesTheEscalatingAgentAsRecipient(t *testing.T) {
	c, _ := start(t, Options{Outbound: loopbackPeers})
	for _, recipient := range []string{owner, "agtp://" + owner, "agtp://" + owner + "@127.0.0.1:4480"} {
		_, err := c.Escalate(context.Background(), &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: "self",
			Reason: "ethical_flag", Context: testkit.JSONValue(`{"why":"check"}`), Recipient: recipient})
		if c, reason, _, _ := grpcerr.Reason(err); c != codes.InvalidArgument || reason != "recipient-invalid" {
			t.Fatalf("ESCALATE to %s by itself = %v, want recipient-invalid", recipient, err)
		}
	}
}

// The admin listing forgets escalations that expired with their tasks
// unresolved: a listing drops the ones it meets, and every new escalation
// drops those older than the task TTL, so the pending set does not grow
// with escalations nobody resolves.
func TestPendingEscalationsExpireFromTheListing(t *testing.T) {
	const ttl = time.Second
	c, srv := start(t, Options{TaskTTL: ttl})
	ctx := context.Background()
	pending := func() int64 { return srv.rdb.ZCard(ctx, rediskeys.EscalationsPending).Val() }
	for i := range 3 {
		escalate(t, c, fmt.Sprintf("gone-%d", i))
	}
	time.Sleep(ttl + 200*time.Millisecond)
	escalate(t, c, "fresh")
	if n := pending(); n != 1 {
		t.Fatalf("after a new escalation the pending set holds %d, want only the live one", n)
	}
	time.Sleep(ttl + 200*time.Millisecond)
	list, err := c.ListEscalations(ctx, &taskv1.ListEscalationsRequest{Principal: "ops"})
	if err != nil || len(list.GetEscalations()) != 0 {
		t.Fatalf("listed %v, %v; want none", list.GetEscalations(), err)
	}
	if n := pending(); n != 0 {
		t.Fatalf("after a listing the pending set holds %d expired escalations", n)
	}
}

// TestOwnersConfirmDoesNotOverrideAnEscalation: the owner claims a
// CONFIRM of its own task while it runs, and an ESCALATE of the task
// pauses it before the claim completes. Completing it is refused, 409
// task-escalated as its beginning would be now, and the claim is dropped;
// the escalation's acceptance resumes the task, which never ended. A task
// that ended under a pending escalation (stored so before CompleteConfirm
// checked) is not resumed by its recipient nor by an admin: 409
// task-ended.
func TestOwnersConfirmDoesNotOverrideAnEscalation(t *testing.T) {
	c, srv := start(t, Options{})
	ctx := context.Background()
	if _, err := c.RecordDelegation(ctx, &taskv1.RecordDelegationRequest{DelegatorAgentId: owner, DelegateeAgentId: reviewer, TaskId: "t-race"}); err != nil {
		t.Fatal(err) // the task exists and runs
	}
	begin := &taskv1.BeginConfirmRequest{CallerAgentId: owner, TargetId: "t-race", Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted)}
	b, err := c.BeginConfirm(ctx, begin)
	if err != nil || b.GetClaimToken() == "" {
		t.Fatalf("begin confirm of the task = %v, %v", b, err)
	}
	esc := escalate(t, c, "t-race").GetEscalation().GetEscalationId()
	done, err := c.CompleteConfirm(ctx, &taskv1.CompleteConfirmRequest{CallerAgentId: owner, TargetId: "t-race", ClaimToken: b.GetClaimToken(), AttestationId: "att-owner"})
	if co, reason, _, _ := grpcerr.Reason(err); co != codes.Aborted || reason != "task-escalated" {
		t.Fatalf("CompleteConfirm of an escalated task = task %s, %v; want 409 task-escalated", enumname.Of(done.GetTask().GetState()), err)
	}
	if _, err := c.BeginConfirm(ctx, begin); !hasReason(err, "task-escalated") {
		t.Fatalf("the owner's CONFIRM again = %v; want task-escalated, its claim dropped", err)
	}
	r, _ := confirm(t, c, reviewer, esc, Accepted, "", "att-reviewer")
	var events []string
	for _, e := range r.GetTask().GetHistory() {
		events = append(events, e.GetEvent()+"->"+enumname.Of(e.GetState()))
	}
	if want := []string{"created->running", "delegated->delegated", "escalated->escalated", "resumed->running"}; strings.Join(events, " ") != strings.Join(want, " ") {
		t.Fatalf("task history %v, want %v", events, want)
	}

	esc = escalate(t, c, "t-ended").GetEscalation().GetEscalationId()
	key := rediskeys.Task(owner, "t-ended")
	var stored task
	if ok, err := getJSON(ctx, srv.rdb, key, &stored); !ok || err != nil {
		t.Fatalf("stored task: %v, %v", ok, err)
	}
	srv.record(&stored, time.Now(), "confirmed", StatusConfirmed, owner, "att-owner", "")
	if err := srv.rdb.Set(ctx, key, mustJSON(stored), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BeginConfirm(ctx, &taskv1.BeginConfirmRequest{CallerAgentId: reviewer, TargetId: esc, Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted)}); !hasReason(err, "task-ended") {
		t.Fatalf("CONFIRM of the escalation of an ended task = %v; want task-ended", err)
	}
	if _, err := c.ResolveEscalation(ctx, &taskv1.ResolveEscalationRequest{Principal: "alice", EscalationId: esc, Outcome: enumname.Value[taskv1.ConfirmationOutcome](Accepted)}); !hasReason(err, "task-ended") {
		t.Fatalf("admin resolution of the escalation of an ended task = %v; want task-ended", err)
	}
	g, err := c.GetTask(ctx, &taskv1.GetTaskRequest{CallerAgentId: owner, TaskId: "t-ended"})
	if err != nil || enumname.Of(g.GetTask().GetState()) != StatusConfirmed {
		t.Fatalf("ended task = %v, %v; want it still confirmed", g, err)
	}
}

func hasReason(err error, want string) bool {
	_, reason, _, _ := grpcerr.Reason(err)
	return err != nil && reason == want
}
