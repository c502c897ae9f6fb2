// Package testaudit is a tiny real auditsvc gRPC server for identitysvc
// tests: AppendLifecycleEvent records events in arrival order, and a test
// can replace it through a function field to make auditsvc fail.
package testaudit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"

	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/testkit"
)

// Event is one recorded lifecycle event.
type Event struct {
	AgentID   string
	EventType string
	AuditID   string
	Claims    map[string]any
}

// Server is the fake auditsvc.
type Server struct {
	auditv1.UnimplementedAuditServiceServer

	// Append, when set, replaces the recording behaviour.
	Append func(ctx context.Context, req *auditv1.AppendLifecycleEventRequest) (*auditv1.AppendLifecycleEventResponse, error)

	mu     sync.Mutex
	events []Event
}

// Start serves a fake auditsvc on a loopback port and returns it with a
// client; both stop at cleanup.
func Start(tb testing.TB) (*Server, auditv1.AuditServiceClient) {
	tb.Helper()
	s := &Server{}
	conn := testkit.ServeGRPC(tb, func(r grpc.ServiceRegistrar) { auditv1.RegisterAuditServiceServer(r, s) })
	return s, auditv1.NewAuditServiceClient(conn)
}

// AppendLifecycleEvent records the event, or runs Append.
func (s *Server) AppendLifecycleEvent(ctx context.Context, req *auditv1.AppendLifecycleEventRequest) (*auditv1.AppendLifecycleEventResponse, error) {
	if s.Append != nil {
		return s.Append(ctx, req)
	}
	//lint:ignore SA1019 a client of the first release sends the claims only as bytes
	raw := jsondoc.PreferString(req.GetClaims(), req.GetClaimsJson())
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := sha256.Sum256(append([]byte(strconv.Itoa(len(s.events))+":"), raw...))
	ev := Event{AgentID: req.GetAgentId(), EventType: req.GetEventType(), AuditID: hex.EncodeToString(sum[:]), Claims: claims}
	s.events = append(s.events, ev)
	return &auditv1.AppendLifecycleEventResponse{Jws: "test.jws.", AuditId: ev.AuditID}, nil
}

// Events returns the events of one agent in arrival order.
func (s *Server) Events(agentID string) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	for _, e := range s.events {
		if e.AgentID == agentID {
			out = append(out, e)
		}
	}
	return out
}
