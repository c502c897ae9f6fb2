// Package httpsapi is the front door's two HTTPS planes.
//
// The public listener serves what agents and the public need: the
// organisation's /.well-known/agtp bootstrap document (core §6.1.14), the
// JWKS that verifies Attribution-Records, health and readiness, and the
// Agent Gateway Protocol binding (frontdoor/internal/agp). It asks for no
// client certificate.
//
// The admin listener serves the REST routes of the internal services'
// APIs (grpc-gateway) and its own health, to callers with a client
// certificate from the suite CA only. The internal APIs are operator
// tools (registering agents, revoking keys, reading audit chains); on a
// listener of their own they can stay on loopback or a private network,
// and a caller without a suite certificate is refused at the handshake,
// before any HTTP is parsed, instead of by a check on the public port.
package httpsapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
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
	"github.com/agtpsuite/agtp/services/kit"
)

// Options configure the public listener.
type Options struct {
	// Domain is the organisation's domain; AGTPHost the front door's
	// AGTP authority (host:port).
	Domain   string
	AGTPHost string
	// Ready reports whether the front door can serve AGTP.
	Ready func() bool
	// Audit is auditsvc's connection, for the JWKS.
	Audit *grpc.ClientConn
	Log   *slog.Logger
	// AGP, when set, adds the Agent Gateway Protocol's routes (/agp/...,
	// /health, /keys; docs/agp.md).
	AGP interface{ Register(*http.ServeMux) }
}

// AdminOptions configure the admin listener: the internal services'
// connections whose REST routes it serves. A nil connection serves none
// (rcnssvc is optional).
type AdminOptions struct {
	Catalog, Identity, Policy, Audit, RCNS *grpc.ClientConn
}

// TLSConfig is the public listener's TLS configuration. It presents the
// front door's public AGTP server certificate (getCert: the AGTP
// listener's reloader, so both rotate together), never the internal
// service certificate, which only the suite's own services trust. It asks
// for no client certificate: AGP authenticates with API keys and the
// public documents need nothing.
func TLSConfig(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: getCert,
		NextProtos:     []string{"h2", "http/1.1"},
	}
}

// AdminTLSConfig is the admin listener's TLS configuration: the suite's
// mutual TLS, as every internal service's REST gateway has. It presents
// the front door's service certificate (issued by the suite CA, which is
// what operators' tools trust) and requires a client certificate from the
// suite CA, both re-read when their files change.
func AdminTLSConfig(m *kit.MTLS) *tls.Config {
	cfg := m.ServerConfig()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	return cfg
}

// Handler builds the public listener's handler.
func Handler(o Options) http.Handler {
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
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if o.Ready != nil && !o.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	// A client looking for the internal APIs here is told where they are
	// rather than given a bare 404; the admin address itself is not
	// published to the public.
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{
			"error":       "not-found",
			"explanation": "the internal APIs are not served on the public listener: they are on the front door's admin listener (AGTP_ADMIN_ADDR), with a client certificate from the suite CA",
		})
	})
	if o.AGP != nil {
		o.AGP.Register(mux)
	}
	return mux
}

// AdminHandler builds the admin listener's handler: the REST routes of
// the internal services' APIs under /v1/, and /healthz. Who may call is
// decided by AdminTLSConfig at the handshake.
func AdminHandler(ctx context.Context, o AdminOptions) (http.Handler, error) {
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
			return nil, fmt.Errorf("register REST routes: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", gw)
	mux.HandleFunc("GET /healthz", healthz)
	return mux, nil
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
