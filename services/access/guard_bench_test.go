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
	"google.golang.org/grpc/metadata"
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
	// What a gRPC server puts in every call's context.
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(":authority", "policysvc:9090", "content-type", "application/grpc",
		"user-agent", "grpc-go/1.79.0", "grpc-timeout", "4999m"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.admit(ctx, "/x.S/M"); err != nil {
			b.Fatal(err)
		}
	}
}
