// Package addrlimit bounds the connections one client source holds: an
// IPv4 address, or an IPv6 /64. The AGTP transports and the public HTTPS
// listener count them the same way.
package addrlimit

import (
	"net"
	"net/netip"
	"sync"
)

// Key is the source a per-address connection count is kept for: the
// IPv4 address, or the /64 prefix of an IPv6 address (a single host is
// routinely given a whole /64, so counting its addresses one by one would
// not limit it).
func Key(a net.Addr) (netip.Addr, bool) {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		return netip.Addr{}, false
	}
	ip := ap.Addr().Unmap()
	if !ip.IsValid() {
		return netip.Addr{}, false
	}
	if ip.Is6() {
		p, err := ip.Prefix(64)
		if err != nil {
			return netip.Addr{}, false
		}
		ip = p.Addr()
	}
	return ip, true
}

// Counter counts open connections per source (Key), up to a maximum.
type Counter struct {
	max int // <= 0: no limit
	mu  sync.Mutex
	n   map[netip.Addr]int
}

// NewCounter counts up to max connections per source; max <= 0 limits
// nothing.
func NewCounter(max int) *Counter { return &Counter{max: max, n: make(map[netip.Addr]int)} }

// Acquire counts a connection from a, or reports that a already has max.
// Addresses that are not IP (never seen in practice) are not limited.
func (p *Counter) Acquire(a net.Addr) (key netip.Addr, ok bool) {
	key, valid := Key(a)
	if p.max <= 0 || !valid {
		return netip.Addr{}, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[key] >= p.max {
		return netip.Addr{}, false
	}
	p.n[key]++
	return key, true
}

// Full reports whether a already holds the maximum, so that Acquire
// would refuse it.
func (p *Counter) Full(a net.Addr) bool {
	key, valid := Key(a)
	if p.max <= 0 || !valid {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[key] >= p.max
}

// Release gives back what Acquire counted; the zero key is a no-op.
func (p *Counter) Release(key netip.Addr) {
	if !key.IsValid() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[key] <= 1 {
		delete(p.n, key)
		return
	}
	p.n[key]--
}

// Listener wraps ln so that a connection accepted from a source that
// already holds max is closed at once, before any handshake; max <= 0
// limits nothing.
func Listener(ln net.Listener, max int) net.Listener {
	if max <= 0 {
		return ln
	}
	return &listener{Listener: ln, count: NewCounter(max)}
}

type listener struct {
	net.Listener
	count *Counter
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, ok := l.count.Acquire(c.RemoteAddr())
		if !ok {
			c.Close()
			continue
		}
		return &conn{Conn: c, release: func() { l.count.Release(key) }}, nil
	}
}

// conn gives its source's count back once, on its first Close.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
