package auditclient_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	"github.com/agtpsuite/agtp/auditsvc/internal/server"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// loseFirstAnswer runs every call but answers the first append of each
// kind with Unavailable, as a connection that drops after the request
// arrived.
func loseFirstAnswer() grpc.UnaryServerInterceptor {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		mu.Lock()
		first := !seen[info.FullMethod] && !strings.Contains(info.FullMethod, "/Get")
		seen[info.FullMethod] = true
		mu.Unlock()
		if first {
			return nil, status.Error(codes.Unavailable, "connection lost")
		}
		return resp, err
	}
}

// Each append whose first answer is lost is sent once more, unchanged,
// and the chain holds it once.
func TestALostAnswerAppendsOnce(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	srv, err := server.New(rdb, slog.New(slog.DiscardHandler), server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn := testkit.ServeGRPCWith(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(loseFirstAnswer())},
		func(g grpc.ServiceRegistrar) { auditv1.RegisterAuditServiceServer(g, srv) })
	c := auditv1.NewAuditServiceClient(conn)
	ctx := context.Background()
	const agent = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	claims := &auditv1.AttributionClaims{ServerId: "test", Status: 200, Method: "QUERY"}
	a, err := auditclient.SignAndAppend(ctx, c, &auditv1.SignAndAppendRequest{ChainAgentId: agent, Claims: claims})
	if err != nil || !a.GetReplayed() || a.GetSequence() != 1 {
		t.Fatalf("SignAndAppend: %+v %v; want the first record, replayed", a, err)
	}
	l, err := auditclient.AppendLifecycleEvent(ctx, c, &auditv1.AppendLifecycleEventRequest{AgentId: agent, EventType: "agent-lifecycle-suspended", Claims: `{"reason":"test"}`})
	if err != nil || !l.GetReplayed() || l.GetSequence() != 1 {
		t.Fatalf("AppendLifecycleEvent: %+v %v", l, err)
	}
	r, err := auditclient.AppendSignedRecord(ctx, c, &auditv1.AppendSignedRecordRequest{AgentId: agent, Stream: "confirm", Claims: `{"x":1}`})
	if err != nil || !r.GetReplayed() || r.GetSequence() != 1 {
		t.Fatalf("AppendSignedRecord: %+v %v", r, err)
	}
	head, err := c.GetChainHead(ctx, &auditv1.GetChainHeadRequest{AgentId: agent})
	if err != nil || head.GetLength() != 1 || head.GetAuditId() != a.GetAuditId() {
		t.Fatalf("chain head %+v %v: want one record", head, err)
	}
}
