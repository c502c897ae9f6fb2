//go:build !unix

package client

import "net"

// connChecker cannot peek at a socket here; the retry rule for
// ErrNoResponse covers connections the server closed while idle.
type connChecker struct{}

func (*connChecker) init(net.Conn) {}

func (*connChecker) alive() error { return nil }
