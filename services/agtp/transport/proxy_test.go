package transport

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// handshakeDelayProxy relays UDP between QUIC clients and a server so that
// the server reads a client's 0-RTT request while its handshake is still
// incomplete, however the goroutines are scheduled:
//   - server datagrams reach the client delay/2 late, so the client cannot
//     complete its handshake (and switch to 1-RTT) before it has written
//     the request into 0-RTT packets;
//   - from the first client datagram that carries a Handshake packet on
//     (the client's Finished), the client's datagrams reach the server
//     delay late, while Initial and 0-RTT packets before it pass at once.
//
// QUIC version 1 only.
type handshakeDelayProxy struct {
	pc     *net.UDPConn
	server *net.UDPAddr
	delay  time.Duration
	mu     sync.Mutex
	peers  map[string]*proxyPeer
	wg     sync.WaitGroup
}

type proxyPeer struct {
	client   *net.UDPAddr
	up       *net.UDPConn
	delaying atomic.Bool
}

func newHandshakeDelayProxy(t *testing.T, server *net.UDPAddr, delay time.Duration) *handshakeDelayProxy {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &handshakeDelayProxy{pc: pc, server: server, delay: delay, peers: map[string]*proxyPeer{}}
	p.wg.Go(p.run)
	t.Cleanup(func() {
		pc.Close()
		p.mu.Lock()
		for _, peer := range p.peers {
			peer.up.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *handshakeDelayProxy) addr() net.Addr { return p.pc.LocalAddr() }

func (p *handshakeDelayProxy) run() {
	buf := make([]byte, 65536)
	for {
		n, from, err := p.pc.ReadFromUDP(buf)
		if err != nil {
			return
		}
		peer, err := p.peer(from)
		if err != nil {
			return
		}
		b := append([]byte(nil), buf[:n]...)
		if peer.delaying.Load() || hasHandshakePacket(b) {
			peer.delaying.Store(true)
			time.AfterFunc(p.delay, func() { peer.up.Write(b) })
			continue
		}
		peer.up.Write(b)
	}
}

func (p *handshakeDelayProxy) peer(from *net.UDPAddr) (*proxyPeer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if peer, ok := p.peers[from.String()]; ok {
		return peer, nil
	}
	up, err := net.DialUDP("udp", nil, p.server)
	if err != nil {
		return nil, err
	}
	peer := &proxyPeer{client: from, up: up}
	p.peers[from.String()] = peer
	p.wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			b := append([]byte(nil), buf[:n]...)
			time.AfterFunc(p.delay/2, func() { p.pc.WriteToUDP(b, peer.client) })
		}
	})
	return peer, nil
}

// hasHandshakePacket walks the coalesced QUIC v1 packets of a datagram
// (RFC 9000 §12.2, §17.2) and reports whether one is a Handshake packet.
func hasHandshakePacket(b []byte) bool {
	for len(b) > 0 {
		if b[0]&0x80 == 0 {
			return false // short header: 1-RTT, runs to the end
		}
		typ := b[0] & 0x30 >> 4
		if typ == 2 {
			return true
		}
		i := 5 // first byte, version
		if len(b) <= i {
			return false
		}
		i += 1 + int(b[i]) // destination connection ID
		if len(b) <= i {
			return false
		}
		i += 1 + int(b[i]) // source connection ID
		if typ == 0 {      // Initial: token
			l, n := quicVarint(b[i:])
			i += n + int(l)
		}
		l, n := quicVarint(b[i:])
		i += n + int(l)
		if n == 0 || i > len(b) {
			return false
		}
		b = b[i:]
	}
	return false
}

func quicVarint(b []byte) (uint64, int) {
	if len(b) == 0 {
		return 0, 0
	}
	n := 1 << (b[0] >> 6)
	if len(b) < n {
		return 0, 0
	}
	v := uint64(b[0] & 0x3f)
	for _, c := range b[1:n] {
		v = v<<8 | uint64(c)
	}
	return v, n
}
