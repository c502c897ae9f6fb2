package pipeline_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// TestSessionBindingConfirmedBeforeSuspensionIsNotRememberedAfterIt: a
// Session-ID check whose ResolveAgent was answered before the session was
// suspended, and returns after the suspension's watch event dropped the
// session (DropSession), must not put the binding back: otherwise the
// suspended session is served by this front door from then on, without
// identitysvc ever being asked again (the session cache has no expiry).
func TestSessionBindingConfirmedBeforeSuspensionIsNotRememberedAfterIt(t *testing.T) {
	sid := "sess-" + strings.Repeat("9d", 12)
	entered := make(chan struct{}, 1)
	hold := make(chan struct{})
	suspended := make(chan struct{})
	var binds atomic.Int32
	f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.identity.ResolveAgentF = func(ctx context.Context, in *identityv1.ResolveAgentRequest) (*identityv1.ResolveAgentResponse, error) {
			rec := &identityv1.ResolveAgentResponse{Agent: &identityv1.AgentRecord{
				AgentId: stageAgent, Status: identityv1.AgentStatus_AGENT_STATUS_ACTIVE, Scopes: []string{"notes:read"}}}
			if in.GetSessionId() == "" {
				return rec, nil
			}
			n := binds.Add(1)
			select {
			case <-suspended:
				return nil, grpcerr.Conflict("session-suspended", "the session is suspended; RESUME it with its resumption nonce first")
			default:
			}
			if n == 1 {
				// identitysvc read the binding unsuspended; its answer
				// is on the way while the session is suspended.
				entered <- struct{}{}
				<-hold
			}
			return rec, nil
		}
	})
	query := func() (*agtp.Response, map[string]any) {
		return f.do(t, stageRequest("QUERY", "/notes/n1", "", agtp.HeaderSessionID, sid))
	}

	first := make(chan *agtp.Response, 1)
	go func() {
		resp := f.p.ServeAGTP(context.Background(), stageConn(), stageRequest("QUERY", "/notes/n1", "", agtp.HeaderSessionID, sid))
		first <- resp
	}()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the session check never reached identitysvc")
	}
	// SUSPEND commits on another front door; identitysvc's watch event
	// reaches this one, which drops the session.
	close(suspended)
	f.p.DropSession(sid)
	close(hold)
	if resp := <-first; resp.Status != 200 {
		t.Fatalf("the request in flight = %d %s", resp.Status, resp.Body)
	}

	resp, body := query()
	if resp.Status != 409 || body["reason"] != "session-suspended" {
		t.Fatalf("the next request in the suspended session = %d %s, want 409 session-suspended (identitysvc was asked %d times)", resp.Status, resp.Body, binds.Load())
	}
}
