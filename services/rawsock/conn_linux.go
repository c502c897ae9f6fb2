package rawsock

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

const supported = true

// Conn is a TCP connection whose Read and Write make the read(2) and
// write(2) calls themselves, inside the poller's RawRead and RawWrite, so
// that the poller's locking, readiness waits and deadlines still apply.
//
// The poller runs a callback, and a closure made per call would escape
// through syscall.RawConn: allocations on every read and write. So each
// direction has one callback, made with the connection, and a call's
// buffer and result travel in that direction's fields, which its mutex
// keeps to one call at a time, as the poller's own lock of that direction
// would.
type Conn struct {
	*net.TCPConn
	raw syscall.RawConn

	readMu  sync.Mutex
	read    call
	onRead  func(fd uintptr) bool
	writeMu sync.Mutex
	write   call
	onWrite func(fd uintptr) bool
	peekMu  sync.Mutex
	peeked  syscall.Errno // what the last peek's recv returned
	onPeek  func(fd uintptr)
}

// call is one read or write: the caller's buffer, and what the system
// call returned.
type call struct {
	p     []byte
	n     int
	errno syscall.Errno
}

func newConn(tc *net.TCPConn, rc syscall.RawConn) net.Conn {
	c := &Conn{TCPConn: tc, raw: rc}
	c.onRead, c.onWrite, c.onPeek = c.readReady, c.writeReady, c.peekReady
	return c
}

// Read reads like net.TCPConn.Read.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.readMu.Lock()
	c.read = call{p: p}
	err := c.raw.Read(c.onRead)
	n, errno := c.read.n, c.read.errno
	c.read = call{} // the caller's buffer is not the connection's to keep
	c.readMu.Unlock()
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readReady is Read's callback: one read(2) into c.read.p, or false
// (wait in the poller) when nothing is ready.
func (c *Conn) readReady(fd uintptr) bool {
	p := c.read.p
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // not ready: wait in the poller
		}
		n := int(r) // -1 with an errno
		c.read.n, c.read.errno = n, e
		if n > 0 {
			raceAfterRead(fd, p[:n])
		}
		return true
	}
}

// Write writes like net.TCPConn.Write: all of p, or an error.
func (c *Conn) Write(p []byte) (int, error) {
	c.writeMu.Lock()
	c.write = call{p: p}
	err := c.raw.Write(c.onWrite)
	written, errno := c.write.n, c.write.errno
	c.write = call{}
	c.writeMu.Unlock()
	switch {
	case err != nil:
		return written, c.opError("write", err)
	case errno != 0:
		return written, c.opError("write", os.NewSyscallError("write", errno))
	}
	return written, nil
}

// writeReady is Write's callback: write(2) until all of c.write.p is
// written, or false (wait in the poller, then go on where it stopped)
// when the send buffer is full.
func (c *Conn) writeReady(fd uintptr) bool {
	p := c.write.p
	for c.write.n < len(p) {
		rest := p[c.write.n:]
		raceBeforeWrite(fd)
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
		switch e {
		case 0:
			raceAfterWrite(rest[:r])
			c.write.n += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // the send buffer is full: wait in the poller
		default:
			c.write.errno = e
			return true
		}
	}
	return true
}

// Pending reports whether a read would return at once: data, the end of
// the stream or an error is waiting on the socket. It peeks with a direct
// recv(MSG_PEEK|MSG_DONTWAIT), which consumes nothing and keeps the
// caller's processor, so a connection pool can ask it before it lends a
// connection without entering the scheduler's system-call state. A
// connection that is closed on this side is pending: a read returns its
// error at once. It has its own lock, so it answers at once even while a
// Read waits.
func (c *Conn) Pending() bool {
	c.peekMu.Lock()
	defer c.peekMu.Unlock()
	if err := c.raw.Control(c.onPeek); err != nil {
		return true
	}
	return c.peeked != syscall.EAGAIN
}

// peekReady is Pending's callback.
func (c *Conn) peekReady(fd uintptr) {
	var b [1]byte
	for {
		_, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if errno != syscall.EINTR {
			c.peeked = errno
			return
		}
	}
}

// opError is the error net.TCPConn would return.
func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
