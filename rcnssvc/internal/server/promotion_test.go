package server

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

func persister(agent, session string) *rcnsv1.Caller {
	return caller(agent, session, 1, "orders:read", "rcns:persist")
}

func persistentSummary() map[string]any {
	p := orderSummary()
	p["persistent"] = true
	return p
}

const (
	summaryMethod = "SUMMARIZE"
	summaryPath   = "/orders/{order_id}"
)

func (e *env) deletes() int {
	e.catalog.mu.Lock()
	defer e.catalog.mu.Unlock()
	return len(e.catalog.delete)
}

func (e *env) promote(c *rcnsv1.Caller) string {
	e.t.Helper()
	resp, b := e.propose(c, persistentSummary(), "")
	if resp.GetStatus() != 263 || b["persistent"] != true {
		e.t.Fatalf("persistent PROPOSE: %d %v", resp.GetStatus(), b)
	}
	return resp.GetContract().GetSynthesisId()
}

func (e *env) claimHolder() string {
	return e.rdb.Get(context.Background(), rediskeys.RCNSPromotion(summaryMethod, summaryPath)).Val()
}

func (e *env) pendingUnpromotes() int64 {
	return e.rdb.ZCard(context.Background(), rediskeys.RCNSUnpromoteQueue).Val()
}

// A catalogsvc outage at revocation: the call says so (Unavailable), the
// contract is revoked all the same, and the janitor removes the endpoint
// once the catalog is back, with no further call; the mark then goes.
func TestJanitorRemovesAPendingUnpromote(t *testing.T) {
	e := newEnv(t, envConfig{opts: func(o *Options) { o.Contracts.JanitorInterval = 50 * time.Millisecond }})
	x := persister(agentX, sessionA)
	id := e.promote(x)
	if e.claimHolder() != id {
		t.Fatalf("claim of the promoted pair: %q, want %s", e.claimHolder(), id)
	}
	var mu sync.Mutex
	up := false
	e.catalog.mu.Lock()
	e.catalog.del = func(*catalogv1.DeleteEndpointRequest) (*catalogv1.DeleteEndpointResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		if !up {
			return nil, status.Error(codes.Unavailable, "catalogsvc restarting")
		}
		return &catalogv1.DeleteEndpointResponse{Revision: 3}, nil
	}
	e.catalog.mu.Unlock()
	_, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: x, SynthesisId: id})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("revoke with catalogsvc down: %v", err)
	}
	in, _ := e.client.GetContract(context.Background(), &rcnsv1.GetContractRequest{SynthesisId: id, Inspect: true})
	if state(in.GetContract()) != stateRevoked {
		t.Fatalf("state after the revoke: %s", state(in.GetContract()))
	}
	if e.rdb.HGet(context.Background(), rediskeys.Contract(id), fieldUnpromote).Val() == "" || e.pendingUnpromotes() != 1 {
		t.Fatal("no pending-unpromote mark after the failed removal")
	}
	if e.audit.count(agentX, eventRevoke, id) != 1 {
		t.Fatal("the revocation was not audited while the catalog was down")
	}
	// Still claimed: another agent cannot promote the pair meanwhile.
	if r, b := e.propose(persister(agentY, sessionB), persistentSummary(), ""); r.GetStatus() != 463 || b["reason"] != "policy-refused" {
		t.Fatalf("promotion of a pair whose removal is pending: %d %v", r.GetStatus(), b)
	}
	mu.Lock()
	up = true
	mu.Unlock()
	testkit.WaitFor(t, 5*time.Second, "the janitor's removal", func() bool { return e.pendingUnpromotes() == 0 })
	if e.rdb.HGet(context.Background(), rediskeys.Contract(id), fieldUnpromote).Val() != "" || e.claimHolder() != "" {
		t.Fatal("mark or claim left after the removal")
	}
	// The agent retrying now gets its answer; nothing is sent twice.
	n := e.deletes()
	if _, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: x, SynthesisId: id}); err != nil {
		t.Fatal(err)
	}
	if e.deletes() != n || e.audit.count(agentX, eventRevoke, id) != 1 {
		t.Fatalf("a repeated revoke after the removal: %d DeleteEndpoint (was %d), %d rcns_revoke", e.deletes(), n, e.audit.count(agentX, eventRevoke, id))
	}
	// The pair is free again.
	e.promote(persister(agentY, sessionB))
}

// A revoked contract removes the endpoint only when the pair's claim is
// its own: one promoted before claims existed (no claim) still removes it;
// a pair claimed by another contract is left alone.
func TestUnpromoteFollowsTheClaim(t *testing.T) {
	e := newEnv(t, envConfig{})
	x := persister(agentX, sessionA)
	ctx := context.Background()

	id := e.promote(x)
	e.rdb.Del(ctx, rediskeys.RCNSPromotion(summaryMethod, summaryPath))
	if _, err := e.client.RevokeContract(ctx, &rcnsv1.RevokeContractRequest{Caller: x, SynthesisId: id}); err != nil {
		t.Fatal(err)
	}
	if e.deletes() != 1 || e.claimHolder() != "" {
		t.Fatalf("unclaimed pair: %d DeleteEndpoint, claim %q", e.deletes(), e.claimHolder())
	}

	id = e.promote(x)
	other := newID(prefixSynthesis)
	e.rdb.Set(ctx, rediskeys.RCNSPromotion(summaryMethod, summaryPath), other, time.Hour)
	if _, err := e.client.RevokeContract(ctx, &rcnsv1.RevokeContractRequest{Caller: x, SynthesisId: id}); err != nil {
		t.Fatal(err)
	}
	if e.deletes() != 1 || e.claimHolder() != other || e.pendingUnpromotes() != 0 {
		t.Fatalf("pair claimed by another contract: %d DeleteEndpoint, claim %q, %d pending", e.deletes(), e.claimHolder(), e.pendingUnpromotes())
	}
}

// A PutEndpoint whose outcome is unknown (a timeout, an outage) may have
// registered the endpoint: it is removed, and the pair is free again. A
// plain refusal removes nothing.
func TestPromotionOfUnknownOutcomeIsRemoved(t *testing.T) {
	e := newEnv(t, envConfig{})
	x := persister(agentX, sessionA)
	e.catalog.answerPuts(func(*catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error) {
		return nil, status.Error(codes.FailedPrecondition, "endpoint-conflict")
	})
	if r, b := e.propose(x, persistentSummary(), ""); r.GetStatus() != 263 || b["persistent"] != false {
		t.Fatalf("refused promotion: %d %v", r.GetStatus(), b)
	}
	if e.deletes() != 0 || e.claimHolder() != "" || e.pendingUnpromotes() != 0 {
		t.Fatalf("after a refusal: %d DeleteEndpoint, claim %q, %d pending", e.deletes(), e.claimHolder(), e.pendingUnpromotes())
	}
	e.catalog.answerPuts(func(*catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error) {
		return nil, status.Error(codes.DeadlineExceeded, "slow")
	})
	if r, b := e.propose(x, persistentSummary(), ""); r.GetStatus() != 263 || b["persistent"] != false {
		t.Fatalf("promotion of unknown outcome: %d %v", r.GetStatus(), b)
	}
	if e.deletes() != 1 || e.claimHolder() != "" || e.pendingUnpromotes() != 0 {
		t.Fatalf("after an unknown outcome: %d DeleteEndpoint, claim %q, %d pending", e.deletes(), e.claimHolder(), e.pendingUnpromotes())
	}
	e.catalog.answerPuts(nil)
	e.promote(x)
}

// A promotion whose contract is taken back (audit down) removes its
// endpoint and frees the pair.
func TestPromotionTakenBackIsRemoved(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.audit.mu.Lock()
	e.audit.fail = func(*auditv1AppendReq) error { return status.Error(codes.Unavailable, "down") }
	e.audit.mu.Unlock()
	_, err := e.client.Propose(context.Background(), &rcnsv1.ProposeRequest{Caller: persister(agentX, sessionA), Parameters: string(mustJSON(persistentSummary()))})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("PROPOSE with audit down: %v", err)
	}
	if e.deletes() != 1 || e.claimHolder() != "" || e.pendingUnpromotes() != 0 {
		t.Fatalf("after the take-back: %d DeleteEndpoint, claim %q, %d pending", e.deletes(), e.claimHolder(), e.pendingUnpromotes())
	}
}

// An optimistic gate contract is not in force before its creation is
// audited: a concurrent request for the pair neither runs it nor resolves
// it.
func TestOptimisticGateUnauditedIsNotUsable(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeOptimistic)})
	inAudit, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.audit.mu.Lock()
	e.audit.fail = func(*auditv1AppendReq) error {
		once.Do(func() { close(inAudit) })
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return nil
	}
	e.audit.mu.Unlock()
	first := make(chan *rcnsv1.GateResponse, 1)
	go func() {
		r, _ := e.client.Gate(context.Background(), &rcnsv1.GateRequest{Caller: negotiator(agentX), Method: "SUMMARIZE", Path: "/order-digest"})
		first <- r
	}()
	<-inAudit
	second, err := e.client.Gate(context.Background(), &rcnsv1.GateRequest{Caller: negotiator(agentX), Method: "SUMMARIZE", Path: "/order-digest"})
	res := e.resolve(negotiator(agentX), "SUMMARIZE", "/order-digest")
	list, lerr := e.client.ListContracts(context.Background(), &rcnsv1.ListContractsRequest{Caller: negotiator(agentX)})
	close(release)
	if err == nil && second.GetOutcome() == rcnsv1.GateOutcome_GATE_OUTCOME_OPTIMISTIC {
		t.Fatal("a second gate request got the contract to run before its creation was audited")
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("second gate request: %v %v", second, err)
	}
	if res.GetStatus() == 0 && res.GetContract() != nil {
		t.Fatal("bare-pair resolution ran a contract before its creation was audited")
	}
	if lerr != nil || len(list.GetContracts()) != 1 || state(list.GetContracts()[0]) != statePending {
		t.Fatalf("listing during the audit: %v %v", list.GetContracts(), lerr)
	}
	if r := <-first; r.GetOutcome() != rcnsv1.GateOutcome_GATE_OUTCOME_OPTIMISTIC || state(r.GetContract()) != stateActive {
		t.Fatalf("first gate request: %v", r)
	}
	if r := e.resolve(negotiator(agentX), "SUMMARIZE", "/order-digest"); r.GetStatus() != 0 || state(r.GetContract()) != stateActive {
		t.Fatalf("resolution once audited: %d %s", r.GetStatus(), state(r.GetContract()))
	}
}

// An acceptance recorded but never audited nor taken back (the replica
// stopped in between) is not in force; once the call that recorded it
// would have ended, the next presentation audits it, once.
func TestStaleUnauditedAcceptanceIsAuditedOnPresentation(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeConfirmFirst)})
	c := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()
	id := c.GetSynthesisId()
	ctx := context.Background()
	key := rediskeys.Contract(id)
	e.rdb.HSet(ctx, key, "state", stateActive, "event", eventAccepted, "changed", strconv.FormatInt(time.Now().UnixMilli(), 10))
	if _, err := e.client.GetContract(ctx, &rcnsv1.GetContractRequest{Caller: negotiator(agentX), SynthesisId: id}); status.Code(err) != codes.Unavailable {
		t.Fatalf("presentation while the acceptance may be audited: %v", err)
	}
	if r := e.resolve(negotiator(agentX), "SUMMARIZE", "/order-digest"); r.GetStatus() == 0 {
		t.Fatal("an unaudited contract resolved")
	}
	in, _ := e.client.GetContract(ctx, &rcnsv1.GetContractRequest{SynthesisId: id, Inspect: true})
	if state(in.GetContract()) != statePending {
		t.Fatalf("an unaudited contract reads %s", state(in.GetContract()))
	}
	stale := time.Now().Add(-3 * e.opts.PeerTimeout).UnixMilli()
	e.rdb.HSet(ctx, key, "changed", strconv.FormatInt(stale, 10))
	r := e.present(negotiator(agentX), id)
	if r.GetStatus() != 0 || state(r.GetContract()) != stateActive || e.audit.count(agentX, eventAccepted, id) != 1 {
		t.Fatalf("presentation after the window: %d %s, %d events", r.GetStatus(), state(r.GetContract()), e.audit.count(agentX, eventAccepted, id))
	}
	if r := e.present(negotiator(agentX), id); r.GetStatus() != 0 || e.audit.count(agentX, eventAccepted, id) != 1 {
		t.Fatalf("presentation once in force: %d, %d events", r.GetStatus(), e.audit.count(agentX, eventAccepted, id))
	}
}

// An eviction (stale sweep, mode invalidate) deletes the contract at once;
// the removal of its promoted endpoint, refused by a catalog that is down,
// is still retried by the janitor.
func TestEvictedPersistentEndpointLeavesCatalog(t *testing.T) {
	e := newEnv(t, envConfig{opts: func(o *Options) { o.Contracts.JanitorInterval = 50 * time.Millisecond }})
	id := e.promote(persister(agentX, sessionA))
	var mu sync.Mutex
	up, removed := false, 0
	e.catalog.mu.Lock()
	e.catalog.del = func(*catalogv1.DeleteEndpointRequest) (*catalogv1.DeleteEndpointResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		if !up {
			return nil, status.Error(codes.Unavailable, "catalogsvc restarting")
		}
		removed++
		return &catalogv1.DeleteEndpointResponse{Revision: 3}, nil
	}
	e.catalog.mu.Unlock()
	e.setPatternVersion("order-summary", "2")
	r, err := e.client.RevokeStaleContracts(context.Background(), &rcnsv1.RevokeStaleContractsRequest{Caller: caller(agentY, "", 1, "inspect:all"), Mode: "invalidate", Actor: "ops"})
	if err != nil || r.GetEvicted() != 1 || r.GetSynthesisIds()[0] != id {
		t.Fatalf("sweep: %v %v", r, err)
	}
	if e.pendingUnpromotes() != 1 || e.claimHolder() != id {
		t.Fatalf("after the eviction: %d pending, claim %q", e.pendingUnpromotes(), e.claimHolder())
	}
	mu.Lock()
	up = true
	mu.Unlock()
	testkit.WaitFor(t, 5*time.Second, "the janitor's removal", func() bool { return e.pendingUnpromotes() == 0 })
	mu.Lock()
	defer mu.Unlock()
	if removed != 1 || e.claimHolder() != "" {
		t.Fatalf("after the janitor: %d removals, claim %q", removed, e.claimHolder())
	}
}
