package httpsapi

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/deploy/accessref"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
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

// serve serves h over real TLS with cfg, bounded as the front door's
// listeners are, and returns the base URL.
func serve(t *testing.T, h http.Handler, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := kit.NewHTTPServer(h, cfg, slog.New(slog.DiscardHandler))
	// The refused handshakes are the point of some cases: not worth a log line.
	srv.ErrorLog = log.New(io.Discard, "", 0)
	go func() { _ = srv.Serve(tls.NewListener(kit.LimitListener(ln), cfg)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String()
}

// client is an HTTPS client trusting roots that offers cert, if any, and
// records whether the server asked for a client certificate.
func client(roots *x509.CertPool, cert *tls.Certificate, asked *bool) *http.Client {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots}
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if asked != nil {
			*asked = true
		}
		if cert == nil {
			return &tls.Certificate{}, nil
		}
		return cert, nil
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}, Timeout: 5 * time.Second}
}

// publicHandler is the public listener's handler as the front door builds
// it, without the connections its routes need (none of the cases here
// reaches an internal service).
func publicHandler() http.Handler {
	return Handler(Options{Domain: "example.test", PublicHost: "agtp.example.test", Log: slog.New(slog.DiscardHandler)})
}

// TestListenerPresentsThePublicCertificate serves the public listener with
// TLSConfig over real TLS: the AGTP server certificate comes from a CA of
// its own, apart from the suite CA, as in a deployment with a public
// certificate. A client trusting only that CA gets the AGTP certificate; a
// client trusting only the suite CA does not get a certificate it trusts;
// no client certificate is ever asked for, so one from any CA changes
// nothing, and the REST routes are not there with or without one.
func TestListenerPresentsThePublicCertificate(t *testing.T) {
	suite := testkit.PKI(t)
	public, err := devpki.Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	served := keyPair(t, public, devpki.AGTPServer)
	base := serve(t, publicHandler(), TLSConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &served, nil }))

	publicRoots, suiteRoots := pool(t, public.CA()), pool(t, suite.CA())
	for _, tc := range []struct {
		name  string
		roots *x509.CertPool
		cert  *tls.Certificate
		path  string
		// want is the HTTP status; 0 means the handshake must fail
		// because the client does not trust the server's certificate.
		want int
	}{
		{name: "public document, trusting the AGTP certificate's CA", roots: publicRoots, path: "/.well-known/agtp", want: http.StatusOK},
		{name: "readiness", roots: publicRoots, path: "/readyz", want: http.StatusOK},
		{name: "trusting only the suite CA", roots: suiteRoots, path: "/.well-known/agtp"},
		{name: "REST without a client certificate", roots: publicRoots, path: "/v1/catalog/methods", want: http.StatusNotFound},
		{name: "REST with a suite client certificate", roots: publicRoots, cert: ptr(keyPair(t, suite, devpki.Admin)), path: "/v1/catalog/methods", want: http.StatusNotFound},
		{name: "client certificate from another CA", roots: publicRoots, cert: ptr(keyPair(t, public, devpki.Admin)), path: "/healthz", want: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked bool
			hc := client(tc.roots, tc.cert, &asked)
			defer hc.CloseIdleConnections()
			resp, err := hc.Get(base + tc.path)
			if tc.want == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("GET %s = %d, want a failed handshake", tc.path, resp.StatusCode)
				}
				var unknown x509.UnknownAuthorityError
				if !errors.As(err, &unknown) {
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
			if asked {
				t.Fatal("the public listener asked for a client certificate")
			}
			if got := resp.TLS.PeerCertificates[0].Raw; !bytes.Equal(got, leafDER(t, public.Cert(devpki.AGTPServer))) {
				t.Fatalf("served leaf %q, want the AGTP server certificate", resp.TLS.PeerCertificates[0].Subject)
			}
		})
	}
}

// gatewayRoute is one REST route of proto/gateway.yaml.
type gatewayRoute struct{ method, path string }

// gatewayRoutes reads every REST route of the internal APIs, with each
// path variable filled in.
func gatewayRoutes(t *testing.T) []gatewayRoute {
	t.Helper()
	rules, err := accessref.ReadRoutes(filepath.Join("..", "..", "..", "proto", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	variable := regexp.MustCompile(`\{[^}]*\}`)
	var routes []gatewayRoute
	for _, rt := range rules {
		for _, r := range rt.All() {
			routes = append(routes, gatewayRoute{r.Verb, variable.ReplaceAllString(r.Path, "x")})
		}
	}
	if len(routes) < 6 {
		t.Fatalf("gateway.yaml: %d routes, want every internal API's", len(routes))
	}
	return routes
}

// TestPublicListenerServesNoInternalAPI sends every REST route of the
// internal APIs to the public listener, with and without a client
// certificate from the suite CA: each is 404, naming the admin listener.
func TestPublicListenerServesNoInternalAPI(t *testing.T) {
	suite := testkit.PKI(t)
	served := keyPair(t, suite, devpki.AGTPServer)
	base := serve(t, publicHandler(), TLSConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &served, nil }))
	roots := pool(t, suite.CA())
	routes := gatewayRoutes(t)
	for _, tc := range []struct {
		name string
		cert *tls.Certificate
	}{
		{"without a client certificate", nil},
		{"with a suite client certificate", ptr(keyPair(t, suite, devpki.Admin))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := client(roots, tc.cert, nil)
			defer hc.CloseIdleConnections()
			for _, r := range routes {
				req, err := http.NewRequest(r.method, base+r.path, strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", r.method, r.path, err)
				}
				var body struct{ Error, Explanation string }
				err = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound || err != nil || body.Error != "not-found" || !strings.Contains(body.Explanation, "its own gateway") {
					t.Errorf("%s %s = %d %+v (%v), want 404 not-found naming the services' own gateways", r.method, r.path, resp.StatusCode, body, err)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The bootstrap document's links use the request's Host only when the
// connection was made for it (the TLS server name, or the address
// connected to); a Host the connection was not made for gets the
// organisation's domain, so a cached document cannot point agents at
// another JWKS.
func TestWellKnownLinksUseOnlyAHostTheConnectionServes(t *testing.T) {
	suite := testkit.PKI(t)
	served := keyPair(t, suite, devpki.AGTPServer)
	base := serve(t, publicHandler(), TLSConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &served, nil }))
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "https://"))
	hc := client(pool(t, suite.CA()), nil, nil)
	defer hc.CloseIdleConnections()
	for _, tc := range []struct {
		name, dial, host, want string
	}{
		{"the TLS server name", "localhost", "localhost:" + port, "localhost:" + port},
		{"another name than the TLS server name", "localhost", "evil.example", "example.test"},
		{"the address connected to", "127.0.0.1", "127.0.0.1:" + port, "127.0.0.1:" + port},
		{"a name, over a connection to an address", "127.0.0.1", "evil.example:" + port, "example.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", "https://"+net.JoinHostPort(tc.dial, port)+"/.well-known/agtp", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tc.host
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var doc struct {
				Discovery map[string]any `json:"discovery"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
				t.Fatal(err)
			}
			if got := doc.Discovery["jwks"]; got != "https://"+tc.want+"/.well-known/jwks.json" {
				t.Fatalf("jwks link %v, want it on %s", got, tc.want)
			}
		})
	}
}
