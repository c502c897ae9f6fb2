package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/policysvc/internal/server"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// unknownAfterClaim claims key for agentA's request with body and marks
// its outcome unknown, as the front door does when the handler ran and
// nothing was stored.
func unknownAfterClaim(t *testing.T, c policyv1.PolicyServiceClient, key, body string) *policyv1.IdempotencyClaim {
	t.Helper()
	first := authorize(t, c, withKey(request(agentA), key, body))
	wantAllow(t, first)
	out, err := c.MarkIdempotencyUnknown(context.Background(), &policyv1.MarkIdempotencyUnknownRequest{Claim: first.GetClaim()})
	if err != nil || !out.GetMarked() {
		t.Fatalf("MarkIdempotencyUnknown = %v, %v; want marked", out, err)
	}
	return first.GetClaim()
}

// A claim whose lease lapsed before the front door marked it unknown (a
// handler slower than the lease, a Redis failover that lost the claim) is
// held as unknown again by MarkIdempotencyUnknown, bound to the claimed
// request's fingerprint, which the claim carries: the retry of the very
// same request gets 409 idempotency-outcome-unknown, as for any unknown
// outcome, and another request under the key still 409
// idempotency-key-reused.
func TestUnknownAfterALapsedLeaseKeepsTheRequest(t *testing.T) {
	rdb := newRedis(t)
	c := serve(t, rdb, server.Options{}, nil)
	ctx := context.Background()
	first := authorize(t, c, withKey(request(agentA), "pay-lapsed", `{"amount":"12.50"}`))
	wantAllow(t, first)
	if got, want := first.GetClaim().GetFingerprint(), fingerprint(`{"amount":"12.50"}`); got != want {
		t.Fatalf("claim fingerprint %q, want the request's %q", got, want)
	}
	rdb.Del(ctx, first.GetClaim().GetSlot()) // the lease lapses while the handler runs
	out, err := c.MarkIdempotencyUnknown(ctx, &policyv1.MarkIdempotencyUnknownRequest{Claim: first.GetClaim()})
	if err != nil || !out.GetMarked() {
		t.Fatalf("MarkIdempotencyUnknown = %v, %v; want marked", out, err)
	}
	wantDenial(t, authorize(t, c, withKey(request(agentA), "pay-lapsed", `{"amount":"12.50"}`)), 409, server.ReasonIdempotencyOutcomeUnknown)
	wantDenial(t, authorize(t, c, withKey(request(agentA), "pay-lapsed", `{"amount":"99.00"}`)), 409, "idempotency-key-reused")

	bad := &policyv1.IdempotencyClaim{Slot: first.GetClaim().GetSlot(), Token: first.GetClaim().GetToken(), Fingerprint: "not-a-fingerprint"}
	_, err = c.MarkIdempotencyUnknown(ctx, &policyv1.MarkIdempotencyUnknownRequest{Claim: bad})
	wantCode(t, err, codes.InvalidArgument, server.ReasonInvalidPolicyRequest)
}

// TestUnknownOutcomeRefusesTheRetry: a retry of a request whose outcome is
// unknown is 409 idempotency-outcome-unknown for the unknown lease, not a
// second run; an idempotent endpoint's request still runs; the claim can
// no longer be released, and a late completion still stores the outcome.
func TestUnknownOutcomeRefusesTheRetry(t *testing.T) {
	rdb := newRedis(t)
	c := serve(t, rdb, server.Options{Idempotency: server.IdempotencyOptions{Lease: time.Minute, UnknownLease: 3 * time.Hour}}, nil)
	ctx := context.Background()

	claim := unknownAfterClaim(t, c, "pay-1", `{"amount":"12.50"}`)
	retry := authorize(t, c, withKey(request(agentA), "pay-1", `{"amount":"12.50"}`))
	wantDenial(t, retry, 409, server.ReasonIdempotencyOutcomeUnknown)
	if e := retry.GetDenial().GetExplanation(); !strings.Contains(e, "new Idempotency-Key") || !strings.Contains(e, "operator") {
		t.Fatalf("explanation %q does not say what to do", e)
	}
	if pttl := rdb.PTTL(ctx, claim.GetSlot()).Val(); pttl <= time.Hour || pttl > 3*time.Hour {
		t.Fatalf("unknown slot PTTL = %v, want the 3h unknown lease", pttl)
	}
	wantDenial(t, authorize(t, c, withKey(request(agentA), "pay-1", `{"amount":"99.00"}`)), 409, "idempotency-key-reused")
	if _, err := c.ReleaseIdempotency(ctx, &policyv1.ReleaseIdempotencyRequest{Claim: claim}); err != nil {
		t.Fatal(err)
	}
	wantDenial(t, authorize(t, c, withKey(request(agentA), "pay-1", `{"amount":"12.50"}`)), 409, server.ReasonIdempotencyOutcomeUnknown)

	t.Run("an idempotent endpoint's request runs again", func(t *testing.T) {
		unknownAfterClaim(t, c, "read-1", "{}")
		r := withKey(request(agentA), "read-1", "{}")
		r.EndpointIdempotent = true
		resp := authorize(t, c, r)
		wantAllow(t, resp)
		if resp.GetClaim() == nil {
			t.Fatal("no claim")
		}
	})
	t.Run("a late completion by the claimer stores the outcome", func(t *testing.T) {
		claim := unknownAfterClaim(t, c, "late-1", "{}")
		if _, err := c.CompleteIdempotency(ctx, &policyv1.CompleteIdempotencyRequest{Claim: claim, Response: []byte("stored")}); err != nil {
			t.Fatal(err)
		}
		if r := authorize(t, c, withKey(request(agentA), "late-1", "{}")); r.GetDecision() != policyv1.Decision_DECISION_REPLAY {
			t.Fatalf("retry = %v, want REPLAY", r.GetDecision())
		}
		out, err := c.MarkIdempotencyUnknown(ctx, &policyv1.MarkIdempotencyUnknownRequest{Claim: claim})
		if err != nil || out.GetMarked() {
			t.Fatalf("marking a stored outcome = %v, %v; want not marked", out, err)
		}
	})
	t.Run("a duplicate waiting for the original gets the 409 when it is marked", func(t *testing.T) {
		first := authorize(t, c, withKey(request(agentA), "wait-1", "{}"))
		wantAllow(t, first)
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(50 * time.Millisecond)
			if _, err := c.MarkIdempotencyUnknown(ctx, &policyv1.MarkIdempotencyUnknownRequest{Claim: first.GetClaim()}); err != nil {
				t.Error(err)
			}
		})
		wantDenial(t, authorize(t, c, withKey(request(agentA), "wait-1", "{}")), 409, server.ReasonIdempotencyOutcomeUnknown)
		wg.Wait()
	})
	t.Run("only a claim Authorize returned can be marked", func(t *testing.T) {
		_, err := c.MarkIdempotencyUnknown(ctx, &policyv1.MarkIdempotencyUnknownRequest{Claim: &policyv1.IdempotencyClaim{Slot: rediskeys.Agent(agentA), Token: strings.Repeat("a", 32)}})
		wantCode(t, err, codes.InvalidArgument, "invalid-policy-request")
	})
}

// TestResolveIdempotencyOutcome: the operator's RELEASE lets the retry run,
// APPLIED keeps refusing it; slots that are not unknown are not touched,
// and every resolution is logged with the operator's note.
func TestResolveIdempotencyOutcome(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	c := serve(t, newRedis(t), server.Options{}, log)
	ctx := context.Background()
	resolve := func(key string, r policyv1.IdempotencyResolution) (*policyv1.ResolveIdempotencyOutcomeResponse, error) {
		return c.ResolveIdempotencyOutcome(ctx, &policyv1.ResolveIdempotencyOutcomeRequest{
			AgentId: agentA, IdempotencyKey: key, Resolution: r, Note: "checked the ledger"})
	}
	const (
		release = policyv1.IdempotencyResolution_IDEMPOTENCY_RESOLUTION_RELEASE
		applied = policyv1.IdempotencyResolution_IDEMPOTENCY_RESOLUTION_APPLIED
		unknown = policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_UNKNOWN
		gone    = policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_UNSPECIFIED
		appl    = policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_APPLIED
	)
	for _, tc := range []struct {
		name       string
		setup      func(t *testing.T, key string)
		resolve    []policyv1.IdempotencyResolution
		wantPrev   policyv1.IdempotencySlotState
		wantState  policyv1.IdempotencySlotState
		wantCode   codes.Code
		wantReason string
		// retry is what the same request gets afterwards: "" runs, else
		// the 409 reason.
		retry string
	}{
		{name: "release lets the retry run", setup: unknownKey(c), resolve: []policyv1.IdempotencyResolution{release},
			wantPrev: unknown, wantState: gone},
		{name: "applied keeps refusing", setup: unknownKey(c), resolve: []policyv1.IdempotencyResolution{applied},
			wantPrev: unknown, wantState: appl, retry: server.ReasonIdempotencyOutcomeApplied},
		{name: "applied twice is the same answer", setup: unknownKey(c), resolve: []policyv1.IdempotencyResolution{applied, applied},
			wantPrev: appl, wantState: appl, retry: server.ReasonIdempotencyOutcomeApplied},
		{name: "release undoes applied", setup: unknownKey(c), resolve: []policyv1.IdempotencyResolution{applied, release},
			wantPrev: appl, wantState: gone},
		{name: "a key nobody holds is not found", setup: func(*testing.T, string) {}, resolve: []policyv1.IdempotencyResolution{release},
			wantCode: codes.NotFound, wantReason: server.ReasonIdempotencyKeyNotFound},
		{name: "a running request is left to finish", setup: func(t *testing.T, key string) {
			wantAllow(t, authorize(t, c, withKey(request(agentA), key, "{}")))
		}, resolve: []policyv1.IdempotencyResolution{release}, wantCode: codes.Aborted, wantReason: "idempotency-in-flight", retry: "idempotency-in-flight"},
		{name: "a stored outcome is left alone", setup: func(t *testing.T, key string) {
			first := authorize(t, c, withKey(request(agentA), key, "{}"))
			if _, err := c.CompleteIdempotency(ctx, &policyv1.CompleteIdempotencyRequest{Claim: first.GetClaim(), Response: []byte("stored")}); err != nil {
				t.Fatal(err)
			}
		}, resolve: []policyv1.IdempotencyResolution{applied}, wantCode: codes.Aborted, wantReason: server.ReasonIdempotencyOutcomeStored, retry: "replay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "resolve-" + strings.ReplaceAll(tc.name, " ", "-")
			tc.setup(t, key)
			var out *policyv1.ResolveIdempotencyOutcomeResponse
			var err error
			for _, r := range tc.resolve {
				out, err = resolve(key, r)
			}
			if tc.wantCode != codes.OK {
				wantCode(t, err, tc.wantCode, tc.wantReason)
			} else if err != nil || out.GetPreviousState() != tc.wantPrev || out.GetState() != tc.wantState {
				t.Fatalf("resolve = %v, %v; want %v -> %v", out, err, tc.wantPrev, tc.wantState)
			}
			resp := authorize(t, c, withKey(request(agentA), key, "{}"))
			switch tc.retry {
			case "":
				wantAllow(t, resp)
			case "replay":
				if resp.GetDecision() != policyv1.Decision_DECISION_REPLAY {
					t.Fatalf("retry = %v, want REPLAY", resp.GetDecision())
				}
			default:
				wantDenial(t, resp, 409, tc.retry)
			}
		})
	}
	mu.Lock()
	got := logs.String()
	mu.Unlock()
	if !strings.Contains(got, "idempotency outcome resolved by the operator") || !strings.Contains(got, `note="checked the ledger"`) {
		t.Fatalf("the resolutions are not logged with the note:\n%s", got)
	}

	t.Run("malformed calls are InvalidArgument", func(t *testing.T) {
		for _, req := range []*policyv1.ResolveIdempotencyOutcomeRequest{
			{AgentId: agentA, IdempotencyKey: "k"},
			{AgentId: "", IdempotencyKey: "k", Resolution: release},
			{AgentId: agentA, IdempotencyKey: "", Resolution: release},
			{AgentId: agentA, IdempotencyKey: "a\x01b", Resolution: release},
			{AgentId: agentA, IdempotencyKey: "k", Resolution: release, Note: strings.Repeat("n", 1025)},
		} {
			_, err := c.ResolveIdempotencyOutcome(ctx, req)
			wantCode(t, err, codes.InvalidArgument, "invalid-policy-request")
		}
	})
}

// unknownKey is a setup that leaves key with an unknown outcome.
func unknownKey(c policyv1.PolicyServiceClient) func(t *testing.T, key string) {
	return func(t *testing.T, key string) { unknownAfterClaim(t, c, key, "{}") }
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
