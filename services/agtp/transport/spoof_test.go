package transport

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// initialCatcher is a client packet conn that hands the first datagram
// quic-go writes (a client Initial) to the test and sends nothing.
type initialCatcher struct {
	*net.UDPConn
	first  chan []byte
	once   sync.Once
	closed chan struct{}
}

func (c *initialCatcher) ReadMsgUDP() {} // hides the embedded method: plain ReadFrom/WriteTo

func (c *initialCatcher) ReadFrom([]byte) (int, net.Addr, error) {
	<-c.closed
	return 0, nil, net.ErrClosed
}

func (c *initialCatcher) WriteTo(p []byte, _ net.Addr) (int, error) {
	select {
	case c.first <- append([]byte(nil), p...):
	default:
	}
	return len(p), nil
}

func (c *initialCatcher) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.UDPConn.Close()
}

// clientInitial returns a fresh client Initial datagram for ts (a new
// connection ID each time), without sending it.
func clientInitial(t *testing.T, ts *testServer) []byte {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.9")})
	if err != nil {
		t.Fatal(err)
	}
	c := &initialCatcher{UDPConn: udp, first: make(chan []byte, 1), closed: make(chan struct{})}
	tr := &quic.Transport{Conn: c}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	addr, _ := net.ResolveUDPAddr("udp", ts.QUICAddr().String())
	go func() {
		defer close(done)
		if qc, err := tr.Dial(ctx, addr, ts.certs.clientTLS(), &quic.Config{}); err == nil {
			qc.CloseWithError(0, "")
		}
	}()
	defer func() { cancel(); <-done; c.Close(); tr.Close() }()
	select {
	case b := <-c.first:
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("no client Initial written")
		return nil
	}
}

// sendSpoofed sends payload in a UDP datagram whose IPv4 source is src,
// through a raw socket: what any host that can spoof source addresses
// can do.
func sendSpoofed(t *testing.T, src net.IP, sport int, dst *net.UDPAddr, payload []byte) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
	if err != nil {
		t.Skipf("raw socket (needs CAP_NET_RAW): %v", err)
	}
	defer syscall.Close(fd)
	pkt := make([]byte, 28+len(payload))
	pkt[0] = 0x45
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	pkt[8] = 64
	pkt[9] = syscall.IPPROTO_UDP
	copy(pkt[12:16], src.To4())
	copy(pkt[16:20], dst.IP.To4())
	binary.BigEndian.PutUint16(pkt[20:], uint16(sport))
	binary.BigEndian.PutUint16(pkt[22:], uint16(dst.Port))
	binary.BigEndian.PutUint16(pkt[24:], uint16(8+len(payload)))
	copy(pkt[28:], payload) // UDP checksum 0: none, allowed over IPv4
	var to syscall.SockaddrInet4
	copy(to.Addr[:], dst.IP.To4())
	if err := syscall.Sendto(fd, pkt, 0, &to); err != nil {
		t.Fatalf("sendto: %v", err)
	}
}

// MaxConnsPerIP keeps one host from taking the slots other clients need,
// and only a host: a QUIC attempt counts against the address its first
// Initial names once the handshake or a Retry proved it, so a third
// party's Initials spoofing a victim's address take none of the victim's
// slots, on TCP or QUIC.
func TestSpoofedQUICInitialsTakeNoSlotOfTheAddressTheyName(t *testing.T) {
	ts := startServer(t, Options{MaxConnsPerIP: 2, HandshakeTimeout: 30 * time.Second}, echo())
	dst, _ := net.ResolveUDPAddr("udp", ts.QUICAddr().String())
	victim := net.ParseIP("127.0.0.1")
	for i := range 2 {
		// Sent from 127.0.0.9's Initials, with 127.0.0.1 written as the
		// source; the server's answers go to a port nobody reads.
		sendSpoofed(t, victim, 40000+i, dst, clientInitial(t, ts))
	}
	waitFor(t, "the spoofed attempts in the handshake backlog", func() bool { return ts.Stats().Handshakes == 2 })

	c, err := ts.dialFrom("127.0.0.1")
	if err != nil {
		t.Fatalf("the victim, which holds no connection, is refused after two spoofed QUIC Initials: %v (PerIPRefused=%d)",
			err, ts.Stats().PerIPRefused)
	}
	defer c.Close()
	if resp := newClient(c).roundTrip(t, "QUERY", "/x"); resp.Status != 200 {
		t.Fatalf("victim got %d", resp.Status)
	}
}
