package kit

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	goruntime "runtime"
	"time"

	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/rawsock"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// GatewayRegistrar registers one service's REST routes on the gateway mux,
// proxying to conn (the service's own gRPC server).
type GatewayRegistrar func(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error

// Server is a service's gRPC server and REST gateway, with mTLS, health,
// reflection, tracing and the drain sequence. Listeners are opened by
// NewServer, so their addresses are known before Run.
type Server struct {
	cfg    Common
	log    *slog.Logger
	mtls   *MTLS
	tel    *Telemetry
	grpc   *grpc.Server
	health *health.Server
	guard  *access.Guard

	// draining is cancelled when the drain starts; it ends open streams.
	draining   context.Context
	startDrain context.CancelFunc

	grpcLis net.Listener
	httpLis net.Listener
	gateway []GatewayRegistrar
	names   []string
	ready   []<-chan struct{}
}

// Deps are what NewServer needs besides the configuration.
type Deps struct {
	Logger    *slog.Logger
	MTLS      *MTLS
	Telemetry *Telemetry
}

// NewServer validates nothing beyond what it needs (the service's Config
// has been validated) and opens the listeners.
func NewServer(cfg Common, deps Deps) (*Server, error) {
	if deps.MTLS == nil {
		return nil, ErrNoTLS
	}
	s := &Server{cfg: cfg, log: deps.Logger, mtls: deps.MTLS, tel: deps.Telemetry}
	s.draining, s.startDrain = context.WithCancel(context.Background())
	s.health = health.NewServer()
	var err error
	if s.guard, err = newGuard(cfg, deps); err != nil {
		return nil, err
	}
	sopts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(deps.MTLS.ServerConfig()))}, internalServerOptions()...)
	if deps.Telemetry.Recording {
		sopts = append(sopts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(deps.Telemetry.TracerProvider),
			otelgrpc.WithMeterProvider(deps.Telemetry.MeterProvider),
		)))
	} else {
		// Without instrumentation the caller's W3C trace context is still
		// passed on, so a downstream service that does export continues
		// the caller's trace.
		sopts = append(sopts, grpc.ChainUnaryInterceptor(propagateUnary), grpc.ChainStreamInterceptor(propagateStream))
	}
	s.grpc = grpc.NewServer(append(sopts,
		// The access check runs first: a refused call reaches no handler.
		grpc.ChainUnaryInterceptor(s.guard.UnaryInterceptor(), recoverUnary(s.log), logUnary(s.log)),
		grpc.ChainStreamInterceptor(s.guard.StreamInterceptor(), endOnDrain(s.draining), recoverStream(s.log), logStream(s.log)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Callers hold long-lived connections; ageing them out spreads
		// load onto replicas added later. Watch streams reconnect.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 10 * time.Minute, MaxConnectionAgeGrace: time.Minute}),
		grpc.MaxRecvMsgSize(maxMessageBytes),
		// Long-lived workers keep the stacks that signing and JSON grew,
		// instead of a new goroutine growing its stack again for every
		// RPC (about 25 µs of a sequential SignAndAppend); when all are
		// busy, grpc-go starts a goroutine as before.
		grpc.NumStreamWorkers(streamWorkers()),
		grpc.InitialWindowSize(internalStreamWindow),
		grpc.InitialConnWindowSize(internalConnWindow),
	)...)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	if cfg.Reflection {
		reflection.Register(s.grpc)
		s.log.Warn("gRPC reflection is on: the API's services and messages are listed to every client with a suite certificate")
	}
	// Until Run marks it ready, the service reports NOT_SERVING.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)

	if s.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("listen grpc on %s: %w", cfg.GRPCAddr, err)
	}
	s.grpcLis = rawsock.Listen(s.grpcLis)
	if cfg.HTTPAddr != "" {
		if s.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			_ = s.grpcLis.Close()
			return nil, fmt.Errorf("listen gateway on %s: %w", cfg.HTTPAddr, err)
		}
	}
	return s, nil
}

// minStreamWorkers is the fewest stream workers a server keeps. A worker
// runs one stream at a time, for the stream's whole life: a watch stream
// a caller keeps open (the front door follows key events, snapshots and
// agents) holds a worker for hours. Sized by processors alone, a
// one-processor service had its only worker held by such a stream and
// started a fresh goroutine, and grew its stack again, for every unary
// call (a sixth of policysvc's CPU under load). Idle workers cost a
// parked goroutine each.
const minStreamWorkers = 16

// streamWorkers is how many stream workers a server keeps: enough for
// the watch streams callers hold open plus the concurrent unary calls of
// every processor.
func streamWorkers() uint32 {
	return uint32(max(minStreamWorkers, 4*goruntime.GOMAXPROCS(0)))
}

// GRPC is the server to register service implementations on.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// GRPCAddr is the bound gRPC address.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr is the bound gateway address, or "" when disabled.
func (s *Server) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Register adds a service's health name, its gateway routes and its
// access table (who may call each of its RPCs; anything it does not name
// is refused). A method with two rules is a programming error and panics
// at start-up.
func (s *Server) Register(healthName string, gw GatewayRegistrar, rules access.Table) {
	if err := s.guard.Add(rules); err != nil {
		panic(err)
	}
	s.names = append(s.names, healthName)
	s.health.SetServingStatus(healthName, healthpb.HealthCheckResponse_NOT_SERVING)
	if gw != nil {
		s.gateway = append(s.gateway, gw)
	}
}

// ReadyWhen holds the SERVING health status back until ch is closed, for
// services that cannot answer before some start-up work is done (the
// front door before its first catalog snapshot).
func (s *Server) ReadyWhen(ch <-chan struct{}) { s.ready = append(s.ready, ch) }

// Dial connects to a peer service over mTLS. The peer's certificate must
// name the peer (the suite's certificates carry the service name as a DNS
// SAN).
func (s *Server) Dial(peer string) (*grpc.ClientConn, error) {
	addr, err := s.cfg.Peer(peer)
	if err != nil {
		return nil, err
	}
	return DialService(addr, peer, s.mtls, s.tel)
}

// Flow-control windows of the suite's internal gRPC connections, fixed on
// both sides. grpc-go's default windows start at 64 KiB and grow by
// estimating the bandwidth-delay product: each time data arrives after the
// last estimate, the receiver sends a PING and a window update, and the
// sender must answer the PING. A batch call of the front door (tens of
// kilobytes each way) then carries extra frames, and on a loaded machine
// extra wake-ups, on every call. Inside a cluster the product is small and
// known; fixed windows larger than any batch send no PINGs and update the
// window once per quarter of it (docs/performance.md, "Fixed flow-control
// windows").
const (
	internalStreamWindow = 1 << 20
	internalConnWindow   = 4 << 20
)

// dialInternal dials a peer service's gRPC address with rawsock's direct
// socket I/O.
func dialInternal(ctx context.Context, addr string) (net.Conn, error) {
	return rawsock.Dialer(&net.Dialer{})(ctx, "tcp", addr)
}

// DialService connects to a service at addr whose certificate names
// serverName, presenting this process's certificate.
func DialService(addr, serverName string, m *MTLS, tel *Telemetry) (*grpc.ClientConn, error) {
	copts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(m.ClientConfig(serverName))),
		grpc.WithContextDialer(dialInternal),
	}, internalDialOptions()...)
	if tel.Recording {
		copts = append(copts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(tel.TracerProvider),
			otelgrpc.WithMeterProvider(tel.MeterProvider),
		)))
	} else {
		copts = append(copts, grpc.WithChainUnaryInterceptor(injectUnary), grpc.WithChainStreamInterceptor(injectStream))
	}
	conn, err := grpc.NewClient(addr, append(copts,
		grpc.WithDefaultServiceConfig(defaultServiceConfig()),
		grpc.WithInitialWindowSize(internalStreamWindow),
		grpc.WithInitialConnWindowSize(internalConnWindow),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		// A peer that restarts is back within seconds; the default 120 s
		// reconnect ceiling would keep answering 503 long after.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("dial %s at %s: %w", serverName, addr, err)
	}
	return conn, nil
}

// Run serves until ctx is done, running the extra tasks alongside, then
// drains: health NOT_SERVING, the gateway stops accepting and finishes,
// GracefulStop with the configured deadline, then Stop.
func (s *Server) Run(ctx context.Context, extra ...Task) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var httpSrv *http.Server
	var gwConn *grpc.ClientConn
	if s.httpLis != nil {
		mux := runtime.NewServeMux(append(s.guard.GatewayOptions(), gatewayTraceOptions(s.tel)...)...)
		var err error
		gwConn, err = DialService(s.GRPCAddr(), s.cfg.Name, s.mtls, s.tel)
		if err != nil {
			return err
		}
		defer gwConn.Close()
		for _, reg := range s.gateway {
			if err := reg(ctx, mux, gwConn); err != nil {
				return fmt.Errorf("register gateway routes: %w", err)
			}
		}
		tlsCfg := s.mtls.ServerConfig()
		tlsCfg.NextProtos = []string{"h2", "http/1.1"}
		httpSrv = NewHTTPServer(serveMetrics(traceGateway(limitGatewayBodies(mux), s.cfg.Name, s.tel), s.tel.PrometheusHandler, s.guard.Recognizer()), tlsCfg, s.log)
		if s.tel.PrometheusHandler != nil {
			s.log.Info("serving Prometheus metrics on the admin listener", "addr", s.HTTPAddr(), "path", MetricsPath, "readers", "operator and system identities")
		}
	}

	tasks := []Task{
		func(ctx context.Context) error {
			errc := make(chan error, 1)
			go func() { errc <- s.grpc.Serve(s.grpcLis) }()
			select {
			case err := <-errc:
				return fmt.Errorf("grpc serve: %w", err)
			case <-ctx.Done():
			}
			s.drain()
			return nil
		},
	}
	if httpSrv != nil {
		tasks = append(tasks, func(ctx context.Context) error {
			errc := make(chan error, 1)
			go func() { errc <- httpSrv.Serve(tls.NewListener(LimitListener(s.httpLis), httpSrv.TLSConfig)) }()
			select {
			case err := <-errc:
				return fmt.Errorf("gateway serve: %w", err)
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
			defer cancel()
			if err := httpSrv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("gateway shutdown: %w", err)
			}
			return nil
		})
	}
	tasks = append(tasks, extra...)
	tasks = append(tasks, func(ctx context.Context) error {
		for _, ch := range s.ready {
			select {
			case <-ch:
			case <-ctx.Done():
				return nil
			}
		}
		s.setServing(healthpb.HealthCheckResponse_SERVING)
		s.log.Info("serving", "grpc", s.GRPCAddr(), "gateway", s.HTTPAddr())
		<-ctx.Done()
		return nil
	})
	err := RunTasks(ctx, tasks...)
	s.log.Info("stopped")
	return err
}

func (s *Server) setServing(st healthpb.HealthCheckResponse_ServingStatus) {
	s.health.SetServingStatus("", st)
	for _, n := range s.names {
		s.health.SetServingStatus(n, st)
	}
}

// drain runs the shutdown sequence of the gRPC server.
func (s *Server) drain() {
	s.health.Shutdown()
	s.startDrain()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownTimeout):
		s.log.Warn("graceful stop deadline passed; stopping")
		s.grpc.Stop()
		<-done
	}
}

// closeListeners releases the listeners of a server that never ran.
func (s *Server) closeListeners() {
	_ = s.grpcLis.Close()
	if s.httpLis != nil {
		_ = s.httpLis.Close()
	}
}

// newGuard builds the access guard from the trust domain and identity map,
// and warns when this service's own certificate does not name it: its
// calls to its peers would then be refused.
func newGuard(cfg Common, deps Deps) (*access.Guard, error) {
	mapping, err := access.LoadMapping(cfg.IdentityMapFile)
	if err != nil {
		return nil, err
	}
	rec, err := access.NewRecognizer(cfg.TrustDomain, mapping)
	if err != nil {
		return nil, err
	}
	if leaf, err := deps.MTLS.Leaf(); err == nil {
		want := access.Identity{Kind: access.Service, Name: cfg.Name}
		if got := rec.Identify(leaf); got != want {
			deps.Logger.Warn("this service's certificate does not name its identity; its peers will refuse its calls",
				"want", access.SPIFFEID(rec.TrustDomain(), want), "certificate_names", got.String())
		}
	}
	return access.NewGuard(rec, deps.Logger)
}

// Guard is the server's access guard.
func (s *Server) Guard() *access.Guard { return s.guard }
