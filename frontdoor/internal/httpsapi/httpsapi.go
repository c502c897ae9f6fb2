// Package httpsapi is the front door's public HTTPS listener.
//
// It serves what agents and the public need: the organisation's
// /.well-known/agtp bootstrap document (core §6.1.14), the JWKS that
// verifies Attribution-Records, health and readiness, and the Agent
// Gateway Protocol binding (frontdoor/internal/agp). It asks for no
// client certificate.
//
// The internal APIs' REST routes are not here: each service serves its
// own on its mutual-TLS REST gateway, where the service's access table
// decides who may call each route (docs/access.md). The front door never
// relays them, so it never speaks for an operator.
package httpsapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/grpc"

	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// Options configure the public listener.
type Options struct {
	// Domain is the organisation's domain: the Form 3 namespace root
	// agtp://DOMAIN/agents. PublicHost is where agents reach the front
	// door's AGTP listener (a host, with a port when it is not 4480).
	Domain     string
	PublicHost string
	// Ready reports whether the front door can serve AGTP.
	Ready func() bool
	// Audit is auditsvc's connection, for the JWKS; Identity is
	// identitysvc's, for the Agent Namespace Document.
	Audit    *grpc.ClientConn
	Identity *grpc.ClientConn
	Log      *slog.Logger
	// AGP, when set, adds the Agent Gateway Protocol's routes (/agp/...,
	// /health, /keys; docs/agp.md).
	AGP interface{ Register(*http.ServeMux) }
}

// servedHost is the name the links of the bootstrap document use: the
// request's Host when the connection was made for it (the TLS server name
// the client asked for, which the certificate had to serve, or for a
// client that asked for none, the address it connected to), else domain.
// A Host header alone names whatever the client likes, and the document
// is cacheable: links taken from it could send agents to another JWKS.
func servedHost(r *http.Request, domain string) string {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	switch {
	case r.TLS != nil && r.TLS.ServerName != "":
		if strings.EqualFold(host, r.TLS.ServerName) {
			return r.Host
		}
	default:
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
		if ap, ok := addrPort(local); ok && err == nil && ip.Unmap() == ap.Addr().Unmap() {
			return r.Host
		}
	}
	return domain
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	return ta.AddrPort(), true
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

// Handler builds the public listener's handler.
func Handler(o Options) http.Handler {
	mux := http.NewServeMux()
	started := time.Now().UTC()
	// The bootstrap document of core §6.1.14. The namespace document it
	// links to is served here too, at the name the request used, so the
	// link works for whichever name the organisation publishes.
	mux.HandleFunc("GET /.well-known/agtp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		writeJSON(w, http.StatusOK, map[string]any{
			"agtp_version":   agtp.DocumentVersion,
			"endpoint":       "agtp://" + o.PublicHost + "/agents",
			"namespace_root": "agtp://" + o.Domain + "/agents",
			"verification":   map[string]any{"dns_anchor": "_agtp." + o.Domain, "log_anchor": nil},
			"issuer":         "https://" + o.Domain,
			"discovery": map[string]any{
				"namespace_document":    "https://" + servedHost(r, o.Domain) + "/agents.json",
				"jwks":                  "https://" + servedHost(r, o.Domain) + "/.well-known/jwks.json",
				"well_known_updated_at": started.Format(time.RFC3339),
			},
		})
	})
	mux.HandleFunc("GET /agents.json", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		doc, err := identityv1.NewIdentityServiceClient(o.Identity).GetNamespaceDocument(ctx, &identityv1.GetNamespaceDocumentRequest{})
		if err != nil {
			o.Log.Warn("namespace document unavailable", "error", err)
			http.Error(w, "the namespace document is unavailable; retry shortly", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", doc.GetContentType())
		w.Header().Set("Cache-Control", "max-age=300")
		//lint:ignore SA1019 the first release's identitysvc sends the document only as bytes
		_, _ = w.Write(jsondoc.PreferString(doc.GetDocument(), doc.GetDocumentJson()))
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
		//lint:ignore SA1019 the first release's auditsvc sends the JWKS only as bytes
		jwks, err := jsondoc.PreferStruct(keys.GetJwks(), keys.GetJwksJson())
		if err != nil {
			o.Log.Warn("jwks unreadable", "error", err)
			http.Error(w, "signing keys are unavailable; retry shortly", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		// Public keys: any page may fetch them, so that a reader can
		// verify records in the browser (docs/console.md).
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = w.Write(jwks)
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
	// rather than given a bare 404; their addresses are not published to
	// the public.
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{
			"error":       "not-found",
			"explanation": "the internal APIs are not served on the public listener: each service serves its REST routes on its own gateway, to the client certificates its access table admits",
		})
	})
	if o.AGP != nil {
		o.AGP.Register(mux)
	}
	return mux
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
