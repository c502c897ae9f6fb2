package server

import (
	"context"
	"testing"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
)

// The hot paths: presenting a contract (every call under Contract-
// Synthesized), resolving the bare pair (every unregistered request of an
// agent), a repeated gate evaluation, and an approved PROPOSE. Measured
// on the Server directly, with a real Redis and loopback gRPC peers.

func BenchmarkPresentContract(b *testing.B) {
	e := newEnv(b, envConfig{opts: rcnsOn(ModeOptimistic)})
	id := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract().GetSynthesisId()
	req := &rcnsv1.GetContractRequest{Caller: negotiator(agentX), SynthesisId: id}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if r, err := e.srv.GetContract(ctx, req); err != nil || r.GetStatus() != 0 {
			b.Fatal(r, err)
		}
	}
}

func BenchmarkResolvePair(b *testing.B) {
	e := newEnv(b, envConfig{})
	for i := 0; i < 8; i++ { // an agent holding several contracts
		if r, _ := e.propose(reader(), orderSummary(), ""); r.GetStatus() != 263 {
			b.Fatal(r.GetStatus())
		}
	}
	req := &rcnsv1.GetContractRequest{Caller: reader(), Method: "SUMMARIZE", Path: "/orders/o-17"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if r, err := e.srv.GetContract(ctx, req); err != nil || r.GetStatus() != 0 {
			b.Fatal(r, err)
		}
	}
}

func BenchmarkGateRepeated(b *testing.B) {
	e := newEnv(b, envConfig{opts: rcnsOn(ModeConfirmFirst)})
	req := &rcnsv1.GateRequest{Caller: negotiator(agentX), Method: "SUMMARIZE", Path: "/orders/o-17"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if r, err := e.srv.Gate(ctx, req); err != nil || r.GetStatus() != 461 {
			b.Fatal(r, err)
		}
	}
}

func BenchmarkProposeApproved(b *testing.B) {
	e := newEnv(b, envConfig{opts: func(o *Options) { o.Contracts.MaxPerAgent = 10000 }})
	params := mustJSON(orderSummary())
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r, err := e.srv.Propose(ctx, &rcnsv1.ProposeRequest{Caller: caller(agentN(i%5000), sessionA, 1, "orders:read"), Parameters: string(params)})
		if err != nil || r.GetStatus() != 263 {
			b.Fatal(r, err)
		}
	}
}
