package access

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/url"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// BenchmarkGuardAdmit is the access check every internal RPC pays: the
// identity read from the verified certificate and the table lookup.
func BenchmarkGuardAdmit(b *testing.B) {
	rec, _ := NewRecognizer("", nil)
	g, _ := NewGuard(rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	_ = g.Add(Table{"/x.S/M": {Services: []string{"frontdoor"}}})
	u, _ := url.Parse("spiffe://agtp.internal/service/frontdoor")
	cert := &x509.Certificate{URIs: []*url.URL{u}}
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}}})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.admit(ctx, "/x.S/M"); err != nil {
			b.Fatal(err)
		}
	}
}
