package rawsock

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/agtpsuite/agtp/services/testkit"
)

// pair returns both ends of a loopback TCP connection, each wrapped.
func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	client, server = loopback(t, true)
	for _, c := range []net.Conn{client, server} {
		if _, ok := c.(*Conn); !ok {
			t.Fatalf("%T is not wrapped", c)
		}
	}
	return client, server
}

// loopback returns both ends of a loopback TCP connection, wrapped (Listen
// and Dialer) or as the runtime makes them, closed at the end of tb.
func loopback(tb testing.TB, wrap bool) (client, server net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	dial := (&net.Dialer{}).DialContext
	if wrap {
		ln, dial = Listen(ln), Dialer(&net.Dialer{})
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			tb.Error(err)
		}
		accepted <- c
	}()
	client, err = dial(tb.Context(), "tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	server = <-accepted
	tb.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestTLSOverWrappedConnections carries TLS 1.3 over a wrapped pair, with
// 8 MiB each way at once: far more than the socket buffers hold, so
// writes stop part-way on EAGAIN and reads find nothing ready, and both
// must wait in the poller and resume where they were.
func TestTLSOverWrappedConnections(t *testing.T) {
	c, s := pair(t)
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("policysvc"), pki.Key("policysvc"))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := keyfile.CertPool(pki.CA())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13})
	ts := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})

	const size = 8 << 20
	up, down := make([]byte, size), make([]byte, size)
	_, _ = rand.Read(up)
	_, _ = rand.Read(down)
	errs := make(chan error, 4)
	send := func(w io.Writer, b []byte) { _, err := w.Write(b); errs <- err }
	got := func(r io.Reader, want []byte) {
		b := make([]byte, len(want))
		if _, err := io.ReadFull(r, b); err != nil {
			errs <- err
			return
		}
		if !bytes.Equal(b, want) {
			errs <- errors.New("the bytes read differ from the bytes written")
			return
		}
		errs <- nil
	}
	go send(tc, up)
	go send(ts, down)
	go got(ts, up)
	go got(tc, down)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeadlinesAndEndsAreTheRuntimes: a read past its deadline, a write
// the peer never drains, an orderly close and a reset give the errors
// net.TCPConn gives.
func TestDeadlinesAndEndsAreTheRuntimes(t *testing.T) {
	t.Run("read deadline", func(t *testing.T) {
		c, _ := pair(t)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := c.Read(make([]byte, 10))
		var ne net.Error
		if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read = %d, %v; want a timeout", n, err)
		}
	})
	t.Run("write deadline", func(t *testing.T) {
		c, _ := pair(t)
		// The buffer first: touching 64 MiB of new memory can outlast the
		// deadline on a virtual machine, leaving no time to write any of it.
		const size = 64 << 20
		b := make([]byte, size)
		_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := c.Write(b)
		if n <= 0 || n >= size || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("write = %d of %d, %v; want part of it and a timeout", n, size, err)
		}
	})
	t.Run("orderly close", func(t *testing.T) {
		c, s := pair(t)
		if _, err := s.Write([]byte("last")); err != nil {
			t.Fatal(err)
		}
		s.Close()
		b, err := io.ReadAll(c)
		if string(b) != "last" || err != nil {
			t.Fatalf("read %q, %v; want the last bytes, then EOF", b, err)
		}
		if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("read after EOF = %d, %v", n, err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		c, s := pair(t)
		_ = s.(*Conn).SetLinger(0)
		s.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		var oe *net.OpError
		if !errors.Is(err, syscall.ECONNRESET) || !errors.As(err, &oe) || oe.Op != "read" {
			t.Fatalf("read = %v; want the reset as a read OpError", err)
		}
		var werr error
		for range 100 {
			if _, werr = c.Write([]byte("x")); werr != nil {
				break
			}
		}
		if !errors.Is(werr, syscall.EPIPE) && !errors.Is(werr, syscall.ECONNRESET) {
			t.Fatalf("write after the reset = %v", werr)
		}
	})
	t.Run("closed here", func(t *testing.T) {
		c, _ := pair(t)
		c.Close()
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed connection = %v", err)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write on a closed connection = %v", err)
		}
	})
}

// TestPendingPeeksWithoutConsuming: Pending is false only while the
// socket is open and has nothing to read, and what it saw is still there
// for the next Read.
func TestPendingPeeksWithoutConsuming(t *testing.T) {
	for _, tc := range []struct {
		name string
		// act makes something (or nothing) pending on c, through its peer s.
		act  func(t *testing.T, c, s net.Conn)
		want bool
		// then checks what a read finds afterwards.
		then func(t *testing.T, c net.Conn)
	}{
		{"quiet", func(*testing.T, net.Conn, net.Conn) {}, false, nil},
		{"data", func(t *testing.T, _, s net.Conn) {
			if _, err := s.Write([]byte("push")); err != nil {
				t.Fatal(err)
			}
		}, true, func(t *testing.T, c net.Conn) {
			b := make([]byte, 4)
			if _, err := io.ReadFull(c, b); err != nil || string(b) != "push" {
				t.Fatalf("read %q, %v after the peek; want the bytes it saw", b, err)
			}
		}},
		{"orderly close", func(_ *testing.T, _, s net.Conn) { s.Close() }, true, func(t *testing.T, c net.Conn) {
			if _, err := c.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("read = %v, want EOF", err)
			}
		}},
		{"reset", func(_ *testing.T, _, s net.Conn) {
			_ = s.(*Conn).SetLinger(0)
			s.Close()
		}, true, nil},
		{"closed here", func(_ *testing.T, c, _ net.Conn) { c.Close() }, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := pair(t)
			tc.act(t, c, s)
			got := c.(*Conn).Pending()
			// What the peer sent crosses loopback asynchronously: wait
			// for it, bounded.
			for deadline := time.Now().Add(5 * time.Second); tc.want && !got && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
				got = c.(*Conn).Pending()
			}
			if got != tc.want {
				t.Fatalf("Pending = %v, want %v", got, tc.want)
			}
			if tc.then != nil {
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				tc.then(t, c)
			}
		})
	}
}

// TestWrapOnlyTakesTCPAndObeysDisable: other connections pass through,
// and once disabled nothing is wrapped.
func TestWrapOnlyTakesTCPAndObeysDisable(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a); got != a {
		t.Errorf("a pipe came back as %T", got)
	}
	t.Cleanup(func() { disabled.Store(false) })
	Disable()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := Dialer(&net.Dialer{})(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok || enabled() {
		t.Errorf("disabled, a dial gave %T (enabled %v)", c, enabled())
	}
}

// TestReadAndWriteDoNotAllocate holds what the callbacks made once per
// connection are for: a read and a write cost no allocation, as on the
// runtime's own path.
func TestReadAndWriteDoNotAllocate(t *testing.T) {
	c, s := pair(t)
	msg, buf := make([]byte, 512), make([]byte, 512)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, buf); err != nil {
			t.Fatal(err)
		}
		if s.(*Conn).Pending() {
			t.Fatal("pending after everything was read")
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per write, read and peek; want none", allocs)
	}
}

// TestConcurrentWritesStayWhole has eight goroutines write blocks larger
// than the socket buffers at once, so that writes stop part-way on EAGAIN:
// each block must arrive whole, as net.TCPConn delivers it, although the
// writes share the connection's write state.
func TestConcurrentWritesStayWhole(t *testing.T) {
	c, s := pair(t)
	const writers, size = 8, 256 << 10
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			_, err := c.Write(bytes.Repeat([]byte{byte('a' + w)}, size))
			errs <- err
		}()
	}
	seen := map[byte]bool{}
	buf := make([]byte, size)
	for range writers {
		if _, err := io.ReadFull(s, buf); err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(buf, buf[:1]); n != size || seen[buf[0]] {
			t.Fatalf("a block of %q holds %d of %d of its bytes (or came twice): writes interleaved", buf[0], n, size)
		}
		seen[buf[0]] = true
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkWriteRead writes 1 KiB on one end of a loopback pair and reads
// it on the other: the per-call cost of the direct calls, allocations
// included, against the runtime's own path.
func BenchmarkWriteRead(b *testing.B) {
	for _, bc := range []struct {
		name string
		wrap bool
	}{{"direct", true}, {"runtime", false}} {
		b.Run(bc.name, func(b *testing.B) {
			client, server := loopback(b, bc.wrap)
			msg, buf := make([]byte, 1024), make([]byte, 1024)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(server, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
