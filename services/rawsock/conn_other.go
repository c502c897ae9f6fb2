//go:build !linux

package rawsock

import (
	"net"
	"syscall"
)

// Direct calls are implemented for Linux only; elsewhere Wrap returns its
// connection unchanged.
const supported = false

func newConn(tc *net.TCPConn, _ syscall.RawConn) net.Conn { return tc }
