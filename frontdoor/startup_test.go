package frontdoor

import (
	"context"
	"io"
	"testing"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/outbound"
	"github.com/agtpsuite/agtp/services/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestStartupWarnsOfLooserSettings starts the front door with each
// setting that is looser than its default and checks that the start-up
// log says so, once, as a warning; the defaults, and outbound lists that
// name hosts exactly, warn of none of them.
func TestStartupWarnsOfLooserSettings(t *testing.T) {
	warnings := map[string]string{
		"caller_proof off":           "caller_proof is off: a bare Agent-ID header is taken as the caller's identity",
		"caller_proof informational": "caller_proof is informational: a bare Agent-ID header is taken as the caller's identity on informational (read-only) endpoints (AGTP_CALLER_PROOF",
		"public INSPECT":             "the INSPECT read ACL is public: any caller, anonymous ones included, may read any agent's records (AGTP_INSPECT_ACL",
		"no per-address limit":       "max_connections_per_ip is 0: one client address may hold every connection, with no per-address limit",
		"demo":                       "demo is on: the demo domain's handlers and recipes are served; for development only (AGTP_DEMO, -demo)",
		"private outbound":           "outbound allow_private is on: caller-named webhooks and AGTP hosts may reach loopback, private and link-local addresses (AGTP_OUTBOUND_ALLOW_PRIVATE",
		"wildcard webhook":           `outbound webhook rule "https://*.hooks.example.com" is a wildcard: callers may name any host under hooks.example.com as a webhook recipient (AGTP_OUTBOUND_WEBHOOKS`,
		"wildcard peer":              `outbound peer rule "*:*" is a wildcard: callers may name any host as a NOTIFY or DELEGATE host (AGTP_OUTBOUND_PEERS`,
	}
	cases := []struct {
		name  string
		adapt func(*Config)
		want  []string
	}{
		{"defaults", func(*Config) {}, nil},
		{"exact outbound hosts", func(c *Config) {
			c.Outbound = outbound.Options{Webhooks: []string{"https://hooks.example.com/agtp", "https://127.0.0.1:*"}, Peers: []string{"peer.example.com", "[::1]:*"}}
		}, nil},
		{"caller_proof off", func(c *Config) { c.CallerProof = "off" }, []string{"caller_proof off"}},
		{"caller_proof informational", func(c *Config) { c.CallerProof = "informational" }, []string{"caller_proof informational"}},
		{"public INSPECT", func(c *Config) { c.InspectACL = "public" }, []string{"public INSPECT"}},
		{"INSPECT ACL left empty", func(c *Config) { c.InspectACL = "" }, []string{"public INSPECT"}},
		{"no per-address limit", func(c *Config) { c.MaxConnectionsPerIP = 0 }, []string{"no per-address limit"}},
		{"demo", func(c *Config) { c.Demo = true }, []string{"demo"}},
		{"private outbound", func(c *Config) { c.Outbound.AllowPrivate = true }, []string{"private outbound"}},
		{"wildcard outbound", func(c *Config) {
			c.Outbound = outbound.Options{Webhooks: []string{"https://hooks.example.com", "https://*.hooks.example.com"}, Peers: []string{"peer.example.com", "*:*"}}
		}, []string{"wildcard webhook", "wildcard peer"}},
	}
	l := testkit.PKI(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.GRPCAddr, cfg.AGTPAddr, cfg.HTTPSAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
			cfg.QUIC, cfg.LogFormat = false, "json"
			cfg.CAFile, cfg.CertFile, cfg.KeyFile = l.CA(), l.Cert("frontdoor"), l.Key("frontdoor")
			cfg.ServerCertFile, cfg.ServerKeyFile = l.Cert(devpki.AGTPServer), l.Key(devpki.AGTPServer)
			// Connections are made on first use, which these never see.
			cfg.Peers = map[string]string{"catalogsvc": "127.0.0.1:1", "identitysvc": "127.0.0.1:1", "policysvc": "127.0.0.1:1", "auditsvc": "127.0.0.1:1"}
			tc.adapt(&cfg)
			log := testkit.StartupLog(t, func() (io.Closer, error) { return New(context.Background(), cfg) })
			testkit.CheckWarnings(t, log, warnings, tc.want)
		})
	}
}

// The public HTTPS listener bounds the time to answer a request, so a
// client that never reads (an HTTP/2 window it never opens) cannot hold
// a connection and its handlers; the front door's REST gateway serves
// watch streams and has no such bound.
func TestPublicListenerHasAWriteDeadline(t *testing.T) {
	l := testkit.PKI(t)
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.AGTPAddr, cfg.HTTPSAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.QUIC = false
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = l.CA(), l.Cert("frontdoor"), l.Key("frontdoor")
	cfg.ServerCertFile, cfg.ServerKeyFile = l.Cert(devpki.AGTPServer), l.Key(devpki.AGTPServer)
	cfg.Peers = map[string]string{"catalogsvc": "127.0.0.1:1", "identitysvc": "127.0.0.1:1", "policysvc": "127.0.0.1:1", "auditsvc": "127.0.0.1:1"}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.https.WriteTimeout; got <= cfg.RequestTimeout {
		t.Fatalf("public listener write timeout %v, want more than the request timeout %v and not unbounded", got, cfg.RequestTimeout)
	}
}
