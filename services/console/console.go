// Package console is the operator console: server-rendered pages on the
// admin plane for the people who govern the agents. They resolve
// escalations, suspend and revoke agents, read and verify audit chains,
// and revoke AGP keys and RCNS contracts.
//
// The console is a client of the services' gRPC APIs like any operator
// tool, with its own certificate (access.Console), so every call passes
// the services' access tables. It forwards the signed-in person with
// every change (access.ForPerson); the services record the change as made
// by the console for that person, and take that word from the console's
// certificate only. docs/console.md describes the pages and the sign-in.
package console

import (
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"

	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/kit"
)

//go:embed static templates
var assets embed.FS

// Console is a configured console.
type Console struct {
	cfg      Config
	log      *slog.Logger
	mtls     *kit.MTLS
	conns    map[string]*grpc.ClientConn
	sessions *sessions
	oidc     *oidcLogin
	pages    *pages
	metrics  *sampler
	handler  http.Handler
	lis      net.Listener

	tasks    taskv1.TaskServiceClient
	agents   identityv1.IdentityServiceClient
	audit    auditv1.AuditServiceClient
	catalog  catalogv1.CatalogServiceClient
	rcns     rcnsv1.RcnsServiceClient
	agpKeys  agpv1.AgpServiceClient
	now      func() time.Time
	rpcLimit time.Duration
}

// New dials the services and binds the listener.
func New(ctx context.Context, cfg Config, log *slog.Logger) (_ *Console, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	m, err := kit.LoadMTLS(cfg.CAFile, cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	tel, err := kit.NewTelemetry(ctx, "console", kit.TelemetryConfig{})
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, log: log.With("service", "console"), mtls: m, conns: map[string]*grpc.ClientConn{},
		sessions: newSessions(cfg.IdleTimeout, cfg.SessionTimeout, time.Now), now: time.Now, rpcLimit: 10 * time.Second}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	for _, p := range peerNames {
		conn, err := kit.DialService(cfg.Peers[p], p, m, tel)
		if err != nil {
			return nil, err
		}
		c.conns[p] = conn
	}
	c.tasks = taskv1.NewTaskServiceClient(c.conns["policysvc"])
	c.agpKeys = agpv1.NewAgpServiceClient(c.conns["policysvc"])
	c.agents = identityv1.NewIdentityServiceClient(c.conns["identitysvc"])
	c.audit = auditv1.NewAuditServiceClient(c.conns["auditsvc"])
	c.catalog = catalogv1.NewCatalogServiceClient(c.conns["catalogsvc"])
	c.rcns = rcnsv1.NewRcnsServiceClient(c.conns["rcnssvc"])
	if cfg.RedisURL != "" {
		if c.sessions.rdb, err = kit.NewRedis(ctx, cfg.RedisURL, nil, nil); err != nil {
			return nil, fmt.Errorf("console session store: %w", err)
		}
		c.sessions.log = c.log
	}
	if cfg.OIDC.Enabled() {
		secret, shared, err := cfg.OIDC.loginKey()
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		if !shared && cfg.RedisURL != "" {
			// Sessions in Redis are for replicas; a sign-in started on one
			// of them would be refused by the others.
			c.log.Warn("OpenID Connect sign-ins are sealed with a random key of this process (AGTP_CONSOLE_OIDC_LOGIN_KEY_FILE is not set): " +
				"a sign-in started on another replica, or before a restart, is refused")
		}
		c.oidc = newOIDCLogin(cfg.OIDC, secret)
	}
	if len(cfg.Metrics) > 0 {
		c.metrics = newSampler(cfg.Metrics, cfg.MetricsInterval, m)
	}
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	c.handler = c.routes()
	if c.lis, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, fmt.Errorf("console listen: %w", err)
	}
	return c, nil
}

// Addr is the bound listen address.
func (c *Console) Addr() string { return c.lis.Addr().String() }

// URL is the console's origin.
func (c *Console) URL() string {
	if c.cfg.URL != "" {
		return c.cfg.origin()
	}
	return "https://" + c.Addr()
}

// Handler is the console's HTTP handler (tests serve it themselves).
func (c *Console) Handler() http.Handler { return c.handler }

// SignInLink returns a link that signs person in once, within 15
// minutes: make run prints one for the local operator.
func (c *Console) SignInLink(person string) (string, error) {
	if !access.ValidPerson(person) {
		return "", errors.New("console: not a usable person name")
	}
	t, err := c.sessions.oneTimeLink(context.Background(), person)
	if err != nil {
		return "", err
	}
	return c.URL() + "/login/once?token=" + t, nil
}

// Run serves HTTPS until ctx is done, then drains.
func (c *Console) Run(ctx context.Context) error {
	// Browsers present no client certificate: people sign in instead.
	tlsCfg := c.mtls.ServerConfig()
	tlsCfg.ClientAuth = tls.NoClientCert
	srv := kit.NewHTTPServer(c.handler, tlsCfg, c.log)
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(kit.LimitListener(c.lis), "", "") }()
	if c.metrics != nil {
		mctx, stop := context.WithCancel(ctx)
		defer stop()
		go c.metrics.run(mctx)
	}
	c.log.Info("console serving", "url", c.URL())
	select {
	case err := <-errc:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	_ = c.Close()
	return err
}

// Close releases the connections.
func (c *Console) Close() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	if c.lis != nil {
		_ = c.lis.Close()
	}
	if c.sessions != nil && c.sessions.rdb != nil {
		errs = append(errs, c.sessions.rdb.Close())
	}
	return errors.Join(errs...)
}
