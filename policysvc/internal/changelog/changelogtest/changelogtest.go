// Package changelogtest serves policysvc's tests an auditsvc that keeps
// the lifecycle events it is sent, on a real gRPC loopback connection.
package changelogtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/policysvc/internal/changelog"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// Audit is the auditsvc stand-in.
type Audit struct {
	// Recorder records through it.
	Recorder *changelog.Recorder
	mu       sync.Mutex
	events   []*auditv1.AppendLifecycleEventRequest
	byID     map[string]string
	down     bool
}

// Start serves an Audit for the test.
func Start(tb testing.TB) *Audit {
	tb.Helper()
	a := &Audit{byID: map[string]string{}}
	stub := &testkit.AuditStub{AppendLifecycleEventF: a.append}
	conn := testkit.ServeGRPC(tb, func(g grpc.ServiceRegistrar) { auditv1.RegisterAuditServiceServer(g, stub) })
	a.Recorder = changelog.New(auditv1.NewAuditServiceClient(conn), 0)
	return a
}

// append keeps the event once per request ID, as auditsvc does, and
// answers its Audit-ID: the SHA-256 of the request ID here.
func (a *Audit) append(_ context.Context, in *auditv1.AppendLifecycleEventRequest) (*auditv1.AppendLifecycleEventResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down {
		return nil, status.Error(codes.Unavailable, "auditsvc is down")
	}
	if id, ok := a.byID[in.GetRequestId()]; ok {
		return &auditv1.AppendLifecycleEventResponse{AuditId: id, Replayed: true}, nil
	}
	sum := sha256.Sum256([]byte(in.GetRequestId()))
	id := hex.EncodeToString(sum[:])
	a.byID[in.GetRequestId()] = id
	a.events = append(a.events, in)
	return &auditv1.AppendLifecycleEventResponse{AuditId: id, Sequence: uint64(len(a.events))}, nil
}

// Down makes every append fail (Unavailable) until Down(false).
func (a *Audit) Down(down bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.down = down
}

// Events are the events appended so far, oldest first.
func (a *Audit) Events() []*auditv1.AppendLifecycleEventRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*auditv1.AppendLifecycleEventRequest(nil), a.events...)
}
