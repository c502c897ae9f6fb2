package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/e2e"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// rateLimited is the endpoint whose per-agent limit the test spends: five
// per hour, so nothing refills it while the test runs.
const (
	rateLimitedPath  = "/orders/ord-1001"
	rateLimitedBurst = 5
	policyOptions    = `{"rate_limits":{"endpoints":[{"method":"QUERY","path":"/orders/{order_id}","per_agent":true,"rate":{"limit":5,"period":3600000000000}}]}}`
)

// outcome is one request of the load.
type outcome struct {
	agent, key, body string
	via              int // index of the suite (front door) it went to
	phase            int32
	status           int
	replayed         bool
	auditID, jws     string
	respBody         []byte
	err              error
}

// Load phases, by when a request was sent.
const (
	phaseBefore int32 = iota // before the kill
	phaseDuring              // from the kill until both front doors serve the buyer again
	phaseAfter               // after that: no request of the buyer may fail
)

// TestSuiteOnRedisClusterSurvivesFailover runs two complete suites (every
// service twice, as separate processes) against one Redis Cluster of three
// masters and three replicas, with auditsvc acknowledging an append only
// once a replica has it (AGTP_AUDIT_REPLICA_ACKS=1). It shows that replicas
// give the answers one process would (idempotency, rate limits, audit
// chains, revocation), then kills the master that holds the busy agent's
// hash slot with SIGKILL while both suites are under load: no pause, no
// waiting for its replica to catch up; on the contrary, the replica is cut
// off 200 ms before, so that the master dies with writes no replica has.
// It starts the master again so that it rejoins as the promoted replica's
// replica, and shows that nothing acknowledged was lost: every
// acknowledged record is in its chain, no chain forked and the chains
// verify, every acknowledged idempotent request replays byte for byte on
// either replica, the spent rate limit is still spent, and a revocation
// still reaches every front door. With AGTP_AUDIT_REPLICA_ACKS=0 it fails:
// the records acknowledged in those 200 ms are gone.
func TestSuiteOnRedisClusterSurvivesFailover(t *testing.T) {
	rc := StartCluster(t, 3, 1)
	policyFile := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(policyFile, []byte(policyOptions), 0o600); err != nil {
		t.Fatal(err)
	}
	// This test is about durability, not caller proof: its clients name
	// agents with header claims, which the suites on loopback take as
	// they are (caller_proof off), and it revokes as an operator over
	// gRPC (lifecycle open, loopback only).
	opts := e2e.Options{
		RedisURL: rc.URL(), Env: []string{"AGTP_POLICY_FILE=" + policyFile, "AGTP_CALLER_PROOF=off", "AGTP_LIFECYCLE_AUTH=open"},
		// Replication is asynchronous: without waiting for the replica, a
		// master killed at an arbitrary moment takes the records it
		// acknowledged last with it (docs/operations.md "Redis failover").
		ServiceEnv: map[string][]string{"auditsvc": {"AGTP_AUDIT_REPLICA_ACKS=1"}},
	}
	suites := []*e2e.Cluster{e2e.Start(t, opts), e2e.Start(t, opts)}
	t.Cleanup(func() { checkNoCrossSlot(t, suites) })
	for via, s := range suites {
		if !strings.Contains(s.Procs["auditsvc"].Logs(), "acknowledged only once Redis replicas have the record") {
			t.Fatalf("auditsvc of suite %d did not start with replica acks 1:\n%s", via, s.Procs["auditsvc"].Logs())
		}
	}

	buyer := registerAgent(t, suites[0], "cluster-buyer", "orders:read", "orders:write", "documents:read", "rcns:negotiate")
	victim := registerAgent(t, suites[1], "cluster-victim", "orders:read")
	for via := range suites {
		// A front door that started before its peers holds gRPC channels
		// in reconnect backoff for a moment after it reports SERVING.
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("suite %d to answer an agent", via), func() bool {
			return roundTrip(t, suites[via], request(t, "QUERY", "/orders", agtp.HeaderAgentID, victim)).Status == agtp.StatusOK
		})
	}
	keys := signingKeys(t, suites[0])
	slot := rc.Slot(t, rediskeys.ChainHead(buyer))
	for _, k := range []string{rediskeys.ChainStream(buyer), rediskeys.IdempotencySlot(buyer, "k"), rediskeys.AgentRateLimit(buyer, "ep:x"), rediskeys.Agent(buyer)} {
		if got := rc.Slot(t, k); got != slot {
			t.Fatalf("%s is in slot %d, the agent's chain head in %d: one agent's keys must share a slot", k, got, slot)
		}
	}
	// A bystander on another shard shows that agents whose slots stay up
	// are served through the failover.
	bystander := registerAgentOnOtherShard(t, rc, suites[0], slot)

	// --- Replicas give the answers one process would. ---
	create := func(via int, agent, key, body string) *agtp.Response {
		return roundTrip(t, suites[via], withJSON(request(t, "CREATE", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderIdempotencyKey, key), body))
	}
	first := create(0, buyer, "replicas-1", orderBody(1))
	if first.Status != agtp.StatusOK {
		t.Fatalf("CREATE via suite 0 = %d %s", first.Status, first.Body)
	}
	if again := create(1, buyer, "replicas-1", orderBody(1)); again.Header.Get(agtp.HeaderIdempotentReplayed) != "true" || string(again.Body) != string(first.Body) {
		t.Fatalf("the same CREATE via the other replica: replayed=%q body %s, want a replay of %s", again.Header.Get(agtp.HeaderIdempotentReplayed), again.Body, first.Body)
	}
	if other := create(1, buyer, "replicas-1", orderBody(2)); other.Status != 409 || reason(other) != "idempotency-key-reused" {
		t.Fatalf("the key with another body via the other replica = %d %s, want 409 idempotency-key-reused", other.Status, other.Body)
	}
	var sequential []*agtp.Response
	for i := range rateLimitedBurst {
		resp := roundTrip(t, suites[i%2], request(t, "QUERY", rateLimitedPath, agtp.HeaderAgentID, buyer))
		if resp.Status != agtp.StatusOK {
			t.Fatalf("QUERY %d of the %d allowed via suite %d = %d %s", i+1, rateLimitedBurst, i%2, resp.Status, resp.Body)
		}
		sequential = append(sequential, resp)
	}
	for via := range suites {
		if resp := roundTrip(t, suites[via], request(t, "QUERY", rateLimitedPath, agtp.HeaderAgentID, buyer)); resp.Status != 429 {
			t.Fatalf("QUERY beyond the limit spent across both replicas, via suite %d = %d %s, want 429", via, resp.Status, resp.Body)
		}
	}
	// Records written by alternating auditsvc replicas form one chain.
	for i := 1; i < len(sequential); i++ {
		prev, cur := verifyRecord(t, keys, sequential[i-1]), verifyRecord(t, keys, sequential[i])
		if cur.Payload.PreviousAuditID != prev.AuditID {
			t.Fatalf("record %d (suite %d) links to %s, want the previous record %s (suite %d)", i, i%2, cur.Payload.PreviousAuditID, prev.AuditID, (i-1)%2)
		}
	}
	checkChain(t, suites, buyer)
	// A contract negotiated through one replica serves through the other.
	contract := propose(t, suites[0], buyer)
	for via := range suites {
		if resp := callContract(t, suites[via], buyer); resp.Status != agtp.StatusOK {
			t.Fatalf("the contract negotiated via suite 0, called via suite %d = %d %s", via, resp.Status, resp.Body)
		}
	}
	for via := range suites {
		if resp := roundTrip(t, suites[via], request(t, "QUERY", "/orders", agtp.HeaderAgentID, victim)); resp.Status != agtp.StatusOK {
			t.Fatalf("victim before revocation via suite %d = %d %s", via, resp.Status, resp.Body)
		}
	}

	// --- Kill the buyer's master under load. ---
	var phase atomic.Int32
	var mu sync.Mutex
	var outcomes []*outcome
	acked := make([][3]atomic.Int64, len(suites)) // per suite, per phase
	// A front door has caught up with the failover once it has served the
	// buyer with a request sent after the new master took the slot: go-redis
	// reloads the cluster's slot map lazily, so the first requests after the
	// promotion may still be routed to the dead master.
	var failedOver atomic.Bool
	caughtUp := make([]atomic.Bool, len(suites))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		agent := buyer
		if w%3 == 2 {
			agent = bystander
		}
		wg.Go(func() {
			via := w % 2
			conn := newConn(suites[via])
			defer conn.close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				o := &outcome{agent: agent, key: fmt.Sprintf("load-%d-%d", w, i), body: orderBody(i), via: via, phase: phase.Load()}
				sentAfterFailover := failedOver.Load()
				req := withJSON(request(t, "CREATE", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderIdempotencyKey, o.key), o.body)
				resp, err := conn.do(req, 20*time.Second)
				if err != nil {
					o.err = err
					time.Sleep(50 * time.Millisecond)
				} else {
					o.status, o.respBody = resp.Status, resp.Body
					o.replayed = resp.Header.Get(agtp.HeaderIdempotentReplayed) == "true"
					o.auditID, o.jws = resp.Header.Get(agtp.HeaderAuditID), resp.Header.Get(agtp.HeaderAttributionRecord)
					if o.status == agtp.StatusOK {
						acked[via][o.phase].Add(1)
						if sentAfterFailover && agent == buyer {
							caughtUp[via].Store(true)
						}
					}
				}
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)
	waitAcked := func(p int32, n int64, timeout time.Duration) {
		t.Helper()
		testkit.WaitFor(t, timeout, fmt.Sprintf("%d acknowledged requests per front door in phase %d", n, p), func() bool {
			return acked[0][p].Load() >= n && acked[1][p].Load() >= n
		})
	}
	waitAcked(phaseBefore, 30, 20*time.Second)

	master := rc.MasterOf(t, slot)
	killedAt := time.Now()
	phase.Store(phaseDuring)
	// The replica falls behind just before the crash: writes the master
	// applies from now on reach no replica. Without waiting for replicas
	// the master would acknowledge records in this moment that the
	// promoted replica never has.
	rc.CutReplicas(t, master)
	time.Sleep(200 * time.Millisecond)
	master.Stop() // SIGKILL, in the middle of whatever it was doing
	promoted := rc.WaitFailover(t, master, slot, 30*time.Second)
	failedOverAt := time.Now()
	failedOver.Store(true)
	t.Logf("killed master %s; %s took over slot %d after %v", master.Addr, promoted.Addr, slot, failedOverAt.Sub(killedAt).Round(time.Millisecond))
	// Until the shard has a replica again, audit appends on it cannot be
	// replicated and fail (503): the old master comes back as the replica,
	// but not before a deployment's own failover would be over. The
	// idempotency claim is written without WAIT, so a request whose claim
	// went down with the old master must not get its record acknowledged
	// on the new one (it would be answered without its outcome stored, and
	// a retry would run it again: docs/operations.md, "What replica acks do
	// not cover"). The front door gives a SignAndAppend 5 s, resend
	// included; with the reference cluster-node-timeout of 5 s no shard
	// takes writes again within that, and this test's faster failover
	// waits as long.
	if wait := time.Until(killedAt.Add(6 * time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	rc.Rejoin(t, master, promoted, 30*time.Second)
	t.Logf("%s rejoined as the replica of %s %v after the promotion", master.Addr, promoted.Addr, time.Since(failedOverAt).Round(time.Millisecond))
	testkit.WaitFor(t, 20*time.Second, "both front doors serve the buyer after the failover", func() bool {
		return caughtUp[0].Load() && caughtUp[1].Load()
	})
	phase.Store(phaseAfter)
	t.Logf("both front doors served the buyer again %v after the promotion", time.Since(failedOverAt).Round(time.Millisecond))
	waitAcked(phaseAfter, 30, 30*time.Second)
	stopLoad()

	counts := map[string]int{}
	for _, o := range outcomes {
		switch {
		case o.err != nil:
			counts[fmt.Sprintf("phase %d transport error", o.phase)]++
		default:
			counts[fmt.Sprintf("phase %d status %d", o.phase, o.status)]++
		}
	}
	t.Logf("load: %v", counts)

	// --- After the failover. ---
	t.Run("every acknowledged record is in its chain, no chain forked, and the chains verify", func(t *testing.T) {
		chains := map[string]map[string]bool{}
		// Two acknowledged records signed against one predecessor would be
		// a fork, whichever of them the stream kept.
		successor := map[string]map[string]string{buyer: {}, bystander: {}} // agent -> previous -> audit id
		for _, agent := range []string{buyer, bystander} {
			checkChain(t, suites, agent)
			chains[agent] = chainIDs(t, rc, agent)
		}
		n := 0
		for _, o := range outcomes {
			if o.err != nil || o.status != agtp.StatusOK {
				if o.err == nil && o.status != 503 {
					t.Errorf("%s via suite %d in phase %d: status %d %s; the load expects 200, or 503 while a shard is down", o.key, o.via, o.phase, o.status, o.respBody)
				}
				if o.phase == phaseAfter && o.agent == buyer {
					t.Errorf("%s via suite %d after the failover: %v %d %s", o.key, o.via, o.err, o.status, o.respBody)
				}
				continue
			}
			rec, err := attribution.Verify(o.jws, attribution.VerifyOptions{Keys: keys})
			if err != nil || rec.AuditID != o.auditID || rec.Payload.AgentID != o.agent {
				t.Errorf("%s: record %v (audit id %s, header %s), agent %v, want a verified record of %s", o.key, err, recID(rec), o.auditID, recAgent(rec), o.agent)
				continue
			}
			if !chains[o.agent][o.auditID] {
				t.Errorf("acknowledged record %s (%s via suite %d, phase %d) is not in the chain of %s", o.auditID, o.key, o.via, o.phase, o.agent)
			}
			if other, ok := successor[o.agent][rec.Payload.PreviousAuditID]; ok && other != o.auditID {
				t.Errorf("chain of %s forked: acknowledged records %s and %s (%s, phase %d) both follow %s", o.agent, other, o.auditID, o.key, o.phase, rec.Payload.PreviousAuditID)
			}
			successor[o.agent][rec.Payload.PreviousAuditID] = o.auditID
			n++
		}
		t.Logf("%d acknowledged records checked", n)
	})

	t.Run("acknowledged records are found by Audit-ID on either replica", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		clients := []auditv1.AuditServiceClient{auditv1.NewAuditServiceClient(suites[0].Dial(t, "auditsvc")), auditv1.NewAuditServiceClient(suites[1].Dial(t, "auditsvc"))}
		unindexed := 0
		for i, o := range outcomes {
			if o.err != nil || o.status != agtp.StatusOK {
				continue
			}
			r, err := clients[i%2].GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: o.auditID})
			if o.agent == bystander {
				// The Audit-ID index is keyed by Audit-ID, so its entries
				// spread over every shard: a bystander whose chain stayed
				// up while the dead shard held its index entry has the
				// record in its chain (checked above) but no index entry
				// until the index is rebuilt (docs/operations.md).
				if status.Code(err) == codes.NotFound {
					unindexed++
					continue
				}
			}
			if err != nil || r.GetRecord().GetJws() != o.jws || r.GetRecord().GetChainAgentId() != o.agent {
				t.Fatalf("GetRecord(%s) of %s = %v, %v", o.auditID, o.agent, r.GetRecord(), err)
			}
		}
		t.Logf("bystander records acknowledged without an index entry: %d", unindexed)
	})

	t.Run("every acknowledged idempotent request replays byte for byte on the other replica", func(t *testing.T) {
		var failures atomic.Int64
		work := make(chan *outcome)
		var rw sync.WaitGroup
		for range 8 {
			rw.Go(func() {
				conns := []*agtpConn{newConn(suites[0]), newConn(suites[1])}
				defer conns[0].close()
				defer conns[1].close()
				for o := range work {
					if failures.Load() > 10 {
						continue // enough said; drain the queue
					}
					other := 1 - o.via
					req := withJSON(request(t, "CREATE", "/orders", agtp.HeaderAgentID, o.agent, agtp.HeaderIdempotencyKey, o.key), o.body)
					resp, err := conns[other].do(req, 20*time.Second)
					switch {
					case err != nil:
						t.Errorf("replay of %s via suite %d: %v", o.key, other, err)
					case resp.Header.Get(agtp.HeaderIdempotentReplayed) != "true" || string(resp.Body) != string(o.respBody):
						t.Errorf("replay of %s (phase %d) via suite %d = %d replayed=%q %s, want the stored %s", o.key, o.phase, other, resp.Status, resp.Header.Get(agtp.HeaderIdempotentReplayed), resp.Body, o.respBody)
					default:
						continue
					}
					failures.Add(1)
				}
			})
		}
		for _, o := range outcomes {
			if o.err == nil && o.status == agtp.StatusOK {
				work <- o
			}
		}
		close(work)
		rw.Wait()
		for via := range suites {
			if again := create(via, buyer, "replicas-1", orderBody(1)); again.Header.Get(agtp.HeaderIdempotentReplayed) != "true" || string(again.Body) != string(first.Body) {
				t.Errorf("the key used before the failover, via suite %d: replayed=%q %s, want %s", via, again.Header.Get(agtp.HeaderIdempotentReplayed), again.Body, first.Body)
			}
		}
	})

	t.Run("the rate limit spent before the failover is still spent", func(t *testing.T) {
		for via := range suites {
			if resp := roundTrip(t, suites[via], request(t, "QUERY", rateLimitedPath, agtp.HeaderAgentID, buyer)); resp.Status != 429 {
				t.Errorf("QUERY via suite %d = %d %s, want 429", via, resp.Status, resp.Body)
			}
		}
	})

	t.Run("the contract negotiated before the failover still serves and is listed", func(t *testing.T) {
		for via := range suites {
			if resp := callContract(t, suites[via], buyer); resp.Status != agtp.StatusOK {
				t.Errorf("calling the contract via suite %d = %d %s", via, resp.Status, resp.Body)
			}
			list := roundTrip(t, suites[via], request(t, "DISCOVER", "/contracts", agtp.HeaderAgentID, buyer))
			if list.Status != agtp.StatusOK || !strings.Contains(string(list.Body), contract) {
				t.Errorf("DISCOVER /contracts via suite %d = %d %s, want %s listed", via, list.Status, list.Body, contract)
			}
		}
	})

	t.Run("a revocation on one replica reaches every front door", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := identityv1.NewIdentityServiceClient(suites[1].Dial(t, "identitysvc")).TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{
			AgentId: victim, Transition: identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REVOKE, Reason: "clustertest",
		}); err != nil {
			t.Fatal(err)
		}
		for via := range suites {
			testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("410 for the revoked agent via suite %d", via), func() bool {
				return roundTrip(t, suites[via], request(t, "QUERY", "/orders", agtp.HeaderAgentID, victim)).Status == 410
			})
		}
	})

	t.Run("every service is still serving", func(t *testing.T) {
		for _, s := range suites {
			for _, name := range devpki.ServiceNames {
				s.WaitServing(t, name, 5*time.Second)
			}
		}
	})
}

// contractSession is the Session-ID the buyer's contract is bound to.
const contractSession = "sess-c1a55e7c1a55e7c1a55e7c1a"

// propose negotiates SUMMARIZE /order-digest (a demo pattern, rcnssvc with
// AGTP_DEMO) for the session and returns the contract's synthesis ID.
func propose(t *testing.T, c *e2e.Cluster, agent string) string {
	t.Helper()
	body := `{"endpoint":{"method":"SUMMARIZE","path":"/order-digest","description":"Digest of my orders",
		"semantic":{"intent":"Summarize my recent orders.","actor":"agent","outcome":"A short digest of the orders.","capability":"analysis","confidence":0.8,"impact":"informational","is_idempotent":true},
		"input_schema":{"type":"object","properties":{"status":{"type":"string","enum":["open","shipped","cancelled"]}},"additionalProperties":false},
		"output_schema":{"type":"object","additionalProperties":true},"errors":[]}}`
	resp := roundTrip(t, c, withJSON(request(t, "PROPOSE", "/", agtp.HeaderAgentID, agent, agtp.HeaderSessionID, contractSession), body))
	var approved struct {
		SynthesisID string `json:"synthesis_id"`
	}
	if resp.Status != agtp.StatusProposalApproved || json.Unmarshal(resp.Body, &approved) != nil || approved.SynthesisID == "" {
		t.Fatalf("PROPOSE = %d %s, want 263 with a synthesis_id", resp.Status, resp.Body)
	}
	return approved.SynthesisID
}

func callContract(t *testing.T, c *e2e.Cluster, agent string) *agtp.Response {
	t.Helper()
	return roundTrip(t, c, request(t, "SUMMARIZE", "/order-digest", agtp.HeaderAgentID, agent, agtp.HeaderSessionID, contractSession))
}

// registerAgentOnOtherShard registers agents until one lands on a slot
// served by another master than slot's.
func registerAgentOnOtherShard(t *testing.T, rc *Cluster, c *e2e.Cluster, slot int) string {
	t.Helper()
	busy := rc.MasterOf(t, slot)
	for i := range 20 {
		agent := registerAgent(t, c, fmt.Sprintf("cluster-bystander-%d", i), "orders:read", "orders:write")
		if rc.MasterOf(t, rc.Slot(t, rediskeys.ChainHead(agent))) != busy {
			return agent
		}
	}
	t.Fatal("twenty agents in a row hashed to one shard")
	return ""
}

func verifyRecord(t *testing.T, keys attribution.PublicKeys, resp *agtp.Response) *attribution.Record {
	t.Helper()
	rec, err := attribution.Verify(resp.Header.Get(agtp.HeaderAttributionRecord), attribution.VerifyOptions{Keys: keys})
	if err != nil {
		t.Fatalf("Attribution-Record does not verify: %v", err)
	}
	return rec
}

// checkChain asks each suite's auditsvc to verify the agent's chain; both
// must find it valid with the same length.
func checkChain(t *testing.T, suites []*e2e.Cluster, agent string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lengths []uint64
	for via, s := range suites {
		r, err := auditv1.NewAuditServiceClient(s.Dial(t, "auditsvc")).VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent})
		if err != nil || !r.GetValid() {
			t.Fatalf("VerifyChain(%s) via suite %d = %v, %v", agent, via, r, err)
		}
		lengths = append(lengths, r.GetLength())
	}
	if lengths[0] != lengths[1] || lengths[0] == 0 {
		t.Fatalf("chain of %s: lengths %v, want one non-empty length from every replica", agent, lengths)
	}
}

// chainIDs reads the Audit-IDs of an agent's chain from its stream, the
// store's source of truth (docs/audit.md), not from the Audit-ID index.
func chainIDs(t *testing.T, rc *Cluster, agent string) map[string]bool {
	t.Helper()
	entries, err := rc.Client.XRange(context.Background(), rediskeys.ChainStream(agent), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, e := range entries {
		if id, ok := e.Values["audit_id"].(string); ok {
			ids[id] = true
		}
	}
	return ids
}

// checkNoCrossSlot fails when any process logged a CROSSSLOT error: a
// script or transaction whose keys are not in one hash slot.
func checkNoCrossSlot(t *testing.T, suites []*e2e.Cluster) {
	for via, s := range suites {
		for name, p := range s.Procs {
			if logs := p.Logs(); strings.Contains(logs, "CROSSSLOT") {
				t.Errorf("%s of suite %d logged CROSSSLOT:\n%s", name, via, logs)
			}
		}
	}
}

func recID(r *attribution.Record) string {
	if r == nil {
		return ""
	}
	return r.AuditID
}

func recAgent(r *attribution.Record) string {
	if r == nil {
		return ""
	}
	return r.Payload.AgentID
}
