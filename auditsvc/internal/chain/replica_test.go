package chain

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/deploy/clustertest"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// replicaTimeout is the ReplicaTimeout of these tests.
const replicaTimeout = 300 * time.Millisecond

// startReplica starts a redis-server replicating primary and waits until
// it is online and acknowledging writes. Restart brings it back with the
// same arguments, so as a replica of primary again.
func startReplica(t *testing.T, primary *testkit.Redis) *testkit.Redis {
	t.Helper()
	// The primary syncs a replica at once instead of waiting 5 s for company.
	c := redis.NewClient(&redis.Options{Addr: primary.Addr})
	defer c.Close()
	if err := c.ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(primary.Addr, ":")
	r := testkit.StartRedis(t, "--replicaof", host, port)
	waitReplicas(t, primary.Addr, 1, "ready")
	return r
}

// waitReplicas waits until the primary at addr has n replicas online
// that acknowledge writes: a write to key (a key the primary serves) and
// a WAIT on the same connection must count all n. A replica that is still
// loading what it was sent is "online" but acknowledges nothing yet.
func waitReplicas(t *testing.T, addr string, n int, key string) {
	t.Helper()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	testkit.WaitFor(t, 20*time.Second, fmt.Sprintf("%d replicas of %s acknowledging writes", n, addr), func() bool {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil || onlineReplicas(info) != n {
			return false
		}
		var wait *redis.Cmd
		_, _ = c.Pipelined(ctx, func(pl redis.Pipeliner) error {
			pl.Set(ctx, key, "ready", 0)
			wait = pl.Do(ctx, "wait", n, 100)
			return nil
		})
		got, err := wait.Int64()
		return err == nil && got == int64(n)
	})
}

func infoValue(info, name string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

func onlineReplicas(info string) int {
	n := 0
	for _, line := range strings.Split(info, "\r\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
			n++
		}
	}
	return n
}

// With ReplicaAcks 1, an append is acknowledged only once the replica has
// the record. With the replica gone, the append fails as unavailable after
// about ReplicaTimeout, although the record is in the primary's chain; a
// retry with the same request ID is refused the same way while the
// replica is away, and answered with that record once it is back. The
// chain never forks or gaps.
func TestAppendIsAcknowledgedOnlyOnceReplicated(t *testing.T) {
	ctx := context.Background()
	primary := testkit.StartRedis(t)
	replica := startReplica(t, primary)
	ks := testKeys(t)
	s := newStore(t, primary.Client(t), ks, Options{ReplicaAcks: 1, ReplicaTimeout: replicaTimeout})
	onReplica := replica.Client(t)
	const chainID = "replicated"
	_, streamKey := keys(attribution.StreamAttribution, chainID)

	var last Appended
	for i := range 5 {
		a, err := s.AppendOnce(ctx, attribution.StreamAttribution, chainID, payload(chainID, i), nil,
			Request{ID: "ok-" + strconv.Itoa(i), Fingerprint: "fp"})
		if err != nil {
			t.Fatalf("append %d with the replica online: %v", i, err)
		}
		// Acknowledged means the replica has it, at the moment of the
		// answer (reading the replica is allowed: it is read-only).
		if n, err := onReplica.XLen(ctx, streamKey).Result(); err != nil || n != int64(i+1) {
			t.Fatalf("after acknowledged append %d the replica holds %d records (%v)", i+1, n, err)
		}
		last = a
	}

	replica.Stop()
	req := Request{ID: "while-alone", Fingerprint: "fp"}
	p := payload(chainID, 5)
	start := time.Now()
	_, failed := s.AppendOnce(ctx, attribution.StreamAttribution, chainID, p, nil, req)
	took := time.Since(start)
	if !errors.Is(failed, ErrUnavailable) || !strings.Contains(failed.Error(), "not replicated to 1 replicas within "+replicaTimeout.String()) {
		t.Fatalf("append without the replica: %v, want ErrUnavailable saying the record was not replicated", failed)
	}
	if took < replicaTimeout || took > replicaTimeout+time.Second {
		t.Fatalf("append without the replica failed after %v, want about the replica timeout %v", took, replicaTimeout)
	}
	t.Logf("without the replica: failed after %v: %v", took.Round(time.Millisecond), failed)
	// The record is in the primary's chain anyway: the script ran.
	head, n, err := s.Head(ctx, attribution.StreamAttribution, chainID)
	if err != nil || n != 6 || head == last.AuditID || !strings.Contains(failed.Error(), head) {
		t.Fatalf("primary's chain: head %s length %d (%v), want the record the error names at 6", head, n, err)
	}
	// A replay proves nothing while the replica is away: refused the same way.
	if _, err := s.AppendOnce(ctx, attribution.StreamAttribution, chainID, p, nil, req); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), head) {
		t.Fatalf("retry without the replica: %v, want ErrUnavailable naming %s", err, head)
	}
	if st := s.Stats(); st.Unreplicated != 2 || st.Replays != 0 {
		t.Fatalf("stats %+v, want 2 unreplicated answers and no replay", st)
	}

	replica.Restart(t)
	waitReplicas(t, primary.Addr, 1, "ready")
	a, err := s.AppendOnce(ctx, attribution.StreamAttribution, chainID, p, nil, req)
	if err != nil || !a.Replayed || a.AuditID != head || a.Sequence != 6 || a.PreviousAuditID != last.AuditID {
		t.Fatalf("retry with the replica back: %v %+v, want a replay of %s at 6 after %s", err, a, head, last.AuditID)
	}
	if n, err := onReplica.XLen(ctx, streamKey).Result(); err != nil || n != 6 {
		t.Fatalf("the replica holds %d records (%v), want 6", n, err)
	}
	// The head cache was forgotten: the next append links to the record.
	next, err := s.Append(ctx, attribution.StreamAttribution, chainID, payload(chainID, 6), nil)
	if err != nil || next.Sequence != 7 || next.PreviousAuditID != head {
		t.Fatalf("next append: %v %+v, want sequence 7 after %s", err, next, head)
	}
	if st := s.Stats(); st.Unreplicated != 2 || st.Replays != 1 || st.Conflicts != 0 {
		t.Fatalf("stats %+v", st)
	}
	r, err := s.Verify(ctx, attribution.StreamAttribution, chainID, verifyOpts(ks, chainID), 0)
	if err != nil || !r.Valid || r.Length != 7 {
		t.Fatalf("chain: %v %+v", err, r)
	}
}

// Without ReplicaAcks nothing waits: an append with the replica gone is
// acknowledged at once (the behaviour ReplicaAcks exists to change), and
// the start-up check warns about it.
func TestAppendWithoutReplicaAcksDoesNotWait(t *testing.T) {
	ctx := context.Background()
	primary := testkit.StartRedis(t)
	replica := startReplica(t, primary)
	s := newStore(t, primary.Client(t), testKeys(t), Options{})
	// Start-up warnings: replicas nobody waits for; fewer replicas than
	// waited for; none when they match.
	warns := func(s *Store) string { return strings.Join(s.DurabilityWarnings(ctx), "\n") }
	if w := warns(s); !strings.Contains(w, "1 replica(s) online but audit appends do not wait for them") {
		t.Errorf("warnings with a replica and acks 0: %s", w)
	}
	if w := warns(newStore(t, primary.Client(t), testKeys(t), Options{ReplicaAcks: 2})); !strings.Contains(w, "fewer than the 2 every audit append waits for") {
		t.Errorf("warnings with a replica and acks 2: %s", w)
	}
	if w := warns(newStore(t, primary.Client(t), testKeys(t), Options{ReplicaAcks: 1})); strings.Contains(w, "replica") {
		t.Errorf("warnings with a replica and acks 1: %s", w)
	}
	replica.Stop()
	start := time.Now()
	if _, err := s.Append(ctx, attribution.StreamAttribution, "alone", payload("alone", 0), nil); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > replicaTimeout {
		t.Fatalf("append took %v", took)
	}
}

// ReplicaAcks needs a read timeout longer than the WAIT, and a client
// whose pipelines are one connection per node.
func TestReplicaAcksOptionsAreChecked(t *testing.T) {
	primary := testkit.StartRedis(t)
	short := redis.NewClient(&redis.Options{Addr: primary.Addr, ReadTimeout: 200 * time.Millisecond})
	defer short.Close()
	if _, err := New(short, testKeys(t).Signer(), nil, Options{ReplicaAcks: 1}); err == nil || !strings.Contains(err.Error(), "read timeout") {
		t.Fatalf("500ms WAIT on a client with a 200ms read timeout: %v", err)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": primary.Addr}})
	defer ring.Close()
	if _, err := New(ring, testKeys(t).Signer(), nil, Options{ReplicaAcks: 1}); err == nil {
		t.Fatal("ReplicaAcks on a Ring was accepted")
	}
	for _, o := range []Options{{ReplicaAcks: -1}, {ReplicaAcks: 1, ReplicaTimeout: -time.Second}, {ReplicaAcks: 1, ReplicaTimeout: time.Microsecond}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v validated", o)
		}
	}
}

// shardOf is one master of a test cluster with its replica.
type shardOf struct {
	master, replica *testkit.Redis
	chains          []string // chains whose slot the master serves
}

// shards maps the cluster's masters to their replicas (as each node's
// INFO replication says: the gossiped view may lag) and to chains.
func shards(t *testing.T, rc *clustertest.Cluster, chains int) []*shardOf {
	t.Helper()
	ctx := context.Background()
	var out []*shardOf
	byAddr := map[string]*shardOf{}
	replicaOf := map[*testkit.Redis]string{}
	for _, n := range rc.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		info, err := c.Info(ctx, "replication").Result()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "role:master") {
			sh := &shardOf{master: n}
			byAddr[n.Addr] = sh
			out = append(out, sh)
			continue
		}
		replicaOf[n] = infoValue(info, "master_host") + ":" + infoValue(info, "master_port")
	}
	for r, addr := range replicaOf {
		if sh := byAddr[addr]; sh != nil {
			sh.replica = r
		}
	}
	for _, sh := range out {
		if sh.replica == nil {
			t.Fatalf("master %s has no replica", sh.master.Addr)
		}
	}
	for i := 0; ; i++ {
		done := true
		for _, sh := range out {
			done = done && len(sh.chains) >= chains
		}
		if done {
			return out
		}
		c := fmt.Sprintf("agent-%d", i)
		m, err := rc.Client.MasterForKey(ctx, rediskeys.ChainHead(c))
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range out {
			if sh.master.Addr == m.Options().Addr && len(sh.chains) < chains {
				sh.chains = append(sh.chains, c)
			}
		}
	}
}

// On a Redis Cluster the WAIT must run on the connection of each master
// that ran scripts: appends to chains on every master, sent together,
// are acknowledged; with one master's replica gone, that master's appends
// fail after about ReplicaTimeout while the other masters' appends of the
// same moment succeed; with the replica back they succeed again. Appends
// answered MOVED (a failover the client has not seen) or ASK (a slot being
// migrated) are sent again where they belong and acknowledged once
// replicated.
func TestClusterAppendIsAcknowledgedOnlyOnceReplicated(t *testing.T) {
	ctx := context.Background()
	rc := clustertest.StartCluster(t, 3, 1)
	ks := testKeys(t)
	// A slot map that is never re-read on a timer: only MOVED and ASK tell
	// the store where a chain went.
	seeds := make([]string, len(rc.Nodes))
	for i, n := range rc.Nodes {
		seeds[i] = n.Addr
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds, ClusterStateReloadInterval: time.Hour})
	t.Cleanup(func() { _ = cc.Close() })
	s := newStore(t, cc, ks, Options{ReplicaAcks: 1, ReplicaTimeout: replicaTimeout})
	sh := shards(t, rc, 4)
	for _, x := range sh {
		waitReplicas(t, x.master.Addr, 1, readyKey(x.chains[0]))
	}

	appendAll := func(round int) map[string]error {
		var mu sync.Mutex
		errs := map[string]error{}
		var wg sync.WaitGroup
		for _, x := range sh {
			for _, c := range x.chains {
				wg.Go(func() {
					_, err := s.AppendOnce(ctx, attribution.StreamAttribution, c, payload(c, round), nil,
						Request{ID: "r" + strconv.Itoa(round), Fingerprint: "fp"})
					mu.Lock()
					errs[c] = err
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		return errs
	}
	for c, err := range appendAll(0) {
		if err != nil {
			t.Fatalf("append to %s with every replica online: %v", c, err)
		}
	}

	down := sh[0]
	down.replica.Stop()
	start := time.Now()
	errs := appendAll(1)
	took := time.Since(start)
	for _, x := range sh {
		for _, c := range x.chains {
			switch err := errs[c]; {
			case x == down && !errors.Is(err, ErrUnavailable):
				t.Errorf("append to %s, whose master lost its replica: %v, want ErrUnavailable", c, err)
			case x == down && !strings.Contains(err.Error(), "not replicated"):
				t.Errorf("append to %s: %v, want 'not replicated'", c, err)
			case x != down && err != nil:
				t.Errorf("append to %s on a healthy shard: %v", c, err)
			}
		}
	}
	if took < replicaTimeout || took > replicaTimeout+2*time.Second {
		t.Errorf("appends with a replica gone took %v, want about %v", took, replicaTimeout)
	}
	if st := s.Stats(); st.Unreplicated != uint64(len(down.chains)) {
		t.Errorf("stats %+v, want %d unreplicated", st, len(down.chains))
	}
	down.replica.Restart(t)
	waitReplicas(t, down.master.Addr, 1, readyKey(down.chains[0]))
	for c, err := range appendAll(1) { // the same requests again
		if err != nil {
			t.Fatalf("retry to %s with the replica back: %v", c, err)
		}
	}

	// MOVED: the replica of shard 1 takes over (a manual failover), which
	// the store's slot map does not know.
	moved := sh[1]
	promote(t, moved.replica)
	waitReplicas(t, moved.replica.Addr, 1, readyKey(moved.chains[0]))
	for c, err := range appendAll(2) {
		if err != nil {
			t.Fatalf("append to %s after a failover the client had not seen: %v", c, err)
		}
	}

	// ASK: a chain of shard 2 moves to shard 0's master while its slot is
	// migrating.
	src, dst := sh[2].master, sh[0].master
	asked := sh[2].chains[0]
	migrateChain(t, rc, asked, src, dst)
	a, err := s.Append(ctx, attribution.StreamAttribution, asked, payload(asked, 3), nil)
	if err != nil || a.Sequence != 4 {
		t.Fatalf("append to %s during its slot's migration: %v %+v", asked, err, a)
	}
	headKey, _ := keys(attribution.StreamAttribution, asked)
	onDst := redis.NewClient(&redis.Options{Addr: dst.Addr})
	defer onDst.Close()
	var got *redis.StringCmd
	_, _ = onDst.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Do(ctx, "asking")
		got = pl.HGet(ctx, headKey, rediskeys.HeadAuditID)
		return nil
	})
	if got.Val() != a.AuditID {
		t.Fatalf("head of %s on the importing master: %q %v, want %s", asked, got.Val(), got.Err(), a.AuditID)
	}

	for _, x := range sh {
		for _, c := range x.chains {
			r, err := s.Verify(ctx, attribution.StreamAttribution, c, verifyOpts(ks, c), 0)
			if c == asked {
				continue // its slot is half migrated; checked above
			}
			if err != nil || !r.Valid || r.Length != 3 {
				t.Errorf("chain %s: %v %+v, want 3 valid records", c, err, r)
			}
		}
	}
}

// readyKey is a key in chain's slot for waitReplicas.
func readyKey(chain string) string { return "{" + chain + "}:ready" }

// promote makes replica its master's master (CLUSTER FAILOVER) and waits
// until it says so. A manual failover that does not complete in time is
// abandoned by Redis, so it is asked again.
func promote(t *testing.T, replica *testkit.Redis) {
	t.Helper()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer c.Close()
	for attempt := 1; ; attempt++ {
		if err := c.Do(ctx, "cluster", "failover").Err(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(8 * time.Second)
		for time.Now().Before(deadline) {
			if info, err := c.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:master") {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		if attempt == 3 {
			t.Fatalf("%s did not take over from its master", replica.Addr)
		}
	}
}

// migrateChain starts moving chain's slot from src to dst and moves the
// chain's keys, leaving the slot MIGRATING on src and IMPORTING on dst:
// src now answers ASK for the chain.
func migrateChain(t *testing.T, rc *clustertest.Cluster, chain string, src, dst *testkit.Redis) {
	t.Helper()
	ctx := context.Background()
	headKey, streamKey := keys(attribution.StreamAttribution, chain)
	slot := rc.Slot(t, headKey)
	id := func(addr string) string {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		v, err := c.Do(ctx, "cluster", "myid").Text()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	srcID, dstID := id(src.Addr), id(dst.Addr)
	onSrc := redis.NewClient(&redis.Options{Addr: src.Addr})
	defer onSrc.Close()
	onDst := redis.NewClient(&redis.Options{Addr: dst.Addr})
	defer onDst.Close()
	if err := onDst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := onSrc.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(dst.Addr, ":")
	if err := onSrc.Do(ctx, "migrate", host, port, "", 0, 5000, "keys", headKey, streamKey).Err(); err != nil {
		t.Fatal(err)
	}
}
