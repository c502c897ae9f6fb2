package frontdoor

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/inspect"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/frontdoor/internal/outputcheck"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/outbound"
)

// Config is the front door's configuration.
type Config struct {
	kit.Common
	// AGTPAddr is where AGTP is served: TLS over TCP and, when QUIC is on,
	// QUIC over UDP on the same port.
	AGTPAddr string
	// QUIC turns on the QUIC listener.
	QUIC bool
	// HTTPSAddr is the public HTTPS listener: /.well-known/agtp, the
	// JWKS, health and AGP; empty disables it.
	HTTPSAddr string
	// ServerCertFile and ServerKeyFile are the AGTP server certificate,
	// re-read when they change.
	ServerCertFile string
	ServerKeyFile  string
	// AgentCAFile is a PEM bundle of agent CAs (identitysvc's registrar
	// CA, an organisation's own PKI) whose Agent Certificates prove their
	// Agent-ID; issuer-signed certificates need none. Never the suite's
	// service CA.
	AgentCAFile string
	// CallerProof is what a bare Agent-ID header is worth: required,
	// informational or off (docs/identity.md, "Proven callers").
	CallerProof string
	// TrustedPeerCAFile and TrustedPeerNames name the other AGTP servers
	// whose word on their own agents this front door takes: a client
	// certificate that chains to the bundle and carries one of the names
	// (a DNS SAN) proves the Agent-ID header it sends (a remote DELEGATE,
	// a NOTIFY delivered from that suite). Both or neither.
	TrustedPeerCAFile string
	TrustedPeerNames  []string
	// ServerID is stamped on every response.
	ServerID string
	// OwnerID is the principal accountable for this server.
	OwnerID string
	// Domain is the organisation domain published in /.well-known/agtp.
	Domain string
	// PublicHost is where agents reach the AGTP listener, as published in
	// /.well-known/agtp: a host name, with a port only when it is not
	// 4480. Empty derives it from the listen address (the domain when
	// that is a wildcard address).
	PublicHost string
	// Limits bound what a peer can send.
	Limits agtp.Limits
	// IdleTimeout closes idle connections; HeaderTimeout bounds the time
	// to receive a request's header section.
	IdleTimeout   time.Duration
	HeaderTimeout time.Duration
	// MaxConnections and MaxInFlight bound concurrency.
	MaxConnections int
	MaxInFlight    int
	// BodyBudget bounds the bytes of request bodies held at once across
	// all connections (docs/frontdoor-transport.md).
	BodyBudget int64
	// MaxConnectionsPerIP bounds one source's connections (an IPv4
	// address or an IPv6 /64); 0 means no limit (behind a load balancer
	// that hides client addresses).
	MaxConnectionsPerIP int
	// MaxHandshakes bounds TLS and QUIC handshakes in progress;
	// HandshakeTimeout bounds one.
	MaxHandshakes    int
	HandshakeTimeout time.Duration
	// RequestTimeout bounds the pipeline of one request.
	RequestTimeout time.Duration
	// InspectACL is public, agent_only or operator_only.
	InspectACL string
	// OutputValidation is how many results of in-process handlers are
	// checked against their endpoint's output schema: off, sampled (one
	// in 100, the default) or on (docs/frontdoor.md, "Output validation").
	OutputValidation string
	// OperatorFingerprints are client-key fingerprints with operator rights.
	OperatorFingerprints []string
	// Demo registers the demo domain's handlers and recipes.
	Demo bool
	// RecipesDir holds composition recipes (docs/bindings.md), loaded at
	// start-up; empty loads none besides the demo's.
	RecipesDir string
	// UpstreamCAFile adds roots trusted for external_service upstreams to
	// the system roots.
	UpstreamCAFile string
	// PeerCAFile adds roots trusted for other AGTP servers this front
	// door calls (a DELEGATE to a sub-agent on another host) to the
	// system roots.
	PeerCAFile string
	// Outbound lists the destinations callers may name (escalation
	// webhooks, DELEGATE hosts) and whether they may be private
	// (docs/mechanics.md, "Outbound destinations").
	Outbound outbound.Options
	// LookupEnv resolves ${VAR} placeholders of external_service
	// bindings. ApplyEnv keeps the lookup it is given (os.LookupEnv in
	// the command layer); nil resolves none.
	LookupEnv func(string) (string, bool)
	// AGP serves the Agent Gateway Protocol on the HTTPS side
	// (docs/agp.md).
	AGP bool
	// AGPKeyCacheTTL is how long a resolved AGP API key is trusted before
	// policysvc is asked again. Keys are cached only while the key watch is
	// live, and a revocation evicts them at once: this is a safety net.
	AGPKeyCacheTTL time.Duration
}

// DefaultConfig returns the defaults used by make run.
func DefaultConfig() Config {
	return Config{
		Common:           kit.DefaultCommon("frontdoor", "127.0.0.1:7100", ""),
		AGTPAddr:         "127.0.0.1:4480",
		QUIC:             true,
		HTTPSAddr:        "127.0.0.1:4443",
		ServerID:         "agtp.localhost",
		OwnerID:          "operator@localhost",
		Domain:           "localhost",
		Limits:           agtp.DefaultLimits(),
		IdleTimeout:      agtp.DefaultIdleTimeout,
		HeaderTimeout:    10 * time.Second,
		MaxConnections:   20000,
		MaxInFlight:      4096,
		BodyBudget:       transport.DefaultBodyBudget,
		RequestTimeout:   15 * time.Second,
		InspectACL:       "agent_only",
		OutputValidation: string(outputcheck.Default),
		CallerProof:      string(callerproof.Required),
		AGP:              true,
		AGPKeyCacheTTL:   10 * time.Second,

		// The transport's defaults, spelled out for the flag help.
		MaxConnectionsPerIP: transport.DefaultMaxConnsPerIP,
		MaxHandshakes:       transport.DefaultMaxHandshakes,
		HandshakeTimeout:    transport.DefaultHandshakeTimeout,
	}
}

// BindFlags registers the front door's flags.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Common.BindFlags(fs)
	fs.StringVar(&c.AGTPAddr, "agtp-addr", c.AGTPAddr, "AGTP listen address, TCP and UDP (env AGTP_ADDR)")
	fs.BoolVar(&c.QUIC, "quic", c.QUIC, "serve AGTP over QUIC too (env AGTP_QUIC)")
	fs.StringVar(&c.HTTPSAddr, "https-addr", c.HTTPSAddr, "public HTTPS listen address for .well-known, JWKS, health and AGP (env HTTPS_ADDR)")
	fs.StringVar(&c.ServerCertFile, "server-cert", c.ServerCertFile, "AGTP server certificate, PEM (env AGTP_SERVER_CERT_FILE)")
	fs.StringVar(&c.ServerKeyFile, "server-key", c.ServerKeyFile, "AGTP server key, PEM (env AGTP_SERVER_KEY_FILE)")
	fs.StringVar(&c.AgentCAFile, "agent-ca", c.AgentCAFile, "PEM bundle of agent CAs whose Agent Certificates prove an Agent-ID, never the suite CA (env AGTP_AGENT_CA_FILE)")
	fs.StringVar(&c.TrustedPeerCAFile, "trusted-peer-ca", c.TrustedPeerCAFile, "PEM bundle of the CAs of trusted peer AGTP servers, with -trusted-peer-names (env AGTP_TRUSTED_PEER_CA_FILE)")
	fs.Func("trusted-peer-names", "comma-separated DNS names of trusted peer AGTP servers (env AGTP_TRUSTED_PEER_NAMES)", func(v string) error {
		c.TrustedPeerNames = splitList(v)
		return nil
	})
	fs.StringVar(&c.CallerProof, "caller-proof", c.CallerProof, "what a bare Agent-ID header is worth: required, informational or off (loopback only) (env AGTP_CALLER_PROOF)")
	fs.StringVar(&c.ServerID, "server-id", c.ServerID, "Server-ID stamped on every response (env AGTP_SERVER_ID)")
	fs.StringVar(&c.Domain, "domain", c.Domain, "organisation domain: the Form 3 namespace root agtp://DOMAIN/agents published in /.well-known/agtp (env AGTP_DOMAIN)")
	fs.StringVar(&c.PublicHost, "public-host", c.PublicHost, "host[:port] agents reach the AGTP listener at, published in /.well-known/agtp; empty derives it from -agtp-addr (env AGTP_PUBLIC_HOST)")
	fs.StringVar(&c.OwnerID, "owner-id", c.OwnerID, "Owner-ID of this server (env AGTP_OWNER_ID)")
	fs.StringVar(&c.InspectACL, "inspect-acl", c.InspectACL, "INSPECT read ACL: public, agent_only or operator_only (env AGTP_INSPECT_ACL)")
	fs.StringVar(&c.OutputValidation, "output-validation", c.OutputValidation, "registered function results checked against their output schema: off, sampled (1 in 100) or on; upstream, composition and MCP results are always checked (env AGTP_OUTPUT_VALIDATION)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "close connections idle this long (env AGTP_IDLE_TIMEOUT)")
	fs.DurationVar(&c.HeaderTimeout, "header-timeout", c.HeaderTimeout, "time allowed to send a request's header section (env AGTP_HEADER_TIMEOUT)")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "time allowed for the pipeline of one request (env AGTP_REQUEST_TIMEOUT)")
	fs.IntVar(&c.MaxConnections, "max-connections", c.MaxConnections, "concurrent connection limit (env AGTP_MAX_CONNECTIONS)")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "requests in flight across all connections (env AGTP_MAX_IN_FLIGHT)")
	fs.Int64Var(&c.BodyBudget, "body-budget", c.BodyBudget, "bytes of request bodies held at once across all connections (env AGTP_BODY_BUDGET)")
	fs.IntVar(&c.MaxConnectionsPerIP, "max-connections-per-ip", c.MaxConnectionsPerIP, "connections from one IPv4 address or IPv6 /64, 0 for no limit (env AGTP_MAX_CONNECTIONS_PER_IP)")
	fs.IntVar(&c.MaxHandshakes, "max-handshakes", c.MaxHandshakes, "TLS and QUIC handshakes in progress (env AGTP_MAX_HANDSHAKES)")
	fs.DurationVar(&c.HandshakeTimeout, "handshake-timeout", c.HandshakeTimeout, "time allowed for a TLS or QUIC handshake (env AGTP_HANDSHAKE_TIMEOUT)")
	fs.BoolVar(&c.Demo, "demo", c.Demo, "register the demo domain's handlers and recipes (env AGTP_DEMO)")
	fs.StringVar(&c.RecipesDir, "recipes-dir", c.RecipesDir, "directory of composition recipes (env AGTP_RECIPES_DIR)")
	fs.StringVar(&c.UpstreamCAFile, "upstream-ca", c.UpstreamCAFile, "extra CA roots for external_service upstreams, PEM (env AGTP_UPSTREAM_CA_FILE)")
	fs.StringVar(&c.PeerCAFile, "peer-ca", c.PeerCAFile, "extra CA roots for other AGTP servers (remote DELEGATE), PEM (env AGTP_PEER_CA_FILE)")
	c.Outbound.BindFlags(fs)
	fs.BoolVar(&c.AGP, "agp", c.AGP, "serve the Agent Gateway Protocol (/agp/...) on the HTTPS side (env AGTP_AGP)")
	fs.DurationVar(&c.AGPKeyCacheTTL, "agp-key-cache-ttl", c.AGPKeyCacheTTL, "how long a resolved AGP API key is cached at most; revocations evict it at once (env AGTP_AGP_KEY_CACHE_TTL)")
}

// ApplyEnv reads the front door's environment.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	if err := c.Common.ApplyEnv(lookup); err != nil {
		return err
	}
	c.LookupEnv = lookup
	for key, dst := range map[string]*string{
		"AGTP_RECIPES_DIR": &c.RecipesDir, "AGTP_UPSTREAM_CA_FILE": &c.UpstreamCAFile, "AGTP_PEER_CA_FILE": &c.PeerCAFile,
		"AGTP_ADDR": &c.AGTPAddr, "HTTPS_ADDR": &c.HTTPSAddr, "AGTP_SERVER_CERT_FILE": &c.ServerCertFile,
		"AGTP_SERVER_KEY_FILE": &c.ServerKeyFile, "AGTP_SERVER_ID": &c.ServerID, "AGTP_INSPECT_ACL": &c.InspectACL,
		"AGTP_AGENT_CA_FILE": &c.AgentCAFile, "AGTP_OWNER_ID": &c.OwnerID, "AGTP_CALLER_PROOF": &c.CallerProof,
		"AGTP_TRUSTED_PEER_CA_FILE": &c.TrustedPeerCAFile, "AGTP_PUBLIC_HOST": &c.PublicHost,
		"AGTP_DOMAIN": &c.Domain, "AGTP_OUTPUT_VALIDATION": &c.OutputValidation,
	} {
		if v, ok := lookup(key); ok && v != "" {
			*dst = v
		}
	}
	for key, dst := range map[string]*time.Duration{
		"AGTP_IDLE_TIMEOUT": &c.IdleTimeout, "AGTP_HEADER_TIMEOUT": &c.HeaderTimeout, "AGTP_REQUEST_TIMEOUT": &c.RequestTimeout,
		"AGTP_AGP_KEY_CACHE_TTL": &c.AGPKeyCacheTTL, "AGTP_HANDSHAKE_TIMEOUT": &c.HandshakeTimeout,
	} {
		if v, ok := lookup(key); ok && v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			*dst = d
		}
	}
	for key, dst := range map[string]*bool{"AGTP_DEMO": &c.Demo, "AGTP_QUIC": &c.QUIC, "AGTP_AGP": &c.AGP} {
		if v, ok := lookup(key); ok && v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			*dst = b
		}
	}
	for key, dst := range map[string]*int{
		"AGTP_MAX_CONNECTIONS": &c.MaxConnections, "AGTP_MAX_IN_FLIGHT": &c.MaxInFlight,
		"AGTP_MAX_CONNECTIONS_PER_IP": &c.MaxConnectionsPerIP, "AGTP_MAX_HANDSHAKES": &c.MaxHandshakes,
	} {
		if v, ok := lookup(key); ok && v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			*dst = n
		}
	}
	if v, ok := lookup("AGTP_BODY_BUDGET"); ok && v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("AGTP_BODY_BUDGET: %w", err)
		}
		c.BodyBudget = n
	}
	if v, ok := lookup("AGTP_TRUSTED_PEER_NAMES"); ok && v != "" {
		c.TrustedPeerNames = splitList(v)
	}
	if v, ok := lookup("AGTP_OPERATOR_FINGERPRINTS"); ok && v != "" {
		c.OperatorFingerprints = splitList(v)
	}
	return c.Outbound.ApplyEnv(lookup)
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	errs := []error{c.Common.Validate()}
	if c.AGTPAddr == "" {
		errs = append(errs, errors.New("agtp address is empty"))
	}
	if c.ServerCertFile == "" || c.ServerKeyFile == "" {
		errs = append(errs, errors.New("the AGTP server certificate and key are required (AGTP_SERVER_CERT_FILE, AGTP_SERVER_KEY_FILE)"))
	}
	if c.ServerID == "" {
		errs = append(errs, errors.New("server id is empty"))
	}
	if u, err := agtp.ParseURI("agtp://" + c.Domain + "/agents/a"); err != nil || u.Port != 0 || u.Host != strings.ToLower(c.Domain) {
		errs = append(errs, fmt.Errorf("domain %q is not a domain name (Form 3 URIs agtp://DOMAIN/agents/NAME have no port)", c.Domain))
	}
	if c.PublicHost != "" {
		if u, err := url.Parse("agtp://" + c.PublicHost); err != nil || u.Host != c.PublicHost || u.User != nil {
			errs = append(errs, fmt.Errorf("public host %q is not a host[:port]", c.PublicHost))
		}
	}
	if _, err := inspect.ParseMode(c.InspectACL); err != nil {
		errs = append(errs, err)
	}
	if _, err := outputcheck.ParseMode(c.OutputValidation); err != nil {
		errs = append(errs, err)
	}
	if mode, err := callerproof.ParseMode(c.CallerProof); err != nil {
		errs = append(errs, err)
	} else if mode == callerproof.Off && !c.publicOnLoopback() {
		errs = append(errs, fmt.Errorf("caller_proof off takes bare Agent-ID headers as proof; it is allowed only when every listener is on loopback (agtp %s, https %s)", c.AGTPAddr, c.HTTPSAddr))
	}
	if (c.TrustedPeerCAFile == "") != (len(c.TrustedPeerNames) == 0) {
		errs = append(errs, errors.New("trusted peers need both a CA bundle (AGTP_TRUSTED_PEER_CA_FILE) and their names (AGTP_TRUSTED_PEER_NAMES)"))
	}
	if c.AgentCAFile != "" && c.AgentCAFile == c.CAFile {
		errs = append(errs, errors.New("the agent CA bundle is the suite's service CA: agents must never be proven by service certificates"))
	}
	for _, p := range []string{"catalogsvc", "identitysvc", "policysvc", "auditsvc"} {
		if _, err := c.Peer(p); err != nil {
			errs = append(errs, err)
		}
	}
	if c.IdleTimeout <= 0 || c.HeaderTimeout <= 0 || c.RequestTimeout <= 0 || c.HandshakeTimeout <= 0 {
		errs = append(errs, errors.New("timeouts must be positive"))
	}
	if c.MaxConnections <= 0 || c.MaxInFlight <= 0 || c.MaxHandshakes <= 0 {
		errs = append(errs, errors.New("connection, handshake and in-flight limits must be positive"))
	}
	if err := c.Outbound.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.BodyBudget < c.Limits.MaxBody || c.BodyBudget <= 0 {
		errs = append(errs, fmt.Errorf("the body budget %d must be positive and at least the body limit %d", c.BodyBudget, c.Limits.MaxBody))
	}
	if c.MaxConnectionsPerIP < 0 {
		errs = append(errs, errors.New("the per-address connection limit must not be negative (0 means no limit)"))
	}
	return errors.Join(errs...)
}

// looser lists, one line each, the settings of a validated c that are
// looser than the defaults, each naming its setting; the front door logs
// them as warnings at start-up.
func (c Config) looser() []string {
	var out []string
	switch mode, _ := callerproof.ParseMode(c.CallerProof); mode {
	case callerproof.Off:
		out = append(out, "caller_proof is off: a bare Agent-ID header is taken as the caller's identity and attributed as such; for development on loopback only (AGTP_CALLER_PROOF, -caller-proof; default required)")
	case callerproof.Informational:
		out = append(out, "caller_proof is informational: a bare Agent-ID header is taken as the caller's identity on informational (read-only) endpoints (AGTP_CALLER_PROOF, -caller-proof; default required)")
	}
	if mode, _ := inspect.ParseMode(c.InspectACL); mode == inspect.Public {
		out = append(out, "the INSPECT read ACL is public: any caller, anonymous ones included, may read any agent's records (AGTP_INSPECT_ACL, -inspect-acl; default agent_only)")
	}
	if c.MaxConnectionsPerIP == 0 {
		out = append(out, "max_connections_per_ip is 0: one client address may hold every connection, with no per-address limit; only behind a load balancer that hides client addresses (AGTP_MAX_CONNECTIONS_PER_IP, -max-connections-per-ip)")
	}
	if c.Demo {
		out = append(out, "demo is on: the demo domain's handlers and recipes are served; for development only (AGTP_DEMO, -demo)")
	}
	return append(out, c.Outbound.Looser()...)
}

// PublicAGTPHost is the authority agents are told to use: PublicHost, or
// the listener's address (listen, the bound one) with the default port
// left out, or the domain when the listener is bound to every address.
func (c Config) PublicAGTPHost(listen string) string {
	if c.PublicHost != "" {
		return c.PublicHost
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = c.Domain
	}
	if port == strconv.Itoa(agtp.DefaultPort) {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, port)
}

// publicOnLoopback reports whether every listener a stranger could reach
// is bound to a loopback address.
func (c Config) publicOnLoopback() bool {
	for _, addr := range []string{c.AGTPAddr, c.HTTPSAddr} {
		if addr != "" && !kit.IsLoopbackAddr(addr) {
			return false
		}
	}
	return true
}

// perIPLimit maps the configured per-address limit, where 0 means none,
// to the transport's, where 0 means its default and negative none.
func perIPLimit(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// splitList reads a comma-separated list, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
