package agtpquic

import (
	"bufio"
	"context"
	"io"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/internal/testcert"
	"github.com/quic-go/quic-go"
)

// TestOneStreamPerRequest runs the QUIC mapping end to end on loopback:
// the request goes up one bidirectional stream, a streamed answer of two
// responses comes back on it, then FIN.
func TestOneStreamPerRequest(t *testing.T) {
	cert, pool, err := testcert.Get()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := quic.ListenAddrEarly("127.0.0.1:0", agtp.ServerTLSConfig(cert), Config())
	if err != nil {
		t.Skipf("no UDP loopback: %v", err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	served := make(chan error, 1)
	go func() {
		conn, err := ln.Accept(ctx)
		if err != nil {
			served <- err
			return
		}
		str, err := conn.AcceptStream(ctx)
		if err != nil {
			served <- err
			return
		}
		req, err := agtp.ReadRequest(bufio.NewReader(str), agtp.Limits{})
		if err != nil {
			served <- err
			return
		}
		bw := bufio.NewWriter(str)
		if RefuseEarly(conn, req.Method) {
			agtp.TooEarly(req.Method).Response().Write(bw)
		} else {
			first := agtp.NewResponse(200, "text/plain", []byte("part 1"))
			first.Header.Set(agtp.HeaderStream, agtp.StreamContinue)
			first.Write(bw)
			agtp.NewResponse(200, "text/plain", []byte("part 2")).Write(bw)
		}
		bw.Flush()
		served <- str.Close()
		<-ctx.Done() // keep the connection until the client is done
	}()

	conn, err := quic.DialAddr(ctx, ln.Addr().String(), agtp.ClientTLSConfig("localhost", pool), Config())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	if got := conn.ConnectionState().TLS.NegotiatedProtocol; got != agtp.ALPN {
		t.Fatalf("ALPN = %q", got)
	}
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := agtp.NewRequest(agtp.MethodExecute, "/orders")
	bw := bufio.NewWriter(str)
	if err := req.Write(bw); err != nil || bw.Flush() != nil {
		t.Fatal(err)
	}
	str.Close() // our send side only; the response still comes back
	stream := agtp.NewStream(bufio.NewReader(str), agtp.Limits{})
	var parts []string
	for {
		resp, err := stream.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, string(resp.Body))
	}
	if len(parts) != 2 || parts[0] != "part 1" || parts[1] != "part 2" {
		t.Fatalf("parts = %q", parts)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

func TestConfigBounds(t *testing.T) {
	c := Config()
	if c.MaxIncomingStreams != agtp.DefaultMaxStreams || c.MaxIncomingUniStreams >= 0 ||
		c.MaxIdleTimeout != agtp.DefaultIdleTimeout || c.HandshakeIdleTimeout == 0 || !c.Allow0RTT {
		t.Errorf("Config = %+v", c)
	}
	// What a peer can make an endpoint hold unread is the initial
	// windows; quic-go's defaults are 512 KiB and 768 KiB.
	if c.InitialStreamReceiveWindow == 0 || c.InitialStreamReceiveWindow > 64<<10 ||
		c.InitialConnectionReceiveWindow == 0 || c.InitialConnectionReceiveWindow > 128<<10 ||
		c.MaxStreamReceiveWindow < c.InitialStreamReceiveWindow || c.MaxConnectionReceiveWindow < c.InitialConnectionReceiveWindow {
		t.Errorf("receive windows: stream %d up to %d, connection %d up to %d", c.InitialStreamReceiveWindow, c.MaxStreamReceiveWindow,
			c.InitialConnectionReceiveWindow, c.MaxConnectionReceiveWindow)
	}
}
