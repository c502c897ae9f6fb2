// Package clustertest runs the suite against a real Redis Cluster on
// loopback (Debian's redis-server and redis-cli): three masters with one
// replica each, cluster-enabled redis-server processes joined by
// `redis-cli --cluster create`. Its test kills a master under load, at an
// arbitrary moment, and checks that the suite, as separate processes and
// with two replicas of every service, keeps its guarantees across the
// failover.
//
// StartCluster is exported for other tests that need a cluster.
package clustertest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// NodeTimeout is the cluster-node-timeout of the test cluster: a master
// that has not answered for this long is marked failed and its replica
// takes over about a second later.
const NodeTimeout = 1500 * time.Millisecond

// Cluster is a running Redis Cluster of loopback redis-server processes.
type Cluster struct {
	Nodes  []*testkit.Redis
	Client *redis.ClusterClient
}

// StartCluster starts masters*(1+replicas) cluster-enabled redis-server
// processes, creates the cluster with redis-cli, and waits until every
// node reports cluster_state:ok and every master has its replicas online.
func StartCluster(tb testing.TB, masters, replicas int) *Cluster {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		tb.Fatalf("redis-cli is not installed (Debian package redis-tools, a dependency of redis-server): %v", err)
	}
	c := &Cluster{}
	var addrs []string
	for range masters * (1 + replicas) {
		n := testkit.StartRedis(tb,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(NodeTimeout.Milliseconds(), 10),
			// Agents on healthy shards keep being served while one shard
			// fails over (the setting the deployment docs recommend).
			"--cluster-require-full-coverage", "no",
			// Replicas sync at once instead of waiting 5 s for company.
			"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
		)
		c.Nodes = append(c.Nodes, n)
		addrs = append(addrs, n.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.Client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ClusterStateReloadInterval: kit.ClusterStateReloadInterval})
	tb.Cleanup(func() { _ = c.Client.Close() })
	testkit.WaitFor(tb, 30*time.Second, "cluster_state:ok with every replica online", func() bool {
		return c.healthy(c.Nodes, masters*(1+replicas), replicas)
	})
	c.Client.ReloadState(context.Background())
	return c
}

// URL is the redis+cluster:// URL of the cluster (kit.NewRedis), with
// every node as a seed so that any one of them may be down at start.
func (c *Cluster) URL() string {
	var b strings.Builder
	b.WriteString("redis+cluster://" + c.Nodes[0].Addr)
	for i, n := range c.Nodes[1:] {
		if i == 0 {
			b.WriteString("?")
		} else {
			b.WriteString("&")
		}
		b.WriteString("addr=" + n.Addr)
	}
	return b.String()
}

// Node is one line of CLUSTER NODES.
type Node struct {
	ID, Addr, MasterID string
	Master, Failed     bool
	Slots              [][2]int
}

// Owns reports whether the node serves slot.
func (n Node) Owns(slot int) bool {
	for _, r := range n.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// Topology reads CLUSTER NODES from the node at addr.
func Topology(ctx context.Context, addr string) ([]Node, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	text, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	return parseNodes(text)
}

func parseNodes(text string) ([]Node, error) {
	var out []Node
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("cluster nodes line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := Node{ID: f[0], Addr: addr, MasterID: f[3]}
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "master":
				n.Master = true
			case "fail", "fail?":
				n.Failed = true
			}
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being migrated
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("cluster nodes slot %q", s)
			}
			n.Slots = append(n.Slots, [2]int{a, b})
		}
		out = append(out, n)
	}
	return out, nil
}

// healthy reports whether every live node sees cluster_state:ok and all
// known nodes, and every master serving slots has its replicas online.
func (c *Cluster) healthy(live []*testkit.Redis, known, replicas int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, n := range live {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		info, err := cl.ClusterInfo(ctx).Result()
		_ = cl.Close()
		if err != nil || infoField(info, "cluster_state") != "ok" || infoField(info, "cluster_known_nodes") != strconv.Itoa(known) {
			return false
		}
	}
	nodes, err := Topology(ctx, live[0].Addr)
	if err != nil {
		return false
	}
	for _, n := range nodes {
		if !n.Master || len(n.Slots) == 0 {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		repl, err := cl.Info(ctx, "replication").Result()
		_ = cl.Close()
		if err != nil || infoField(repl, "connected_slaves") != strconv.Itoa(replicas) || strings.Count(repl, "state=online") != replicas {
			return false
		}
	}
	return true
}

// Slot is the hash slot of key, as the cluster computes it.
func (c *Cluster) Slot(tb testing.TB, key string) int {
	tb.Helper()
	s, err := c.Client.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		tb.Fatalf("cluster keyslot %s: %v", key, err)
	}
	return int(s)
}

// MasterOf returns the node serving slot.
func (c *Cluster) MasterOf(tb testing.TB, slot int) *testkit.Redis {
	tb.Helper()
	for _, live := range c.Nodes {
		nodes, err := Topology(context.Background(), live.Addr)
		if err != nil {
			continue
		}
		for _, n := range nodes {
			if n.Master && !n.Failed && n.Owns(slot) {
				return c.node(tb, n.Addr)
			}
		}
	}
	tb.Fatalf("no master serves slot %d", slot)
	return nil
}

func (c *Cluster) node(tb testing.TB, addr string) *testkit.Redis {
	tb.Helper()
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	tb.Fatalf("cluster node %s is not one of ours", addr)
	return nil
}

// CutReplicas cuts master off from its replicas, as a network fault
// between them would: it refuses the replication handshake (an ACL on the
// default user, which the services' commands do not need) and closes the
// replication links (CLIENT KILL TYPE replica). From then on the master
// applies writes that no replica has, the ones a crash loses with it. It
// is meant for a master about to be killed: restarted (Rejoin), the node
// starts with the default ACL again.
func (c *Cluster) CutReplicas(tb testing.TB, master *testkit.Redis) {
	tb.Helper()
	ctx := context.Background()
	cl := redis.NewClient(&redis.Options{Addr: master.Addr, MaxRetries: -1})
	defer cl.Close()
	if err := cl.Do(ctx, "acl", "setuser", "default", "-sync", "-psync", "-replconf").Err(); err != nil {
		tb.Fatalf("refuse replication on %s: %v", master.Addr, err)
	}
	if err := cl.Do(ctx, "client", "kill", "type", "replica").Err(); err != nil {
		tb.Fatalf("cut the replication links of %s: %v", master.Addr, err)
	}
}

// Rejoin starts dead, a master that was killed and whose promoted replica
// took over, again on its port and directory. Its nodes.conf names it a
// master of slots the cluster gave to promoted with a newer epoch, so the
// cluster turns it into promoted's replica (it has no data of its own:
// the test cluster runs without persistence) and it syncs from promoted.
// Rejoin waits until promoted has it online and acknowledging writes (a
// write and a WAIT on one connection count it), which a shard whose
// writes wait for a replica (min-replicas-to-write, AGTP_AUDIT_REPLICA_ACKS)
// needs before it accepts them again.
func (c *Cluster) Rejoin(tb testing.TB, dead, promoted *testkit.Redis, timeout time.Duration) {
	tb.Helper()
	ctx := context.Background()
	// Started again, it believes for a moment that it still serves its
	// slots, until the cluster tells it otherwise, and would take writes
	// (an idempotency claim of a client whose slot map is a second old)
	// that its demotion then discards. A master that needs a replica to
	// take writes takes none (deploy/k8s/redis-cluster/redis.conf sets
	// this on every node; the test cluster leaves it off elsewhere, so
	// that a master cut off from its replica goes on acknowledging, which
	// is what replica acks must not be fooled by).
	dead.RestartWith(tb, "--min-replicas-to-write", "1", "--min-replicas-max-lag", "10")
	cl := redis.NewClient(&redis.Options{Addr: promoted.Addr, MaxRetries: -1, PoolSize: 1})
	defer cl.Close()
	testkit.WaitFor(tb, timeout, dead.Addr+" to rejoin as the replica of "+promoted.Addr, func() bool {
		info, err := cl.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "port="+dead.Addr[strings.LastIndex(dead.Addr, ":")+1:]+",state=online") {
			return false
		}
		// A key promoted serves: most candidates are answered MOVED.
		for i := range 64 {
			var set *redis.StatusCmd
			var wait *redis.Cmd
			_, _ = cl.Pipelined(ctx, func(pl redis.Pipeliner) error {
				set = pl.Set(ctx, fmt.Sprintf("{rejoin-%d}", i), "1", time.Minute)
				wait = pl.Do(ctx, "wait", 1, 100)
				return nil
			})
			if set.Err() == nil {
				n, err := wait.Int64()
				return err == nil && n >= 1
			}
		}
		return false
	})
}

// WaitFailover waits until a node other than dead serves slot as master
// and every live node reports cluster_state:ok.
func (c *Cluster) WaitFailover(tb testing.TB, dead *testkit.Redis, slot int, timeout time.Duration) *testkit.Redis {
	tb.Helper()
	var live []*testkit.Redis
	for _, n := range c.Nodes {
		if n != dead {
			live = append(live, n)
		}
	}
	var promoted *testkit.Redis
	testkit.WaitFor(tb, timeout, fmt.Sprintf("a replica to take over slot %d from %s", slot, dead.Addr), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for _, n := range live {
			nodes, err := Topology(ctx, n.Addr)
			if err != nil {
				return false
			}
			owner := ""
			for _, nd := range nodes {
				if nd.Master && !nd.Failed && nd.Owns(slot) {
					owner = nd.Addr
				}
			}
			if owner == "" || owner == dead.Addr {
				return false
			}
			promoted = c.node(tb, owner)
			cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
			info, err := cl.ClusterInfo(ctx).Result()
			_ = cl.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	c.Client.ReloadState(context.Background())
	return promoted
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}
