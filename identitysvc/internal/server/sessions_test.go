package server

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/identitysvc/sessionbind"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// TestSuspendBounds: SUSPEND refuses a resume_by further ahead than the
// maximum suspension, an invalid one and an oversized reason, and leaves
// the session as it was; an accepted one keeps the binding until
// resume_by plus the idle TTL. Before the bound, year 9999 overflowed the
// binding's TTL into a negative PEXPIRE, which deleted it while SUSPEND
// answered "suspended": the session then resolved again without RESUME.
func TestSuspendBounds(t *testing.T) {
	const sessionTTL = time.Hour
	e := newEnv(t, Options{SessionTTL: sessionTTL})
	ctx := context.Background()
	g := newGenesis(t, 2)
	register(t, e.a.client, g, "sleeper")
	now := time.Now()
	for i, tc := range []struct {
		name     string
		resumeBy *timestamppb.Timestamp
		reason   string
		refusal  string // "": accepted
	}{
		{name: "resume_by in year 9999", resumeBy: timestamppb.New(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)), refusal: "resume-by-too-far"},
		{name: "resume_by in 2200", resumeBy: timestamppb.New(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)), refusal: "resume-by-too-far"},
		{name: "resume_by just past the bound", resumeBy: timestamppb.New(now.Add(sessionbind.MaxSuspension + time.Minute)), refusal: "resume-by-too-far"},
		{name: "resume_by beyond year 9999", resumeBy: &timestamppb.Timestamp{Seconds: math.MaxInt64 / 2}, refusal: "resume-by-invalid"},
		{name: "resume_by passed", resumeBy: timestamppb.New(now.Add(-time.Minute)), refusal: "resume-by-past"},
		{name: "reason one byte too long", reason: strings.Repeat("r", sessionbind.MaxReason+1), refusal: "reason-too-long"},
		{name: "reason of 3 MiB", reason: strings.Repeat("r", 3<<20), refusal: "reason-too-long"},
		{name: "default resume_by, longest reason", reason: strings.Repeat("r", sessionbind.MaxReason)},
		{name: "resume_by in two days", resumeBy: timestamppb.New(now.Add(48 * time.Hour)), reason: "awaiting_input"},
		{name: "resume_by near the bound", resumeBy: timestamppb.New(now.Add(sessionbind.MaxSuspension - time.Minute)), reason: "scheduled_pause"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := fmt.Sprintf("sess-bounds-5mXbR2q9VvLw0kJp3sT7a%d", i)
			resolve := func() error {
				_, err := e.a.client.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{AgentId: g.AgentID, SessionId: sid})
				return err
			}
			if err := resolve(); err != nil {
				t.Fatal(err)
			}
			// Read before SUSPEND, so the TTL it sets can only be shorter.
			want := sessionbind.DefaultSuspension + sessionTTL
			if tc.resumeBy != nil {
				want = time.Until(tc.resumeBy.AsTime()) + sessionTTL
			}
			_, err := e.a.client.SuspendSession(ctx, &identityv1.SuspendSessionRequest{SessionId: sid, AgentId: g.AgentID, Reason: tc.reason, ResumeBy: tc.resumeBy})
			if tc.refusal != "" {
				wantReason(t, err, codes.InvalidArgument, tc.refusal)
				if err := resolve(); err != nil {
					t.Fatalf("the refused SUSPEND changed the session: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantReason(t, resolve(), codes.Aborted, sessionbind.ReasonSuspended)
			ttl, err := e.rdb.PTTL(ctx, rediskeys.SessionBinding(sid)).Result()
			if err != nil || ttl > want || ttl < want-time.Minute {
				t.Fatalf("binding TTL = %v, %v; want about %v", ttl, err, want)
			}
		})
	}
}
