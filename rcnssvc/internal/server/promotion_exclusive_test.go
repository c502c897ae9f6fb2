package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
)

// TestPersistentPromotionIsExclusive: of two persistent PROPOSEs of one
// pair in flight together, only one promotes it (the pair is claimed in
// Redis before PutEndpoint); and revoking a contract removes only the
// endpoint it promoted, never one another live contract depends on.
func TestPersistentPromotionIsExclusive(t *testing.T) {
	e := newEnv(t, envConfig{})
	var mu sync.Mutex
	arrived := 0
	both := make(chan struct{})
	e.catalog.put = func(r *catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error) {
		// The real catalog publishes the promoted endpoint at once.
		if b, err := r.GetDefinition().MarshalJSON(); err == nil {
			if eps, err := endpoint.ParseAndCompile("put.json", b, endpoint.FormatJSON, endpoint.Context{InheritCapability: true}); err == nil {
				e.catalog.mu.Lock()
				snap := proto.CloneOf(e.catalog.snap)
				e.catalog.mu.Unlock()
				snap.Revision++
				snap.Endpoints = append(snap.Endpoints, eps[0].Proto(catalogv1.EndpointTier_ENDPOINT_TIER_C))
				e.catalog.setSnapshot(snap)
			} else {
				t.Logf("promoted definition not compiled for the snapshot: %v", err)
			}
		}
		mu.Lock()
		arrived++
		if arrived == 2 {
			close(both)
		}
		mu.Unlock()
		select { // wait (bounded) for a second promotion of the pair
		case <-both:
		case <-time.After(3 * time.Second):
		}
		return &catalogv1.PutEndpointResponse{Revision: 2, ApiVersion: "1.0.2"}, nil
	}
	params := orderSummary()
	params["persistent"] = true
	callers := []*rcnsv1.Caller{
		caller(agentX, sessionA, 1, "orders:read", "rcns:persist"),
		caller(agentY, sessionB, 1, "orders:read", "rcns:persist"),
	}
	resps := make([]*rcnsv1.ProposeResponse, 2)
	var wg sync.WaitGroup
	for i, c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i], _ = e.propose(c, params, "")
		}()
	}
	wg.Wait()
	var persistent []*rcnsv1.Contract
	for _, r := range resps {
		if r.GetStatus() == 263 && r.GetContract().GetPersistent() {
			persistent = append(persistent, r.GetContract())
		}
	}
	if len(persistent) < 2 {
		return
	}
	// Agent X revokes its own contract: the catalog endpoint goes, while
	// agent Y's persistent contract for the same endpoint is still active.
	if _, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: callers[0], SynthesisId: persistent[0].GetSynthesisId()}); err != nil {
		t.Fatal(err)
	}
	y := e.resolve(caller(agentY, sessionB, 1, "orders:read"), "SUMMARIZE", "/orders/o-1")
	e.catalog.mu.Lock()
	puts, dels := len(e.catalog.puts), len(e.catalog.delete)
	e.catalog.mu.Unlock()
	t.Fatalf("two persistent contracts promoted one pair (%d PutEndpoint of SUMMARIZE /orders/{order_id}); after agent X revoked its own, "+
		"%d DeleteEndpoint removed the endpoint while agent Y's persistent contract is %s (resolve status %d)",
		puts, dels, state(y.GetContract()), y.GetStatus())
}
