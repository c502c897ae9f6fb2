package e2e

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// TestHostileClientsLeaveOthersUnaffected runs misbehaving clients against
// the front door process and checks each gets a specific answer or a
// closed connection, while a well-behaved client keeps being served.
func TestHostileClientsLeaveOthersUnaffected(t *testing.T) {
	c := Start(t, Options{Env: []string{"AGTP_HEADER_TIMEOUT=1s", "AGTP_IDLE_TIMEOUT=4s"}})
	addr := c.Procs["frontdoor"].AGTPAddr
	good := c.dialAGTP(t)
	served := func(t *testing.T) {
		t.Helper()
		if resp := good.do(request(t, "DISCOVER", "/")); resp.Status != agtp.StatusOK {
			t.Fatalf("well-behaved client got %d %s", resp.Status, resp.Body)
		}
	}
	dialTLS := func(t *testing.T) *tls.Conn {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, agtp.ClientTLSConfig("localhost", c.Admin.Pool()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	// answer reads one response, or reports that the server closed.
	answer := func(t *testing.T, conn net.Conn) (*agtp.Response, error) {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		return agtp.ReadResponse(bufio.NewReader(conn), agtp.Limits{})
	}

	t.Run("a slow client is cut off after the header deadline", func(t *testing.T) {
		slow := dialTLS(t)
		if _, err := slow.Write([]byte("AGTP/1.0 DISCOVER /")); err != nil {
			t.Fatal(err)
		}
		served(t)
		start := time.Now()
		_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.ReadAll(slow)
		if elapsed := time.Since(start); err != nil && !strings.Contains(err.Error(), "reset") || elapsed > 5*time.Second {
			t.Fatalf("slow client: read ended after %v with %v; want the server to close within about the 1s header timeout", elapsed, err)
		}
		served(t)
	})

	t.Run("an oversized header section gets 400 naming the limit and a close", func(t *testing.T) {
		conn := dialTLS(t)
		big := "AGTP/1.0 DISCOVER /\r\nX-Filler: " + strings.Repeat("a", 70<<10) + "\r\n\r\n"
		go func() { _, _ = conn.Write([]byte(big)) }()
		resp, err := answer(t, conn)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 400 || !strings.Contains(string(resp.Body), "header-section-too-large") {
			t.Fatalf("got %d %s", resp.Status, resp.Body)
		}
		served(t)
	})

	t.Run("an oversized body gets 400 body-too-large", func(t *testing.T) {
		conn := dialTLS(t)
		if _, err := conn.Write([]byte("AGTP/1.0 SUMMARIZE /documents\r\nContent-Type: application/vnd.agtp+json\r\nContent-Length: 104857600\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := answer(t, conn)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 400 || !strings.Contains(string(resp.Body), "body-too-large") {
			t.Fatalf("got %d %s", resp.Status, resp.Body)
		}
		served(t)
	})

	t.Run("garbage bytes get 400 or a close", func(t *testing.T) {
		conn := dialTLS(t)
		if _, err := conn.Write([]byte("\x00\x01\x02 garbage \xff\xfe\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if resp, err := answer(t, conn); err == nil && resp.Status != 400 {
			t.Fatalf("garbage got %d %s", resp.Status, resp.Body)
		}
		served(t)
	})

	t.Run("plaintext and TLS 1.2 clients are refused", func(t *testing.T) {
		plain, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		_, _ = plain.Write([]byte("AGTP/1.0 DISCOVER /\r\n\r\n"))
		_ = plain.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, _ := io.ReadAll(plain); strings.Contains(string(b), "AGTP/1.0 200") {
			t.Fatal("a plaintext request was answered")
		}
		old, err := tls.Dial("tcp", addr, &tls.Config{MaxVersion: tls.VersionTLS12, RootCAs: c.Admin.Pool(), ServerName: "localhost"})
		if err == nil {
			old.Close()
			t.Fatal("a TLS 1.2 handshake succeeded")
		}
		served(t)
	})

	t.Run("an idle connection is closed after the idle timeout", func(t *testing.T) {
		idle := dialTLS(t)
		start := time.Now()
		_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.ReadAll(idle)
		if elapsed := time.Since(start); elapsed > 9*time.Second {
			t.Fatalf("idle connection lived %v with a 4s idle timeout", elapsed)
		}
	})
}
