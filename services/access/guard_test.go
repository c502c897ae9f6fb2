package access_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/testkit"
)

// catalog stands in for catalogsvc: it answers the two RPCs the test
// table names, and counts the writes that reach it.
type catalog struct {
	writes int
}

func (*catalog) ListMethods(context.Context, *catalogv1.ListMethodsRequest) (*catalogv1.ListMethodsResponse, error) {
	return &catalogv1.ListMethodsResponse{CatalogVersion: "test"}, nil
}

func (c *catalog) PutEndpoint(context.Context, *catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error) {
	c.writes++
	return &catalogv1.PutEndpointResponse{}, nil
}

var table = access.Table{
	catalogv1.CatalogService_ListMethods_FullMethodName: {Services: []string{"frontdoor"}, Operators: true, Systems: true},
	catalogv1.CatalogService_PutEndpoint_FullMethodName: {Operators: true},
	// GetManifest has no rule: refused to everyone.
}

// server serves the stand-in over the suite's mutual TLS with the guard,
// and its REST gateway the way kit wires it.
type server struct {
	grpcAddr, restURL string
	catalog           *catalog
}

func serve(t *testing.T, pki devpki.Layout) *server {
	t.Helper()
	rec, err := access.NewRecognizer("", nil)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := access.NewGuard(rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := guard.Add(table); err != nil {
		t.Fatal(err)
	}
	srvTLS := serverTLS(t, pki, "catalogsvc")
	cat := &catalog{}
	grpcAddr := testkit.ServeGRPCAddr(t, []grpc.ServerOption{grpc.Creds(credentials.NewTLS(srvTLS)),
		grpc.ChainUnaryInterceptor(guard.UnaryInterceptor()), grpc.ChainStreamInterceptor(guard.StreamInterceptor())},
		func(g grpc.ServiceRegistrar) {
			catalogv1.RegisterCatalogServiceServer(g, &testkit.CatalogStub{ListMethodsF: cat.ListMethods, PutEndpointF: cat.PutEndpoint})
		})

	self := dial(t, pki, grpcAddr, clientCert(t, pki.Cert("catalogsvc"), pki.Key("catalogsvc")))
	mux := runtime.NewServeMux(guard.GatewayOptions()...)
	if err := catalogv1.RegisterCatalogServiceHandler(context.Background(), mux, self); err != nil {
		t.Fatal(err)
	}
	httpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mux, TLSConfig: srvTLS.Clone(), ReadHeaderTimeout: 5 * time.Second}
	hs.TLSConfig.NextProtos = []string{"h2", "http/1.1"}
	go func() { _ = hs.ServeTLS(httpLis, "", "") }()
	t.Cleanup(func() { _ = hs.Close() })
	return &server{grpcAddr: grpcAddr, restURL: "https://" + httpLis.Addr().String(), catalog: cat}
}

func serverTLS(t *testing.T, pki devpki.Layout, name string) *tls.Config {
	pair, err := tls.LoadX509KeyPair(pki.Cert(name), pki.Key(name))
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool(t, pki.CA()), NextProtos: []string{"h2"}}
}

func pool(t *testing.T, path string) *x509.CertPool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(b)
	return p
}

func clientCert(t *testing.T, cert, key string) tls.Certificate {
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func dial(t *testing.T, pki devpki.Layout, addr string, cert tls.Certificate) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool(t, pki.CA()), ServerName: "catalogsvc", Certificates: []tls.Certificate{cert}}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// issue makes a client certificate from the suite CA with the given URI
// SANs: identities the dev PKI does not hand out.
func issue(t *testing.T, pki devpki.Layout, uris ...string) tls.Certificate {
	t.Helper()
	ca := clientCert(t, pki.CA(), pki.CAKey())
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "test client"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, u := range uris {
		parsed, _ := url.Parse(u)
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), ca.PrivateKey.(crypto.Signer))
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	pair, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// TestGuardAdmitsExactlyTheTable calls over gRPC and through the REST
// gateway as each kind of identity: allowed where the table says,
// refused with not-permitted everywhere else, and a refused write never
// reaches the handler. A caller cannot borrow the gateway's forwarding
// to claim another identity, over gRPC or HTTP.
func TestGuardAdmitsExactlyTheTable(t *testing.T) {
	pki := testkit.PKI(t)
	s := serve(t, pki)
	pair := func(name string) tls.Certificate { return clientCert(t, pki.Cert(name), pki.Key(name)) }
	ids := map[string]tls.Certificate{
		"frontdoor": pair("frontdoor"),
		"rcnssvc":   pair("rcnssvc"),
		"operator":  pair(devpki.Admin),
		"system":    pair(devpki.InternalSystem),
		"no URI":    issue(t, pki),
		"agent":     issue(t, pki, "agtp://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
	}
	for _, tc := range []struct {
		method  string
		allowed []string
	}{
		{catalogv1.CatalogService_ListMethods_FullMethodName, []string{"frontdoor", "operator", "system"}},
		{catalogv1.CatalogService_PutEndpoint_FullMethodName, []string{"operator"}},
		{catalogv1.CatalogService_GetManifest_FullMethodName, nil},
	} {
		for who, cert := range ids {
			t.Run(tc.method+" as "+who, func(t *testing.T) {
				conn := dial(t, pki, s.grpcAddr, cert)
				writes := s.catalog.writes
				var out catalogv1.ListMethodsResponse
				err := conn.Invoke(context.Background(), tc.method, &catalogv1.ListMethodsRequest{}, &out)
				allowed := false
				for _, a := range tc.allowed {
					allowed = allowed || a == who
				}
				_, reason, _, _ := grpcerr.Reason(err)
				refused := reason == access.ReasonNotPermitted
				if refused == allowed {
					t.Fatalf("allowed %t, got %v", allowed, err)
				}
				if refused && s.catalog.writes != writes {
					t.Fatal("a refused write reached the handler")
				}
			})
		}
	}

	t.Run("forged forwarding metadata over gRPC", func(t *testing.T) {
		conn := dial(t, pki, s.grpcAddr, ids["system"])
		ctx := metadata.AppendToOutgoingContext(context.Background(), "agtp-gateway-token", strings.Repeat("0", 64), "agtp-gateway-caller", "operator/admin")
		err := conn.Invoke(ctx, catalogv1.CatalogService_PutEndpoint_FullMethodName, &catalogv1.PutEndpointRequest{}, &catalogv1.PutEndpointResponse{})
		if _, reason, _, _ := grpcerr.Reason(err); reason != access.ReasonNotPermitted {
			t.Fatalf("%v, want not-permitted", err)
		}
	})

	rest := func(t *testing.T, cert tls.Certificate, method, path string, header http.Header) int {
		t.Helper()
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool(t, pki.CA()), ServerName: "catalogsvc", Certificates: []tls.Certificate{cert}}}}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequest(method, s.restURL+path, strings.NewReader(`{}`))
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name, who, method, path string
		header                  http.Header
		want                    int
	}{
		{"an operator reads", "operator", "GET", "/v1/catalog/methods", nil, http.StatusOK},
		{"an operator writes", "operator", "POST", "/v1/catalog/endpoints", nil, http.StatusOK},
		{"a system reads", "system", "GET", "/v1/catalog/methods", nil, http.StatusOK},
		{"a system writes", "system", "POST", "/v1/catalog/endpoints", nil, http.StatusForbidden},
		{"the gateway's own service is judged as the HTTP client", "rcnssvc", "GET", "/v1/catalog/methods", nil, http.StatusForbidden},
		{"no identity", "no URI", "GET", "/v1/catalog/methods", nil, http.StatusForbidden},
		{"a system forging the forwarded caller", "system", "POST", "/v1/catalog/endpoints", http.Header{
			"Grpc-Metadata-Agtp-Gateway-Caller": {"operator/admin"}, "Grpc-Metadata-Agtp-Gateway-Token": {strings.Repeat("0", 64)},
		}, http.StatusForbidden},
	} {
		t.Run("REST: "+tc.name, func(t *testing.T) {
			writes := s.catalog.writes
			if got := rest(t, ids[tc.who], tc.method, tc.path, tc.header); got != tc.want {
				t.Fatalf("%s %s = %d, want %d", tc.method, tc.path, got, tc.want)
			}
			if tc.want != http.StatusOK && s.catalog.writes != writes {
				t.Fatal("a refused write reached the handler")
			}
		})
	}
}
