package testkit

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestLaunchRefusesAnotherServersPort: a server that cannot bind its port
// because another one holds it is reported as such, not mistaken for the
// one answering there.
func TestLaunchRefusesAnotherServersPort(t *testing.T) {
	first := StartRedis(t)
	_, port, _ := net.SplitHostPort(first.Addr)
	second := &Redis{Dir: t.TempDir(), bin: first.bin, Addr: first.Addr,
		args: []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--dir", t.TempDir()}}
	t.Cleanup(second.kill)
	err := second.launch()
	if err == nil {
		t.Fatal("a second server on a taken port was taken for started")
	}
	if !strings.Contains(err.Error(), "exited at start") && !strings.Contains(err.Error(), "another server's") {
		t.Fatalf("error %v does not say why", err)
	}
	if pid, ok := serverPID(first.Addr); !ok || pid != first.cmd.Process.Pid {
		t.Fatalf("the first server is gone (pid %d, %v)", pid, ok)
	}
}

// TestClusterNodesGetAFreeBusPort: a cluster-enabled server's bus port
// (port + 10000) is below the ephemeral range, where outgoing connections
// cannot take it.
func TestClusterNodesGetAFreeBusPort(t *testing.T) {
	r := StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	_, p, _ := net.SplitHostPort(r.Addr)
	port, _ := strconv.Atoi(p)
	if bus := port + clusterBusOffset; bus >= ephemeralLow() {
		t.Fatalf("bus port %d is in the ephemeral range (from %d)", bus, ephemeralLow())
	}
	if pid, ok := serverPID(r.Addr); !ok || pid != r.cmd.Process.Pid {
		t.Fatalf("the cluster node does not answer as itself (pid %d, %v)", pid, ok)
	}
}

// TestStoppedServersPortStaysDead: once stopped, a server's port cannot
// be taken by another server (another test process picking it), so its
// clients keep failing until Restart brings this one back.
func TestStoppedServersPortStaysDead(t *testing.T) {
	ctx := context.Background()
	r := StartRedis(t)
	c := r.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	intruder := &Redis{Dir: t.TempDir(), bin: r.bin, Addr: r.Addr, args: append([]string(nil), r.args...)}
	t.Cleanup(intruder.kill)
	if err := intruder.launch(); err == nil {
		t.Fatal("another server started on a stopped server's port")
	}
	for range 3 {
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("a stopped server's port answered PING")
		}
	}
	r.Restart(t)
	if pid, ok := serverPID(r.Addr); !ok || pid != r.cmd.Process.Pid {
		t.Fatalf("after Restart the port is not the restarted server's (pid %d, %v)", pid, ok)
	}
	if err := r.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}
