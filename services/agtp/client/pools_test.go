package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestPoolsOfFailedAddressesAreDropped: requests that each name a new
// host (as a caller-named peer may) leave no pool behind once their dial
// failed; before, every address kept one for ever, under two keys.
func TestPoolsOfFailedAddressesAreDropped(t *testing.T) {
	refused := errors.New("refused")
	c := newClient(t, testkit.PKI(t).CA(), client.Options{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return nil, refused },
	})
	const workers, each = 4, 5000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				addr := fmt.Sprintf("h%d-%d.example", w, i)
				if i%2 == 1 {
					addr += ":4480"
				}
				if _, err := c.Do(context.Background(), request(t, agtp.MethodQuery, "/"), addr); !errors.Is(err, refused) {
					t.Errorf("%s: %v, want the dialer's refusal", addr, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := client.TCPPools(c); n != 0 {
		t.Fatalf("%d pools kept after %d failed requests to distinct hosts, want none", n, workers*each)
	}
}

// TestPoolInUseIsKeptAndReused: a pool with a connection stays and
// carries the next request to its address, however the address is
// written; once the idle sweep has closed its connection it goes, and
// the address gets a new one on its next request.
func TestPoolInUseIsKeptAndReused(t *testing.T) {
	s := startServer(t, transport.Options{}, echo)
	c := newClient(t, s.caFile, client.Options{IdleConnTimeout: 200 * time.Millisecond})
	_, port, _ := net.SplitHostPort(s.addr())
	for i, addr := range []string{s.addr(), "[127.0.0.1]:" + port, s.addr()} {
		var reused bool
		ctx := client.WithTrace(testContext(t), &client.Trace{GotConn: func(info client.ConnInfo) { reused = info.Reused }})
		resp, err := c.Do(ctx, request(t, agtp.MethodQuery, "/x"), addr)
		if err != nil || resp.Status != agtp.StatusOK {
			t.Fatalf("request %d to %s: %v, %v", i, addr, resp, err)
		}
		if i > 0 && !reused {
			t.Errorf("request %d to %s did not reuse the pooled connection", i, addr)
		}
		if n := client.TCPPools(c); n != 1 {
			t.Fatalf("%d pools after request %d, want 1", n, i)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for client.TCPPools(c) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := client.TCPPools(c); n != 0 {
		t.Fatalf("%d pools after the idle sweep closed every connection, want none", n)
	}
	if resp, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/x"), s.addr()); err != nil || resp.Status != agtp.StatusOK {
		t.Fatalf("request after the pool was dropped: %v, %v", resp, err)
	}
}

// A QUIC dial that fails leaves nothing behind either.
func TestQUICConnectionsOfFailedDialsAreDropped(t *testing.T) {
	c := newClient(t, testkit.PKI(t).CA(), client.Options{QUIC: true, HandshakeTimeout: time.Millisecond})
	for i := range 200 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+i) // nothing answers QUIC there
		if _, err := c.Do(context.Background(), request(t, agtp.MethodQuery, "/"), addr); err == nil {
			t.Fatalf("%s answered", addr)
		}
	}
	if n := client.QUICConns(c); n != 0 {
		t.Fatalf("%d QUIC entries kept after 200 failed dials to distinct addresses, want none", n)
	}
}

// A QUIC connection that ended (here the server's idle timeout) leaves no
// entry behind, though its address is never asked for again.
func TestQUICConnectionsThatEndedAreDropped(t *testing.T) {
	srv := startServer(t, transport.Options{IdleTimeout: 150 * time.Millisecond}, echo)
	c := newClient(t, srv.caFile, client.Options{QUIC: true})
	if _, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/"), srv.quicAddr()); err != nil {
		t.Fatal(err)
	}
	if n := client.QUICConns(c); n != 1 {
		t.Fatalf("%d QUIC entries while the connection is open, want 1", n)
	}
	testkit.WaitFor(t, 10*time.Second, "the ended connection's entry to go", func() bool { return client.QUICConns(c) == 0 })
	// EXECUTE waits for the handshake: a QUERY would go in 0-RTT on the
	// resumed connection, where quic-go races with itself under -race
	// (see TestQUIC0RTTOnlyForQueryAndDiscover).
	if _, err := c.Do(testContext(t), request(t, agtp.MethodExecute, "/"), srv.quicAddr()); err != nil {
		t.Fatalf("a request after the entry went: %v", err)
	}
}
