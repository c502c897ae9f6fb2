//go:build unix

package client

import (
	"errors"
	"io"
	"net"
	"syscall"
)

var errUnexpectedRead = errors.New("unexpected read from an idle connection")

// connCheck reports whether an idle connection is still open, with one
// non-blocking read of its socket: EOF means the server closed it; any
// byte (a TLS close_notify, or anything else no request asked for) means
// it must not be used either. It costs one system call per reuse, much
// less than a goroutine watching every idle connection.
func connCheck(nc net.Conn) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var checkErr error
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, err := syscall.Read(int(fd), b[:])
		switch {
		case n == 0 && err == nil:
			checkErr = io.EOF
		case n > 0:
			checkErr = errUnexpectedRead
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			checkErr = nil
		default:
			checkErr = err
		}
		return true
	})
	if err != nil {
		return err
	}
	return checkErr
}
