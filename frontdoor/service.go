// Package frontdoor is the AGTP front door: it terminates AGTP over TLS/TCP
// and QUIC, runs the request pipeline against the internal services, and
// serves the public HTTPS listener (/.well-known/agtp, JWKS, health, AGP).
package frontdoor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/services/addrlimit"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"

	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	"github.com/agtpsuite/agtp/frontdoor/demo"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/agentcache"
	"github.com/agtpsuite/agtp/frontdoor/internal/agp"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/httpsapi"
	"github.com/agtpsuite/agtp/frontdoor/internal/outputcheck"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	"github.com/agtpsuite/agtp/policysvc/policyclient"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/batchrpc"
	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/outbound"
)

// HealthName is the gRPC health service name of the front door.
const HealthName = "agtp.frontdoor"

// Service is a running front door.
type Service struct {
	cfg       Config
	base      *kit.Base
	conns     []*grpc.ClientConn
	catalog   *catalogstate.Store
	agents    *agentcache.Cache
	decisions *policyclient.Reusing
	pipeline  *pipeline.Pipeline
	transport *transport.Server
	catalogC  catalogv1.CatalogServiceClient
	https     *http.Server
	httpsLn   net.Listener
	ready     chan struct{}
	bindings  *pipeline.Bindings
	peers     *client.Client
	outbound  *pipeline.Outbound
	agp       *agp.Handler
}

// Option adjusts a front door being built.
type Option func(*options)

type options struct {
	handlers *handler.Registry
	recipes  []fs.FS
}

// WithHandlers supplies the registry of registered_function handlers, so
// an operator can build a front door with their own functions.
func WithHandlers(reg *handler.Registry) Option {
	return func(o *options) { o.handlers = reg }
}

// New provisions the front door; nothing listens on failure.
func New(ctx context.Context, cfg Config, opts ...Option) (_ *Service, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("frontdoor config: %w", err)
	}
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	if o.handlers == nil {
		o.handlers = handler.NewRegistry()
	}
	if cfg.Demo {
		demo.Register(o.handlers)
	}
	base, err := kit.NewBase(ctx, cfg.Common)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, base: base, catalog: &catalogstate.Store{}, ready: make(chan struct{})}
	// Every setting looser than the default says so once at start-up.
	for _, w := range cfg.looser() {
		base.Log.Warn(w)
	}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	dial := func(name string) (*grpc.ClientConn, error) {
		conn, err := base.Server.Dial(name)
		if err != nil {
			return nil, err
		}
		s.conns = append(s.conns, conn)
		return conn, nil
	}
	catalogConn, err := dial("catalogsvc")
	if err != nil {
		return nil, err
	}
	identityConn, err := dial("identitysvc")
	if err != nil {
		return nil, err
	}
	policyConn, err := dial("policysvc")
	if err != nil {
		return nil, err
	}
	s.decisions = policyclient.NewReusing(policyclient.NewBatching(policyv1.NewPolicyServiceClient(policyConn), batchrpc.Options{}), 0)
	auditConn, err := dial("auditsvc")
	if err != nil {
		return nil, err
	}
	var rcnsConn *grpc.ClientConn
	var rcnsClient rcnsv1.RcnsServiceClient
	if _, perr := cfg.Peer("rcnssvc"); perr == nil {
		if rcnsConn, err = dial("rcnssvc"); err != nil {
			return nil, err
		}
		rcnsClient = rcnsv1.NewRcnsServiceClient(rcnsConn)
	}
	s.catalogC = catalogv1.NewCatalogServiceClient(catalogConn)
	identityClient := identityv1.NewIdentityServiceClient(identityConn)
	s.agents = agentcache.New(identityClient, base.Log)

	if s.bindings, err = newBindings(cfg, o, rcnsClient, base.Telemetry.TracerProvider, base.Log); err != nil {
		return nil, err
	}
	if s.outbound, err = newOutbound(cfg, base.Telemetry.TracerProvider, base.Log); err != nil {
		return nil, err
	}
	if s.peers, err = newPeerClient(cfg, s.outbound.Policy); err != nil {
		return nil, err
	}
	outputMode, err := outputcheck.ParseMode(cfg.OutputValidation)
	if err != nil {
		return nil, err
	}
	tracer := base.Telemetry.TracerProvider.Tracer("github.com/agtpsuite/agtp/frontdoor")
	meter := base.Telemetry.MeterProvider.Meter("github.com/agtpsuite/agtp/frontdoor")
	s.pipeline, err = pipeline.New(pipeline.Options{
		ServerID:             cfg.ServerID,
		OwnerID:              cfg.OwnerID,
		RequestTimeout:       cfg.RequestTimeout,
		InspectACL:           cfg.InspectACL,
		OperatorFingerprints: cfg.OperatorFingerprints,
		CallerProof:          callerproof.Mode(cfg.CallerProof),
		OutputCheck:          outputcheck.New(outputMode),
	}, pipeline.Deps{
		Catalog: s.catalog,
		Agents:  s.agents,
		// The two calls of a request: concurrent ones travel in
		// batches, a lone one stays unary (docs/performance.md, "Batched
		// hops"); a decision policysvc marked reusable answers identical
		// requests without a call (docs/policy.md, "Reused decisions").
		Policy:   s.decisions,
		Audit:    auditclient.NewBatching(auditv1.NewAuditServiceClient(auditConn), batchrpc.Options{}),
		Identity: identityClient,
		RCNS:     rcnsClient,
		Tasks:    taskv1.NewTaskServiceClient(policyConn),
		Peers:    s.peers,
		Outbound: s.outbound,
		Handlers: o.handlers,
		Bindings: s.bindings,
		Log:      base.Log,
		Tracer:   tracer,
		Meter:    meter,
	})
	if err != nil {
		return nil, err
	}
	limits := cfg.Limits
	if limits.BodyLimit == nil {
		limits.BodyLimit = s.bodyLimit(limits)
	}
	verifier, err := agentVerifier(cfg)
	if err != nil {
		return nil, err
	}
	s.transport, err = transport.New(transport.Options{
		Addr:          cfg.AGTPAddr,
		CertFile:      cfg.ServerCertFile,
		KeyFile:       cfg.ServerKeyFile,
		InspectPeer:   func(st *tls.ConnectionState) any { return verifier.Inspect(st) },
		DisableQUIC:   !cfg.QUIC,
		Limits:        limits,
		HeaderTimeout: cfg.HeaderTimeout,
		IdleTimeout:   cfg.IdleTimeout,
		MaxConns:      cfg.MaxConnections,
		MaxInFlight:   cfg.MaxInFlight,
		BodyBudget:    cfg.BodyBudget,
		DrainTimeout:  cfg.ShutdownTimeout,
		Logger:        base.Log,

		MaxConnsPerIP:    perIPLimit(cfg.MaxConnectionsPerIP),
		MaxHandshakes:    cfg.MaxHandshakes,
		HandshakeTimeout: cfg.HandshakeTimeout,
	}, s.pipeline)
	if err != nil {
		return nil, err
	}
	if err := s.transport.Listen(); err != nil {
		return nil, err
	}
	if cfg.HTTPSAddr != "" {
		hopts := httpsapi.Options{
			Domain: cfg.Domain, PublicHost: cfg.PublicAGTPHost(s.AGTPAddr()), Ready: s.Ready,
			Audit: auditConn, Identity: identityConn, Log: base.Log,
		}
		if cfg.AGP {
			ttl := cfg.AGPKeyCacheTTL
			if ttl == 0 {
				ttl = -1 // zero configured: no cache
			}
			s.agp = agp.New(agp.Options{
				ServerID: cfg.ServerID, Pipeline: s.pipeline, Catalog: s.catalog,
				Keys: agpv1.NewAgpServiceClient(policyConn), KeyCacheTTL: ttl, MaxBody: cfg.Limits.MaxBody, Log: base.Log,
			})
			hopts.AGP = s.agp
		}
		if s.httpsLn, err = net.Listen("tcp", cfg.HTTPSAddr); err != nil {
			return nil, fmt.Errorf("listen https on %s: %w", cfg.HTTPSAddr, err)
		}
		s.https = kit.NewHTTPServer(httpsapi.Handler(hopts), httpsapi.TLSConfig(s.transport.GetCertificate), base.Log)
		// The public listener serves no stream, so every answer has a
		// write deadline: a client that reads nothing (an HTTP/2 window
		// it never opens) cannot hold a connection and its handlers.
		s.https.WriteTimeout = publicWriteTimeout(cfg.RequestTimeout)
	}
	s.agents.OnSession, s.agents.OnReset = s.pipeline.DropSession, s.pipeline.ResetSessions
	if err := s.observeTransport(meter); err != nil {
		return nil, err
	}
	if err := s.observeCaches(meter); err != nil {
		return nil, err
	}
	if err := s.observeAGTPCertificate(meter); err != nil {
		return nil, err
	}
	base.Server.Register(HealthName, nil, nil)
	base.Server.ReadyWhen(s.ready)
	return s, nil
}

// agentVerifier trusts the configured agent CAs for CA-issued Agent
// Certificates (issuer-signed ones need none) and the configured peer
// servers for the agents they forward for.
func agentVerifier(cfg Config) (*callerproof.Verifier, error) {
	var agentCAs *x509.CertPool
	if cfg.AgentCAFile != "" {
		var err error
		if agentCAs, err = keyfile.CertPool(cfg.AgentCAFile); err != nil {
			return nil, fmt.Errorf("agent CA: %w", err)
		}
	}
	v := callerproof.NewVerifier(agentCAs)
	if cfg.TrustedPeerCAFile != "" {
		peers, err := keyfile.CertPool(cfg.TrustedPeerCAFile)
		if err != nil {
			return nil, fmt.Errorf("trusted peer CA: %w", err)
		}
		v.TrustPeers(peers, cfg.TrustedPeerNames)
	}
	return v, nil
}

// bodyLimit applies an endpoint's max_body_bytes (docs/decisions.md#D-limits:
// body limits are per endpoint) in place of the default; requests that match
// no endpoint keep the default, since they are refused anyway.
func (s *Service) bodyLimit(lim agtp.Limits) func(method, path string) int64 {
	def := lim.MaxBody
	if def <= 0 {
		def = agtp.DefaultMaxBody
	}
	return func(method, path string) int64 {
		st := s.catalog.Current()
		if st == nil {
			return def
		}
		d := st.Table.Decide(method, path)
		if d.Endpoint != nil {
			if n := d.Endpoint.Proto.GetMaxBodyBytes(); n > 0 {
				return n
			}
		}
		return def
	}
}

// observeTransport reports the transport's counters as metrics: open
// connections, requests and rejections by reason.
func (s *Service) observeTransport(meter metric.Meter) error {
	open, err := meter.Int64ObservableGauge("agtp.server.open_connections", metric.WithDescription("open AGTP connections, by transport"))
	if err != nil {
		return err
	}
	rejected, err := meter.Int64ObservableCounter("agtp.server.transport_rejections", metric.WithDescription("connections and requests the transport refused, by reason"))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := s.transport.Stats()
		o.ObserveInt64(open, st.OpenTCP, metric.WithAttributes(attribute.String("agtp.transport", "tcp")))
		o.ObserveInt64(open, st.OpenQUIC, metric.WithAttributes(attribute.String("agtp.transport", "quic")))
		for reason, n := range st.Rejections() {
			o.ObserveInt64(rejected, int64(n), metric.WithAttributes(attribute.String("agtp.reason", reason)))
		}
		return nil
	}, open, rejected)
	return err
}

// Ready reports whether the front door has its catalog snapshot.
func (s *Service) Ready() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// AGTPAddr is the bound AGTP address (TCP; QUIC uses the same port).
func (s *Service) AGTPAddr() string { return s.transport.TCPAddr().String() }

// HTTPSAddr is the bound public HTTPS address, or "".
func (s *Service) HTTPSAddr() string {
	if s.httpsLn == nil {
		return ""
	}
	return s.httpsLn.Addr().String()
}

// HTTPAddr is the bound admin listener address (HTTP_ADDR: the Prometheus
// metrics), or "".
func (s *Service) HTTPAddr() string { return s.base.Server.HTTPAddr() }

// GRPCAddr is the bound gRPC (health) address.
func (s *Service) GRPCAddr() string { return s.base.Server.GRPCAddr() }

// Run serves until ctx is done: AGTP stops accepting and finishes what is
// in flight, then everything is released.
func (s *Service) Run(ctx context.Context) error {
	tasks := []kit.Task{
		func(ctx context.Context) error {
			return s.catalog.Watch(ctx, s.catalogC, s.base.Log, s.ready)
		},
		s.agents.Watch,
		s.transport.Serve,
	}
	if s.agp != nil {
		tasks = append(tasks, s.agp.WatchKeys)
	}
	if s.https != nil {
		tasks = append(tasks, s.serveHTTPS("https", s.https, s.httpsLn,
			"serves", "/.well-known/agtp, JWKS, health, AGP", "client_certificates", "not asked"))
	}
	err := s.base.Run(ctx, tasks...)
	s.closeClients()
	return err
}

// serveHTTPS serves srv on ln until ctx is done, then lets what is in
// flight finish within the drain deadline. logArgs say what the listener
// is for, logged with its address at start-up.
func (s *Service) serveHTTPS(name string, srv *http.Server, ln net.Listener, logArgs ...any) kit.Task {
	return func(ctx context.Context) error {
		s.base.Log.Info(name+" listening", append([]any{"addr", ln.Addr().String()}, logArgs...)...)
		errc := make(chan error, 1)
		// One source holds at most its share of the listener's
		// connections, as on the AGTP listener (MaxConnectionsPerIP,
		// capped at an eighth of the listener's own bound).
		perSource := min(s.cfg.MaxConnectionsPerIP, kit.MaxHTTPConns/8)
		go func() {
			errc <- srv.Serve(tls.NewListener(addrlimit.Listener(kit.LimitListener(ln), perSource), srv.TLSConfig))
		}()
		select {
		case err := <-errc:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return fmt.Errorf("%s: %w", name, err)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}

// closeClients closes the connections the front door dials: to the
// internal services, to upstreams, to peer AGTP servers and to webhooks.
func (s *Service) closeClients() {
	for _, c := range s.conns {
		_ = c.Close()
	}
	if s.bindings != nil {
		_ = s.bindings.Upstream.Close()
	}
	if s.peers != nil {
		_ = s.peers.Close()
	}
	if s.outbound != nil {
		_ = s.outbound.Webhooks.Close()
	}
}

// Close releases a front door that will not be run.
func (s *Service) Close() error {
	s.closeClients()
	if s.transport != nil {
		sctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = s.transport.Shutdown(sctx)
	}
	if s.httpsLn != nil {
		_ = s.httpsLn.Close()
	}
	return s.base.Close(context.Background())
}

// newOutbound builds what reaches caller-named destinations: the
// outbound policy and the executor that pushes escalations through it
// (its own: the operator's bindings may reach internal upstreams, and
// resolve ${VAR} placeholders, which a caller-named URL must not).
func newOutbound(cfg Config, tp trace.TracerProvider, log *slog.Logger) (*pipeline.Outbound, error) {
	pol, err := outbound.New(cfg.Outbound)
	if err != nil {
		return nil, fmt.Errorf("frontdoor: %w", err)
	}
	hooks, err := upstream.New(upstream.Options{
		CAFile:         cfg.UpstreamCAFile,
		DialContext:    pol.DialContext,
		TracerProvider: tp,
		Propagator:     kit.Propagator,
		UserAgent:      "agtp-frontdoor",
		Log:            log,
	})
	if err != nil {
		return nil, fmt.Errorf("frontdoor: escalation webhooks: %w", err)
	}
	return &pipeline.Outbound{Policy: pol, Webhooks: hooks}, nil
}

// newPeerClient is the AGTP client for other servers (DELEGATE to a
// sub-agent on another host), trusting the system roots plus the peer CA
// file and dialling through the outbound policy. It presents this front
// door's AGTP server certificate, which a server that lists this suite as
// a trusted peer takes as proof of the agent it forwards for.
func newPeerClient(cfg Config, pol *outbound.Policy) (*client.Client, error) {
	roots, err := outbound.RootCAs(cfg.PeerCAFile)
	if err != nil {
		return nil, fmt.Errorf("frontdoor: peer %w", err)
	}
	return client.New(client.Options{RootCAs: roots, MaxConnsPerHost: 8, DialContext: pol.DialContext,
		CertFile: cfg.ServerCertFile, KeyFile: cfg.ServerKeyFile})
}

// publicWriteTimeout is how long the public HTTPS listener gives a
// request from its headers to its answer's last byte: the pipeline's own
// timeout, and as long again for the answer to reach its client.
func publicWriteTimeout(requestTimeout time.Duration) time.Duration {
	return 2 * requestTimeout
}
