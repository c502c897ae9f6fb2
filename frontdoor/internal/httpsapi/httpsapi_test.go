package httpsapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/testkit"
)

func pool(t *testing.T, caFile string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatalf("%s: no certificate", caFile)
	}
	return p
}

func leafDER(t *testing.T, certFile string) []byte {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", certFile)
	}
	return block.Bytes
}

func keyPair(t *testing.T, l devpki.Layout, name string) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(l.Cert(name), l.Key(name))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestListenerPresentsThePublicCertificate serves the HTTPS side with
// TLSConfig over real TLS: the AGTP server certificate comes from a CA of
// its own, apart from the suite CA, as in a deployment with a public
// certificate. A client trusting only that CA gets the AGTP certificate; a
// client trusting only the suite CA does not get a certificate it trusts;
// the REST routes still admit suite-issued client certificates only.
func TestListenerPresentsThePublicCertificate(t *testing.T) {
	suite := testkit.PKI(t)
	public, err := devpki.Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	served := keyPair(t, public, devpki.AGTPServer)
	h, err := Handler(context.Background(), Options{Domain: "example.test", AGTPHost: "127.0.0.1:4480", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := TLSConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &served, nil }, pool(t, suite.CA()))
	// The refused handshakes are the point of some cases: not worth a log line.
	srv := &http.Server{Handler: h, TLSConfig: cfg, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "https://" + ln.Addr().String()

	publicRoots, suiteRoots := pool(t, public.CA()), pool(t, suite.CA())
	for _, tc := range []struct {
		name  string
		roots *x509.CertPool
		cert  *tls.Certificate
		path  string
		// want is the HTTP status; 0 means the handshake must fail.
		want int
		// unknownCA: the handshake fails because the client does not
		// trust the server's certificate.
		unknownCA bool
	}{
		{name: "public document, trusting the AGTP certificate's CA", roots: publicRoots, path: "/.well-known/agtp", want: http.StatusOK},
		{name: "trusting only the suite CA", roots: suiteRoots, path: "/.well-known/agtp", unknownCA: true},
		{name: "REST without a client certificate", roots: publicRoots, path: "/v1/catalog/methods", want: http.StatusUnauthorized},
		{name: "REST with a suite client certificate", roots: publicRoots, cert: ptr(keyPair(t, suite, devpki.Admin)), path: "/v1/catalog/methods", want: http.StatusNotFound},
		{name: "client certificate from another CA", roots: publicRoots, cert: ptr(keyPair(t, public, devpki.Admin)), path: "/healthz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: tc.roots}, ForceAttemptHTTP2: true}
			if tc.cert != nil {
				tr.TLSClientConfig.Certificates = []tls.Certificate{*tc.cert}
			}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(base + tc.path)
			if tc.want == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("GET %s = %d, want a failed handshake", tc.path, resp.StatusCode)
				}
				var unknown x509.UnknownAuthorityError
				if tc.unknownCA && !errors.As(err, &unknown) {
					t.Fatalf("GET %s: %v, want the server's certificate refused as of an unknown authority", tc.path, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("GET %s: %v", tc.path, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("GET %s = %d, want %d", tc.path, resp.StatusCode, tc.want)
			}
			if got := resp.TLS.PeerCertificates[0].Raw; !bytes.Equal(got, leafDER(t, public.Cert(devpki.AGTPServer))) {
				t.Fatalf("served leaf %q, want the AGTP server certificate", resp.TLS.PeerCertificates[0].Subject)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
