package rawsock

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

const supported = true

// Conn is a TCP connection whose Read and Write make the read(2) and
// write(2) calls themselves, inside the poller's RawRead and RawWrite, so
// that the poller's locking, readiness waits and deadlines still apply.
type Conn struct {
	*net.TCPConn
	raw syscall.RawConn
}

func newConn(tc *net.TCPConn, rc syscall.RawConn) net.Conn { return &Conn{TCPConn: tc, raw: rc} }

// Read reads like net.TCPConn.Read.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // not ready: wait in the poller
			}
			n, errno = int(r), e
			if n > 0 {
				raceAfterRead(fd, p[:n])
			}
			return true
		}
	})
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

// Write writes like net.TCPConn.Write: all of p, or an error.
func (c *Conn) Write(p []byte) (int, error) {
	written := 0
	var errno syscall.Errno
	err := c.raw.Write(func(fd uintptr) bool {
		for written < len(p) {
			rest := p[written:]
			raceBeforeWrite(fd)
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
			switch e {
			case 0:
				raceAfterWrite(rest[:r])
				written += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // the send buffer is full: wait in the poller
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return written, c.opError("write", err)
	case errno != 0:
		return written, c.opError("write", os.NewSyscallError("write", errno))
	}
	return written, nil
}

// Pending reports whether a read would return at once: data, the end of
// the stream or an error is waiting on the socket. It peeks with a direct
// recv(MSG_PEEK|MSG_DONTWAIT), which consumes nothing and keeps the
// caller's processor, so a connection pool can ask it before it lends a
// connection without entering the scheduler's system-call state. A
// connection that is closed on this side is pending: a read returns its
// error at once.
func (c *Conn) Pending() bool {
	var b [1]byte
	var errno syscall.Errno
	if err := c.raw.Control(func(fd uintptr) {
		for {
			_, _, errno = syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
				syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
			if errno != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return true
	}
	return errno != syscall.EAGAIN
}

// opError is the error net.TCPConn would return.
func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
