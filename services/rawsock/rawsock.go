// Package rawsock makes a TCP connection's reads and writes with direct
// system calls on its non-blocking socket, so that the goroutine keeps its
// processor (P) for the call.
//
// Go's ordinary path (net.Conn over internal/poll) enters the scheduler's
// system-call state for every read and write. When a call lasts longer
// than the runtime's monitor thread polls (20 µs), the monitor hands the
// P to another thread, and the caller's thread must win a P back, or
// park, when the call returns: two or more thread switches for a call
// that could not block in the first place. On a virtual machine, where a
// loopback write that wakes its reader often lasts that long and every
// thread switch is paid to the hypervisor, this was most of the suite's
// context switches at one P per service (docs/performance.md, "Direct
// socket I/O"). A non-blocking socket's read or write returns at once,
// with data or EAGAIN, so holding the P for it takes nothing from the
// other goroutines that the hand-off would have given them; when the
// socket is not ready the goroutine waits in the network poller as
// always, deadlines included.
package rawsock

import (
	"context"
	"net"
	"sync/atomic"
)

var disabled atomic.Bool

// Disable makes Wrap return connections unchanged from now on, for the
// whole process: a switch for the operator who wants the runtime's
// ordinary path back (kit.Common.RuntimeSocketIO).
func Disable() { disabled.Store(true) }

// enabled reports whether Wrap wraps.
func enabled() bool { return supported && !disabled.Load() }

// Wrap returns c reading and writing with direct system calls when it is
// a *net.TCPConn on a system where that is supported, else c itself. The
// result still offers every method of *net.TCPConn except by type
// assertion; code that needs the *net.TCPConn must keep its own
// reference.
func Wrap(c net.Conn) net.Conn {
	if !enabled() {
		return c
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return newConn(tc, rc)
}

// Listen returns ln with every accepted connection wrapped (Wrap).
func Listen(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

// Dialer dials TCP with d and wraps the connection (Wrap).
func Dialer(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Wrap(c), nil
	}
}
