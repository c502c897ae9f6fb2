package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// A contract lives in Redis, not in the process: a new rcnssvc on the same
// Redis serves it, and it stops resolving at its expiry (464
// contract-revoked, a tombstone rather than 404), after which the janitor
// records the end and audits rcns_release.
func TestContractSurvivesRestartAndExpiresOnTime(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	e := newEnv(t, envConfig{opts: func(o *Options) {
		rcnsOn(ModeOptimistic)(o)
		o.RCNS.ContractTTL = ttl
		o.Contracts.JanitorInterval = 50 * time.Millisecond
	}})
	gateC := e.gate(negotiator(agentX), "SUMMARIZE", "/order-digest").GetContract()
	resp, _ := e.propose(reader(), map[string]any{"endpoint": orderSummaryEndpoint(), "requested_duration": "1s"}, "")
	propC := resp.GetContract()
	if gateC == nil || propC == nil {
		t.Fatal("no contracts")
	}
	if d := propC.GetExpiresAt().AsTime().Sub(propC.GetIssuedAt().AsTime()); d != time.Second {
		t.Fatalf("requested_duration 1s granted %v", d)
	}

	e.start() // a new rcnssvc on the same Redis

	for _, c := range []*rcnsv1.Contract{gateC, propC} {
		if r := e.present(reader(), c.GetSynthesisId()); r.GetStatus() != 0 || r.GetContract().GetContractHash() != c.GetContractHash() {
			t.Fatalf("after restart %s: %v", c.GetSynthesisId(), r)
		}
	}
	if r := e.resolve(reader(), "SUMMARIZE", "/orders/o-1"); r.GetStatus() != 0 {
		t.Fatalf("after restart the proposed endpoint does not resolve: %d", r.GetStatus())
	}

	for _, c := range []*rcnsv1.Contract{propC, gateC} {
		exp := c.GetExpiresAt().AsTime()
		time.Sleep(time.Until(exp.Add(-200 * time.Millisecond)))
		if r := e.present(reader(), c.GetSynthesisId()); r.GetStatus() != 0 {
			t.Fatalf("%s before its expiry: %v", c.GetSynthesisId(), r)
		}
		time.Sleep(time.Until(exp.Add(20 * time.Millisecond)))
		if r := e.present(reader(), c.GetSynthesisId()); r.GetStatus() != 464 || r.GetReason() != "contract-revoked" {
			t.Fatalf("%s after its expiry: %v", c.GetSynthesisId(), r)
		}
	}
	if r := e.resolve(reader(), "SUMMARIZE", "/orders/o-1"); r.GetStatus() != 404 {
		t.Fatalf("an expired endpoint resolves: %d", r.GetStatus())
	}
	testkit.WaitFor(t, 5*time.Second, "the janitor's rcns_release events", func() bool {
		return e.audit.count(agentX, eventRelease, gateC.GetSynthesisId()) == 1 && e.audit.count(agentX, eventRelease, propC.GetSynthesisId()) == 1
	})
	in, err := e.client.GetContract(context.Background(), &rcnsv1.GetContractRequest{SynthesisId: gateC.GetSynthesisId(), Inspect: true})
	if err != nil || state(in.GetContract()) != stateExpired {
		t.Fatalf("INSPECT after expiry: %v %v", in, err)
	}
	if l, _ := e.client.ListContracts(context.Background(), &rcnsv1.ListContractsRequest{Caller: reader()}); len(l.GetContracts()) != 0 {
		t.Fatalf("expired contracts listed: %v", l.GetContracts())
	}
	if n, _ := e.rdb.ZCard(context.Background(), "agtp:{contracts}:index").Result(); n != 0 {
		t.Fatalf("index still holds %d contracts", n)
	}
}

// With appendonly yes and appendfsync always, every contract rcnssvc
// acknowledged survives a Redis crash (kill -9) and restart.
func TestRedisCrashLosesNoAcknowledgedContract(t *testing.T) {
	e := newEnv(t, envConfig{
		opts:      rcnsOn(ModeOptimistic),
		redisArgs: []string{"--appendonly", "yes", "--appendfsync", "always"},
	})
	const n = 30
	var mu sync.Mutex
	acked := map[string]string{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Go(func() {
			agent := agentN(1000 + i)
			c := caller(agent, sessionA, 1, "rcns:negotiate", "orders:read")
			var id string
			if i%2 == 0 {
				r, err := e.client.Gate(context.Background(), &rcnsv1.GateRequest{Caller: c, Method: "SUMMARIZE", Path: "/order-digest"})
				if err != nil || r.GetContract() == nil {
					t.Errorf("gate %d: %v %v", i, r, err)
					return
				}
				id = r.GetContract().GetSynthesisId()
			} else {
				r, err := e.client.Propose(context.Background(), &rcnsv1.ProposeRequest{Caller: c, Parameters: string(mustJSON(orderSummary()))})
				if err != nil || r.GetStatus() != 263 {
					t.Errorf("propose %d: %v %v", i, r, err)
					return
				}
				id = r.GetContract().GetSynthesisId()
			}
			mu.Lock()
			acked[id] = agent
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(acked) != n {
		t.Fatalf("%d of %d acknowledged", len(acked), n)
	}
	e.redis.Restart(t)
	testkit.WaitFor(t, 5*time.Second, "redis after restart", func() bool { return e.rdb.Ping(context.Background()).Err() == nil })
	for id, agent := range acked {
		r := e.present(caller(agent, sessionA, 1, "orders:read"), id)
		if r.GetStatus() != 0 || r.GetContract().GetOriginatingAgentId() != agent {
			t.Errorf("%s after the crash: %v", id, r)
		}
	}
	l, err := e.client.ListContracts(context.Background(), &rcnsv1.ListContractsRequest{Caller: caller(agentY, "", 1, "inspect:all")})
	if err != nil || len(l.GetContracts()) != n {
		t.Fatalf("inspect:all lists %d after the crash: %v", len(l.GetContracts()), err)
	}
}

// The janitor ends a contract once across replicas: two servers on one
// Redis emit one rcns_release.
func TestExpiryIsAuditedOnceAcrossReplicas(t *testing.T) {
	e := newEnv(t, envConfig{opts: func(o *Options) {
		rcnsOn(ModeOptimistic)(o)
		o.RCNS.ContractTTL = 200 * time.Millisecond
	}})
	var ids []string
	for i := 0; i < 10; i++ {
		ids = append(ids, e.gate(negotiator(agentN(i)), "SUMMARIZE", "/order-digest").GetContract().GetSynthesisId())
	}
	time.Sleep(300 * time.Millisecond)
	second, err := New(e.rdb, e.srv.log, e.srv.catalog, e.srv.policy, e.srv.audit, e.opts)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, s := range []*Server{e.srv, second} {
		wg.Go(func() { s.expireContracts(context.Background()) })
	}
	wg.Wait()
	for i, id := range ids {
		if got := e.audit.count(agentN(i), eventRelease, id); got != 1 {
			t.Errorf("contract %d: %d rcns_release events", i, got)
		}
	}
}

func ExampleOptions() {
	o := DefaultOptions()
	fmt.Println(o.RCNS.Enabled, o.RCNS.Mode, o.RCNS.MinTrustTier, o.Propose.MaxTurns)
	// Output: false confirm-first 1 3
}
