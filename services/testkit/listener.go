package testkit

import (
	"net"
	"sync/atomic"
	"testing"
)

// CountingListener accepts TCP connections on a loopback port, closes each
// at once and counts them, until cleanup: the address a test points a
// dialer at to see whether (and how often) it dialed.
func CountingListener(tb testing.TB) (addr string, accepted *atomic.Int32) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	accepted = &atomic.Int32{}
	go closeAccepted(ln, accepted)
	tb.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String(), accepted
}

// closeAccepted closes each connection ln accepts at once, counting them
// in accepted when it is not nil, until ln is closed.
func closeAccepted(ln net.Listener, accepted *atomic.Int32) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if accepted != nil {
			accepted.Add(1)
		}
		_ = c.Close()
	}
}
