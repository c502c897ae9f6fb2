package addrlimit

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestKeyGroupsIPv6By64(t *testing.T) {
	tests := []struct {
		name string
		addr net.Addr
		want string // "" = not limited
	}{
		{"ipv4", &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}, "192.0.2.7"},
		{"ipv4-mapped ipv6 is the ipv4 address", &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}, "192.0.2.7"},
		{"ipv6 keyed by its /64", &net.UDPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), Port: 1}, "2001:db8:1:2::"},
		{"another host of the same /64", &net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::1"), Port: 9}, "2001:db8:1:2::"},
		{"a different /64", &net.TCPAddr{IP: net.ParseIP("2001:db8:1:3::1"), Port: 9}, "2001:db8:1:3::"},
		{"not an IP address", &net.UnixAddr{Name: "/tmp/x", Net: "unix"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Key(tt.addr)
			if tt.want == "" {
				if ok {
					t.Fatalf("Key = %v, want not limited", got)
				}
				return
			}
			if !ok || got != netip.MustParseAddr(tt.want) {
				t.Fatalf("Key = %v %v, want %s", got, ok, tt.want)
			}
		})
	}
}

func TestCounterCountsAndReleases(t *testing.T) {
	p := NewCounter(2)
	a := &net.TCPAddr{IP: net.ParseIP("192.0.2.1")}
	b := &net.TCPAddr{IP: net.ParseIP("192.0.2.2")}
	k1, ok1 := p.Acquire(a)
	_, ok2 := p.Acquire(a)
	_, ok3 := p.Acquire(a)
	_, okB := p.Acquire(b)
	if !ok1 || !ok2 || ok3 || !okB {
		t.Fatalf("acquire a,a,a,b = %v %v %v %v, want true true false true", ok1, ok2, ok3, okB)
	}
	p.Release(k1)
	if _, ok := p.Acquire(a); !ok {
		t.Fatal("a released slot was not reusable")
	}
	if _, ok := NewCounter(-1).Acquire(a); !ok {
		t.Fatal("a negative limit must not limit")
	}
}

// A source past its count is closed at once; the others are accepted, and
// a closed connection gives its place back.
func TestListenerClosesWhatASourceHoldsPastItsCount(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Listener(inner, 2)
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closedByServer reports whether the server closed c (EOF) rather
	// than holding it open.
	closedByServer := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		ne, isNet := err.(net.Error)
		return err != nil && !(isNet && ne.Timeout())
	}
	dial()
	dial()
	first, second := <-accepted, <-accepted
	third := dial()
	if !closedByServer(third) {
		t.Fatal("a third connection from the source was held open")
	}
	first.Close()
	time.Sleep(50 * time.Millisecond)
	fourth := dial()
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("the place a closed connection gave back was not given to the next")
	}
	if closedByServer(fourth) {
		t.Fatal("the connection in the freed place was closed")
	}
	second.Close()
}
