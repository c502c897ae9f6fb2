package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/e2e/loadgen"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestConnectionFloodsAreBoundedAndOthersServed floods the front door
// process beyond its configured connection limits, from loopback addresses
// of their own, and checks that what is over a limit is refused or shed
// cleanly while a well-behaved client from 127.0.0.1 keeps getting 200,
// over an existing connection, a new TLS connection and QUIC.
func TestConnectionFloodsAreBoundedAndOthersServed(t *testing.T) {
	const perIP, handshakes = 20, 16
	c := Start(t, Options{Env: []string{
		"AGTP_MAX_CONNECTIONS_PER_IP=20", "AGTP_MAX_HANDSHAKES=16",
		// Far above what the test waits: a handshake that ends sooner
		// was shed, not timed out.
		"AGTP_HANDSHAKE_TIMEOUT=60s",
	}})
	addr := c.Procs["frontdoor"].AGTPAddr
	target := loadgen.Target{Addr: addr, ServerName: "localhost", Roots: c.Admin.Pool()}
	good := c.dialAGTP(t)
	quicClient, err := client.New(client.Options{RootCAs: c.Admin.Pool(), ServerName: "localhost", QUIC: true})
	if err != nil {
		t.Fatal(err)
	}
	defer quicClient.Close()

	// served checks the well-behaved client on every path, each within its
	// normal timeouts.
	served := func(t *testing.T) {
		t.Helper()
		if resp := good.do(request(t, "DISCOVER", "/")); resp.Status != agtp.StatusOK {
			t.Fatalf("existing connection: %d %s", resp.Status, resp.Body)
		}
		if resp := c.roundTrip(t, request(t, "DISCOVER", "/")); resp.Status != agtp.StatusOK {
			t.Fatalf("new TLS connection: %d %s", resp.Status, resp.Body)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := quicClient.Do(ctx, request(t, "DISCOVER", "/"), addr)
		if err != nil || resp.Status != agtp.StatusOK {
			t.Fatalf("QUIC: %v %v", resp, err)
		}
	}
	flood := func(t *testing.T, cfg loadgen.AbuseConfig) *loadgen.Abuser {
		t.Helper()
		cfg.Target = target
		a, err := loadgen.StartAbuse(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Stop() })
		return a
	}
	dialFrom := func(src string) error {
		d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		conn, err := tls.DialWithDialer(d, "tcp", addr, agtp.ClientTLSConfig("localhost", c.Admin.Pool()))
		if err == nil {
			conn.Close()
		}
		return err
	}

	t.Run("TLS connections over the per-address limit are reset before the handshake", func(t *testing.T) {
		a := flood(t, loadgen.AbuseConfig{Kind: loadgen.AbuseIdleTLSFlood, Rate: 100, Hold: 2 * perIP, Sources: []string{"127.0.0.2"}})
		testkit.WaitFor(t, 15*time.Second, "the flood at the per-address limit", func() bool { return a.Held() == perIP })
		time.Sleep(500 * time.Millisecond) // attempts beyond the limit meanwhile
		served(t)
		r := a.Stop()
		if r.MaxHeld != perIP {
			t.Errorf("the flood held %d connections, want exactly the limit %d", r.MaxHeld, perIP)
		}
		if n := r.Count("handshake failed: reset by the server", "handshake failed: closed by the server"); n == 0 {
			t.Errorf("no attempt over the limit was refused: %s", r.FormatOutcomes())
		}
		if n := r.Count("handshake failed: timed out"); n > 0 {
			t.Errorf("%d refusals were not immediate: %s", n, r.FormatOutcomes())
		}
		testkit.WaitFor(t, 10*time.Second, "the address's slots back after the flood", func() bool { return dialFrom("127.0.0.2") == nil })
	})

	t.Run("QUIC connections over the per-address limit are refused with CONNECTION_REFUSED", func(t *testing.T) {
		a := flood(t, loadgen.AbuseConfig{Kind: loadgen.AbuseQUICFlood, Rate: 50, Hold: 2 * perIP, Sources: []string{"127.0.0.3"}})
		testkit.WaitFor(t, 15*time.Second, "the flood at the per-address limit", func() bool { return a.Held() == perIP })
		time.Sleep(500 * time.Millisecond)
		served(t)
		r := a.Stop()
		if r.MaxHeld != perIP {
			t.Errorf("the flood held %d QUIC connections, want exactly the limit %d", r.MaxHeld, perIP)
		}
		if r.Count("handshake failed: QUIC CONNECTION_REFUSED") == 0 {
			t.Errorf("no attempt over the limit was refused with CONNECTION_REFUSED: %s", r.FormatOutcomes())
		}
	})

	t.Run("silent TCP connections beyond the handshake limit are shed", func(t *testing.T) {
		// Four addresses, 15 connections each at most: under the
		// per-address limit, so the handshake backlog is what acts. At
		// 12/s the backlog of 16 holds each for over a second, so every
		// newcomer finds one to shed.
		a := flood(t, loadgen.AbuseConfig{Kind: loadgen.AbuseConnectFlood, Rate: 12, Hold: 60,
			Sources: []string{"127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7"}})
		// Counting held connections cannot show the shedding: the server
		// sheds the oldest as it accepts a newcomer, so the count stays at
		// the limit. What can is a connection the server closed.
		shed := []string{"reset by the server after", "closed by the server after"}
		testkit.WaitFor(t, 45*time.Second, "a silent connection shed", func() bool { return a.Count(shed...) > 0 })
		time.Sleep(3 * time.Second) // the flood goes on at the limit
		served(t)
		r := a.Stop()
		if n := r.Count(shed...); n < 3 {
			t.Errorf("only %d silent connections shed in over three seconds at 12/s: %s", n, r.FormatOutcomes())
		}
		if n := r.Count("held until the abuse stopped"); n > handshakes+2 {
			// Two more than the backlog: the connection the accept loop
			// holds while it waits for room, and one in the kernel's queue.
			t.Errorf("%d silent connections held at the end, the handshake limit is %d: %s", n, handshakes, r.FormatOutcomes())
		}
	})

	// From three quarters of the backlog QUIC requires a Retry, which a
	// client that never reads cannot answer, so the last places stay for
	// clients that can.
	t.Run("half-open QUIC handshakes beyond the handshake limit do not lock others out", func(t *testing.T) {
		a := flood(t, loadgen.AbuseConfig{Kind: loadgen.AbuseQUICHandshakeFlood, Rate: 40,
			Sources: []string{"127.0.0.8", "127.0.0.9", "127.0.0.10", "127.0.0.11"}})
		time.Sleep(3 * time.Second) // about 120 half-open handshakes against a backlog of 16
		served(t)
		if r := a.Stop(); r.Count("ClientHello sent") < 2*handshakes {
			t.Errorf("the flood sent too few ClientHellos to fill the backlog: %s", r.FormatOutcomes())
		}
	})
	served(t)
}
