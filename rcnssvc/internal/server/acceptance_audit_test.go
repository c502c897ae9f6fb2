package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
)

// TestAcceptUnauditedIsNotUsable: a confirm-first preview accepted by a
// presentation is not in force until rcns_propose_accepted is audited
// (docs/rcns.md: acceptance fails closed). A second presentation while
// the first waits for auditsvc does not get the contract to run, and when
// the audit fails the contract stays pending.
func TestAcceptUnauditedIsNotUsable(t *testing.T) {
	e := newEnv(t, envConfig{opts: rcnsOn(ModeConfirmFirst)})
	c := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()
	if c == nil || state(c) != statePending {
		t.Fatalf("preview: %v", c)
	}
	inAudit := make(chan struct{})
	release := make(chan struct{})
	e.audit.mu.Lock()
	var once sync.Once
	e.audit.fail = func(*auditv1AppendReq) error {
		once.Do(func() { close(inAudit) })
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return status.Error(codes.Unavailable, "down")
	}
	e.audit.mu.Unlock()

	first := make(chan error, 1)
	go func() {
		_, err := e.client.GetContract(context.Background(), &rcnsv1.GetContractRequest{Caller: negotiator(agentX), SynthesisId: c.GetSynthesisId()})
		first <- err
	}()
	select {
	case <-inAudit:
	case <-time.After(5 * time.Second):
		t.Fatal("the first presentation never reached auditsvc")
	}
	// The second presentation (a retry, a parallel request of the agent).
	second, err := e.client.GetContract(context.Background(), &rcnsv1.GetContractRequest{Caller: negotiator(agentX), SynthesisId: c.GetSynthesisId()})
	close(release)
	if ferr := <-first; status.Code(ferr) != codes.Unavailable {
		t.Fatalf("first presentation with audit down: %v", ferr)
	}
	in, _ := e.client.GetContract(context.Background(), &rcnsv1.GetContractRequest{SynthesisId: c.GetSynthesisId(), Inspect: true})
	if err == nil && second.GetStatus() == 0 && second.GetContract() != nil {
		t.Fatalf("second presentation got the contract to run (state %s, %d rcns_propose_accepted events); after the failed audit it is %s",
			state(second.GetContract()), e.audit.count(agentX, eventAccepted, c.GetSynthesisId()), state(in.GetContract()))
	}
}
