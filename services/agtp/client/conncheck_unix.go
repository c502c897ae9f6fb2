//go:build unix

package client

import (
	"errors"
	"io"
	"net"
	"syscall"
)

var errUnexpectedRead = errors.New("unexpected read from an idle connection")

// connChecker tells whether an idle connection is still open, with one
// non-blocking read of its socket: EOF means the server closed it; any
// byte (a TLS close_notify, or anything else no request asked for) means
// it must not be used either. It costs one system call per reuse, much
// less than a goroutine watching every idle connection. The raw
// connection and the callback are made once per connection, so a check
// does not allocate.
type connChecker struct {
	raw syscall.RawConn
	fn  func(fd uintptr) bool
	err error
}

func (k *connChecker) init(nc net.Conn) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	k.raw = raw
	k.fn = k.read
}

func (k *connChecker) read(fd uintptr) bool {
	var b [1]byte
	n, err := syscall.Read(int(fd), b[:])
	switch {
	case n == 0 && err == nil:
		k.err = io.EOF
	case n > 0:
		k.err = errUnexpectedRead
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		k.err = nil
	default:
		k.err = err
	}
	return true // never wait for readiness
}

// alive must not run concurrently with a read of the connection.
func (k *connChecker) alive() error {
	if k.raw == nil {
		return nil
	}
	if err := k.raw.Read(k.fn); err != nil {
		return err
	}
	return k.err
}
