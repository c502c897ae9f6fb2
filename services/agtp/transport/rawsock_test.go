package transport

import (
	"net"
	"net/netip"
	"testing"

	"github.com/agtpsuite/agtp/services/rawsock"
)

// TestTCPConnectionsUseDirectSocketIO: TLS runs over a rawsock connection
// (docs/performance.md, "Direct socket I/O"), while the server keeps the
// *net.TCPConn itself for what needs it (a reset on refusal).
func TestTCPConnectionsUseDirectSocketIO(t *testing.T) {
	ts := startServer(t, Options{}, echo())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := ts.newTCPConn(nc, netip.MustParseAddr("127.0.0.1"))
	if _, ok := c.tc.NetConn().(*rawsock.Conn); !ok {
		t.Errorf("TLS runs over %T, want *rawsock.Conn", c.tc.NetConn())
	}
	if c.raw != nc {
		t.Errorf("the server kept %T, not the accepted connection", c.raw)
	}
}
