// Package httpsapi is the front door's HTTPS side: the organisation's
// /.well-known/agtp bootstrap document (core §6.1.14), the JWKS that
// verifies Attribution-Records, health and readiness, the suite's REST
// gateway routes, which need a client certificate from the suite CA, and
// the Agent Gateway Protocol binding (frontdoor/internal/agp).
package httpsapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
)

// Options configure the HTTPS side.
type Options struct {
	// Domain is the organisation's domain; AGTPHost the front door's
	// AGTP authority (host:port).
	Domain   string
	AGTPHost string
	// Ready reports whether the front door can serve AGTP.
	Ready func() bool
	// Conns are the internal services' connections, for the REST routes
	// and the JWKS.
	Catalog, Identity, Policy, Audit, RCNS *grpc.ClientConn
	Log                                    *slog.Logger
	// AGP, when set, adds the Agent Gateway Protocol's routes (/agp/...,
	// /health, /keys; docs/agp.md).
	AGP interface{ Register(*http.ServeMux) }
}

// TLSConfig is the HTTPS listener's TLS configuration. The listener is
// public, so it presents the front door's public AGTP server certificate
// (getCert: the AGTP listener's reloader, so both rotate together), never
// the internal service certificate, which only the suite's own services
// trust. Client certificates stay optional and are verified against
// suiteCAs: the REST routes admit only a certificate from the suite CA
// (requireClientCert), while AGP and the public documents need none.
func TLSConfig(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), suiteCAs *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: getCert,
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      suiteCAs,
		NextProtos:     []string{"h2", "http/1.1"},
	}
}

// Handler builds the HTTPS handler.
func Handler(ctx context.Context, o Options) (http.Handler, error) {
	mux := http.NewServeMux()
	started := time.Now().UTC()
	mux.HandleFunc("GET /.well-known/agtp", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"agtp_version":   "1.0",
			"endpoint":       "agtp://" + o.AGTPHost,
			"namespace_root": "agtp://" + o.AGTPHost + "/agents",
			"verification":   map[string]any{"dns_anchor": "_agtp." + o.Domain, "log_anchor": nil},
			"issuer":         "https://" + o.Domain,
			"discovery": map[string]any{
				"jwks":                  "/.well-known/jwks.json",
				"well_known_updated_at": started.Format(time.RFC3339),
			},
		})
	})
	mux.HandleFunc("GET /.well-known/jwks.json", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		keys, err := auditv1.NewAuditServiceClient(o.Audit).GetSigningKeys(ctx, &auditv1.GetSigningKeysRequest{})
		if err != nil {
			o.Log.Warn("jwks unavailable", "error", err)
			http.Error(w, "signing keys are unavailable; retry shortly", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = w.Write(keys.GetJwksJson())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if o.Ready != nil && !o.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})

	gw := runtime.NewServeMux()
	regs := []struct {
		conn *grpc.ClientConn
		reg  func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error
	}{
		{o.Catalog, catalogv1.RegisterCatalogServiceHandler},
		{o.Identity, identityv1.RegisterIdentityServiceHandler},
		{o.Policy, policyv1.RegisterPolicyServiceHandler},
		{o.Policy, agpv1.RegisterAgpServiceHandler},
		{o.Audit, auditv1.RegisterAuditServiceHandler},
		{o.RCNS, rcnsv1.RegisterRcnsServiceHandler},
	}
	for _, r := range regs {
		if r.conn == nil {
			continue
		}
		if err := r.reg(ctx, gw, r.conn); err != nil {
			return nil, err
		}
	}
	mux.Handle("/v1/", requireClientCert(gw))
	if o.AGP != nil {
		o.AGP.Register(mux)
	}
	return mux, nil
}

// requireClientCert admits only callers that presented a certificate the
// TLS layer verified against the suite CA.
func requireClientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			writeJSON(w, http.StatusUnauthorized, map[string]string{
				"error": "client-certificate-required", "explanation": "the REST API needs a client certificate issued by the suite CA",
			})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
