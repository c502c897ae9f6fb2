package agtp

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp/internal/testcert"
)

// serveLoopback runs a minimal AGTP server on a TLS loopback listener:
// it answers each request in order with 200 and the request's Task-ID,
// and answers protocol errors the way a real server must.
func serveLoopback(t *testing.T) (addr string, roots *x509.CertPool) {
	t.Helper()
	cert, pool, err := testcert.Get()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ServerTLSConfig(cert))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { serveConn(c) })
		}
	})
	return ln.Addr().String(), pool
}

func serveConn(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	for {
		req, err := ReadRequest(br, Limits{})
		var pe *ProtocolError
		switch {
		case errors.As(err, &pe):
			pe.Response().Write(bw)
			bw.Flush()
			if pe.CloseConnection {
				return
			}
			continue
		case err != nil:
			return
		}
		resp := NewResponse(StatusOK, MediaTypeJSON, []byte(`{"path":"`+req.Path+`"}`))
		resp.Header.Set(HeaderServerID, "test")
		if id := req.Header.Get(HeaderTaskID); id != "" {
			resp.Header.Set(HeaderTaskID, id)
		}
		if resp.Write(bw) != nil || bw.Flush() != nil {
			return
		}
	}
}

func TestTLS13LoopbackExchange(t *testing.T) {
	addr, roots := serveLoopback(t)
	conn, err := tls.Dial("tcp", addr, ClientTLSConfig("localhost", roots))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st := conn.ConnectionState()
	if st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != ALPN {
		t.Fatalf("negotiated version %x, ALPN %q", st.Version, st.NegotiatedProtocol)
	}

	// Two pipelined requests, answered in order on one connection,
	// without half-closing the write side (core §5.4.1).
	bw, br := bufio.NewWriter(conn), bufio.NewReader(conn)
	for _, id := range []string{"t-1", "t-2"} {
		req, _ := NewRequest(MethodQuery, "/"+id)
		req.Header.Set(HeaderTaskID, id)
		if err := req.Write(bw); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t-1", "t-2"} {
		resp, err := ReadResponse(br, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 200 || resp.Header.Get(HeaderTaskID) != id || string(resp.Body) != `{"path":"/`+id+`"}` {
			t.Fatalf("response = %d %q %s", resp.Status, resp.Header, resp.Body)
		}
	}

	// A malformed request gets its 400 and the connection is closed.
	bw.WriteString("AGTP/1.0 QUERY /a#b\r\n\r\n")
	bw.Flush()
	resp, err := ReadResponse(br, Limits{})
	if err != nil || resp.Status != 400 {
		t.Fatalf("got %v, %v", resp, err)
	}
	var body ErrorBody
	if err := body.UnmarshalJSON(resp.Body); err != nil || body.Reason != ReasonInvalidRequestLine {
		t.Fatalf("error body %s: %v", resp.Body, err)
	}
	if _, err := ReadResponse(br, Limits{}); err != io.EOF {
		t.Fatalf("after a closing error: %v, want io.EOF", err)
	}
}

func TestTLSHandshakeRules(t *testing.T) {
	addr, roots := serveLoopback(t)
	tests := []struct {
		name   string
		mutate func(*tls.Config)
		ok     bool
		alpn   string
	}{
		{"TLS 1.2 refused", func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12 }, false, ""},
		{"client without ALPN accepted", func(c *tls.Config) { c.NextProtos = nil }, true, ""},
		{"client offering only h2 refused", func(c *tls.Config) { c.NextProtos = []string{"h2"} }, false, ""},
		{"client offering h2 and agtp gets agtp", func(c *tls.Config) { c.NextProtos = []string{"h2", ALPN} }, true, ALPN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ClientTLSConfig("localhost", roots)
			tt.mutate(cfg)
			conn, err := tls.Dial("tcp", addr, cfg)
			if !tt.ok {
				if err == nil {
					conn.Close()
					t.Fatal("handshake succeeded")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if got := conn.ConnectionState().NegotiatedProtocol; got != tt.alpn {
				t.Errorf("ALPN = %q, want %q", got, tt.alpn)
			}
		})
	}
}

func TestTLSConfigsRequireTLS13(t *testing.T) {
	if ServerTLSConfig().MinVersion != tls.VersionTLS13 || ClientTLSConfig("h", nil).MinVersion != tls.VersionTLS13 {
		t.Error("MinVersion must be TLS 1.3")
	}
	if c := ClientTLSConfig("h", nil); len(c.NextProtos) != 1 || c.NextProtos[0] != "agtp" || c.ServerName != "h" {
		t.Errorf("client config = %+v", c)
	}
}
