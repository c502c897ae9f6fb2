package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestFaultsDuringLoad kills each internal service, and Redis, with
// SIGKILL while agents keep calling, then restarts it. The front door must
// keep answering (503 with a reason while a part is missing, never a hang
// and never a signed response without its stored record), recover by
// itself, and afterwards every acknowledged record is in the agent's
// chain, which verifies end to end.
func TestFaultsDuringLoad(t *testing.T) {
	c := Start(t, Options{RedisArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	agent := c.registerAgent(t, "e2e-fault", "orders:read")
	keys := c.signingKeys(t)
	addr := c.Procs["frontdoor"].AGTPAddr
	cl, err := client.New(client.Options{RootCAs: c.Admin.Pool(), ServerName: "localhost", AgentID: agent, Certificates: []tls.Certificate{*AgentCertificate(agent)}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	var (
		mu       sync.Mutex
		acked    []string // Audit-IDs of signed responses on the agent's chain
		statuses = map[int]int{}
		hung     atomic.Int64
		ok       atomic.Int64
	)
	call := func(ctx context.Context) {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		req, _ := agtp.NewRequest("QUERY", "/orders")
		start := time.Now()
		resp, err := cl.Do(rctx, req, addr)
		if err != nil {
			if ctx.Err() == nil && time.Since(start) > 19*time.Second {
				hung.Add(1)
			}
			return
		}
		mu.Lock()
		statuses[resp.Status]++
		mu.Unlock()
		rec, verr := client.VerifyAttribution(resp, keys)
		switch {
		case verr == nil:
			// Requests refused before the caller was authenticated (e.g.
			// identitysvc down) are recorded on the server's chain.
			if rec.Payload.AgentID == agent {
				mu.Lock()
				acked = append(acked, rec.AuditID)
				mu.Unlock()
			}
			if resp.Status == agtp.StatusOK {
				ok.Add(1)
			}
		case resp.Status != agtp.StatusUnavailable:
			t.Errorf("a %d response without a verifiable record: %v", resp.Status, verr)
		default:
			// A 503 without a stored record says so in its body and its
			// unsigned record.
			var body map[string]any
			_ = json.Unmarshal(resp.Body, &body)
			if body["reason"] == "" || body["reason"] == nil {
				t.Errorf("503 without a reason: %s", resp.Body)
			}
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				call(ctx)
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	recovered := func(what string) {
		t.Helper()
		before := ok.Load()
		testkit.WaitFor(t, 30*time.Second, "successful calls again after "+what, func() bool { return ok.Load() > before+5 })
	}
	time.Sleep(500 * time.Millisecond)
	for _, name := range []string{"auditsvc", "policysvc", "identitysvc", "catalogsvc", "rcnssvc"} {
		c.Stop(name, syscall.SIGKILL)
		time.Sleep(700 * time.Millisecond)
		c.Restart(t, name)
		recovered("restarting " + name)
	}
	c.Redis.Restart(t)
	recovered("restarting Redis")
	stop()
	wg.Wait()

	t.Logf("responses by status: %v; signed records: %d", statuses, len(acked))
	if hung.Load() > 0 {
		t.Fatalf("%d requests hung for 20s", hung.Load())
	}
	if statuses[agtp.StatusUnavailable] == 0 {
		t.Error("no 503 while parts were down: the kills did not bite")
	}
	// Every acknowledged record is stored, and the chain verifies.
	inspector := c.dialAs(t, agent)
	for _, id := range acked {
		if resp := inspector.do(request(t, "INSPECT", "/?target=audit&audit_id="+id)); resp.Status != agtp.StatusOK {
			t.Fatalf("acknowledged record %s: INSPECT = %d %s", id, resp.Status, resp.Body)
		}
	}
	head := inspector.do(request(t, "INSPECT", "/?target=chain_head&agent_id="+agent))
	var hb struct {
		AuditID string `json:"audit_id"`
	}
	if err := json.Unmarshal(head.Body, &hb); err != nil || hb.AuditID == "" {
		t.Fatalf("chain head = %d %s", head.Status, head.Body)
	}
	inChain := map[string]bool{}
	fetch := func(ctx context.Context, id string) (string, error) {
		inChain[id] = true
		resp := inspector.do(request(t, "INSPECT", "/?target=audit&audit_id="+id))
		var rb struct {
			JWS string `json:"jws"`
		}
		if err := json.Unmarshal(resp.Body, &rb); err != nil {
			return "", err
		}
		return rb.JWS, nil
	}
	res := attribution.WalkBack(context.Background(), hb.AuditID, fetch, attribution.ChainOptions{VerifyOptions: attribution.VerifyOptions{Keys: keys}, AgentID: agent}, 0)
	if !res.Valid {
		t.Fatalf("chain does not verify after the faults: %+v", res.Break)
	}
	for _, id := range acked {
		if !inChain[id] {
			t.Fatalf("acknowledged record %s is stored but not in the agent's chain (%d records walked)", id, res.Checked)
		}
	}
}
