package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
)

// TestRevokedPersistentEndpointLeavesCatalog: a revoked persistent
// contract's Tier C endpoint leaves the catalog even when catalogsvc is
// down at the revocation: the removal stays pending, RevokeContract says
// so, and a repeated revocation or the janitor retries it.
func TestRevokedPersistentEndpointLeavesCatalog(t *testing.T) {
	e := newEnv(t, envConfig{opts: func(o *Options) { o.Contracts.JanitorInterval = 50 * time.Millisecond }})
	params := orderSummary()
	params["persistent"] = true
	x := caller(agentX, sessionA, 1, "orders:read", "rcns:persist")
	resp, b := e.propose(x, params, "")
	if resp.GetStatus() != 263 || b["persistent"] != true {
		t.Fatalf("granted: %d %v", resp.GetStatus(), b)
	}
	id := resp.GetContract().GetSynthesisId()

	catalogUp := false
	deleted := 0
	e.catalog.mu.Lock()
	e.catalog.del = func(*catalogv1.DeleteEndpointRequest) (*catalogv1.DeleteEndpointResponse, error) {
		e.catalog.mu.Lock()
		defer e.catalog.mu.Unlock()
		if !catalogUp {
			return nil, status.Error(codes.Unavailable, "catalogsvc restarting")
		}
		deleted++
		return &catalogv1.DeleteEndpointResponse{Revision: 3, ApiVersion: "1.0.3"}, nil
	}
	e.catalog.mu.Unlock()
	rv, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: x, SynthesisId: id})
	t.Logf("revoke while catalogsvc is down: err=%v state=%s", err, state(rv.GetContract()))

	// catalogsvc is back; the agent (or operator) retries, the janitor runs.
	e.catalog.mu.Lock()
	catalogUp = true
	e.catalog.mu.Unlock()
	if _, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: x, SynthesisId: id}); err != nil {
		t.Logf("retry: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	e.catalog.mu.Lock()
	n := deleted
	e.catalog.mu.Unlock()
	if n == 0 {
		t.Fatalf("contract %s is revoked, but its promoted endpoint SUMMARIZE /orders/{order_id} was never removed from the catalog (%d DeleteEndpoint attempts, none succeeded, nothing retries)",
			id, len(e.catalog.delete))
	}
}
