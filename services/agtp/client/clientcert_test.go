package client_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/agtpquic"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/testkit"
	"github.com/quic-go/quic-go"
)

// peerServer listens on TLS/TCP and QUIC, requires a client certificate
// (any: what it proves is the front door's business, not the handshake's)
// and answers every request with the fingerprint of the certificate its
// connection presented.
type peerServer struct {
	tcpAddr, quicAddr, caFile string
}

func startPeerServer(t *testing.T) *peerServer {
	t.Helper()
	pki := testkit.PKI(t)
	pair, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := agtp.ServerTLSConfig(pair)
	cfg.ClientAuth = tls.RequireAnyClientCert
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ql, err := quic.ListenAddr("127.0.0.1:0", cfg, agtpquic.Config())
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() {
				defer conn.Close()
				tc := conn.(*tls.Conn)
				_ = tc.SetDeadline(time.Now().Add(20 * time.Second))
				if tc.HandshakeContext(ctx) != nil {
					return
				}
				fp := peerFingerprint(tc.ConnectionState())
				br, bw := bufio.NewReader(tc), bufio.NewWriter(tc)
				for {
					if _, err := agtp.ReadRequest(br, agtp.Limits{}); err != nil {
						return
					}
					if answerPeer(fp).Write(bw) != nil || bw.Flush() != nil {
						return
					}
				}
			})
		}
	})
	wg.Go(func() {
		for {
			conn, err := ql.Accept(ctx)
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.CloseWithError(0, "")
				select {
				case <-conn.HandshakeComplete():
				case <-ctx.Done():
					return
				}
				fp := peerFingerprint(conn.ConnectionState().TLS)
				for {
					str, err := conn.AcceptStream(ctx)
					if err != nil {
						return
					}
					if _, err := agtp.ReadRequest(bufio.NewReader(str), agtp.Limits{}); err != nil {
						str.CancelRead(1)
						str.CancelWrite(1)
						continue
					}
					bw := bufio.NewWriter(str)
					_ = answerPeer(fp).Write(bw)
					_ = bw.Flush()
					str.Close()
				}
			})
		}
	})
	t.Cleanup(func() {
		cancel()
		ln.Close()
		ql.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return &peerServer{tcpAddr: ln.Addr().String(), quicAddr: ql.Addr().String(), caFile: pki.CA()}
}

func peerFingerprint(st tls.ConnectionState) string {
	if len(st.PeerCertificates) == 0 {
		return "none"
	}
	return agentcert.Fingerprint(st.PeerCertificates[0].Raw)
}

func answerPeer(fp string) *agtp.Response {
	return agtp.NewResponse(agtp.StatusOK, "text/plain", []byte(fp))
}

// agentCertificate is an issuer-signed Agent Certificate, as a TLS
// pair and as PEM files.
func agentCertificate(t *testing.T) (pair tls.Certificate, certFile, keyFile string) {
	t.Helper()
	_, issuer, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := sha256.Sum256([]byte(t.Name()))
	der, err := agentcert.IssueByIssuer(agentcert.Request{AgentID: hex.EncodeToString(id[:]), PublicKey: key.Public()}, issuer)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "agent.pem"), filepath.Join(dir, "agent-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, certFile, keyFile
}

func TestClientCertificateIsPresentedOverTCPAndQUIC(t *testing.T) {
	srv := startPeerServer(t)
	pair, certFile, keyFile := agentCertificate(t)
	want := agentcert.Fingerprint(pair.Certificate[0])

	for _, tc := range []struct {
		name string
		opts client.Options
		addr string
	}{
		{"TCP, Certificates", client.Options{Certificates: []tls.Certificate{pair}}, srv.tcpAddr},
		{"TCP, CertFile and KeyFile", client.Options{CertFile: certFile, KeyFile: keyFile}, srv.tcpAddr},
		{"QUIC, Certificates", client.Options{QUIC: true, Certificates: []tls.Certificate{pair}}, srv.quicAddr},
		{"QUIC, CertFile and KeyFile", client.Options{QUIC: true, CertFile: certFile, KeyFile: keyFile}, srv.quicAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, srv.caFile, tc.opts)
			// Twice: the second request rides the pooled connection.
			for i := range 2 {
				resp, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/"), tc.addr)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if got := string(resp.Body); got != want {
					t.Fatalf("request %d: the server saw certificate %s, want %s", i, got, want)
				}
			}
		})
	}
}

// TestNoClientCertificateIsRefused shows the server above really requires
// one, so that the test before it proves the client sent it.
func TestNoClientCertificateIsRefused(t *testing.T) {
	srv := startPeerServer(t)
	for _, tc := range []struct {
		name string
		opts client.Options
		addr string
	}{
		{"TCP", client.Options{}, srv.tcpAddr},
		{"QUIC", client.Options{QUIC: true}, srv.quicAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, srv.caFile, tc.opts)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if resp, err := c.Do(ctx, request(t, agtp.MethodQuery, "/"), tc.addr); err == nil {
				t.Fatalf("answered without a client certificate: %q", resp.Body)
			}
		})
	}
}
