// Package suite runs the whole AGTP suite in one process, built from the
// same constructors the separate binaries use (no second code path). It is
// what `make run` starts: on first run it creates the development PKI and
// signing key in a state directory, and when no Redis URL is given it
// embeds an in-process Redis so nothing needs to be installed.
//
// Every service reads the environment (Config.LookupEnv) with its own
// ApplyEnv, as its binary does, so AGTP_AGP_EXECUTE_POLICY=confirm or
// LOG_FORMAT=json work with make run as with the binaries. The suite then
// sets these itself, and the environment does not change them:
//
//   - listen addresses: GRPC_ADDR and HTTP_ADDR (each service keeps its
//     own; six services share one environment), and with Config.Listen
//     also the front door's AGTP_ADDR and HTTPS_ADDR;
//   - peers (AGTP_PEERS): the suite's own services;
//   - the state directory's PKI: AGTP_CA_FILE, AGTP_CERT_FILE,
//     AGTP_KEY_FILE, AGTP_SIGNING_KEY_FILE and AGTP_TRUST_DOMAIN (its
//     certificates name the default trust domain); identitysvc's
//     AGTP_AGENT_CA_CERT_FILE and AGTP_AGENT_CA_KEY_FILE; the front
//     door's AGTP_SERVER_CERT_FILE, AGTP_SERVER_KEY_FILE,
//     AGTP_AGENT_CA_FILE and AGTP_UPSTREAM_CA_FILE; policysvc's
//     AGTP_NOTIFY_CLIENT_CERT_FILE and AGTP_NOTIFY_CLIENT_KEY_FILE;
//   - the demo: AGTP_DEMO (catalogsvc's endpoints, rcnssvc's patterns and
//     the front door's handlers are always on);
//   - what Config sets: RedisURL, LogLevel, LogFormat (REDIS_URL,
//     LOG_LEVEL, LOG_FORMAT when set there).
//
// The operator console (services/console) runs with the services, on
// 127.0.0.1:8100 with the console's certificate from the state directory;
// it reads its AGTP_CONSOLE_* settings from the environment, and the
// banner prints a one-time sign-in link.
//
// PPROF_ADDR is served once, by the front door's listener (the profiles
// cover the whole process). REDIS_URL, when set, replaces the embedded
// Redis; AGTP_POLICY_FILE replaces the demo merchant's policy options and
// AGTP_OUTBOUND_* the loopback outbound lists. The banner lists the
// variables that changed a service's configuration, and those ignored.
package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/agtpsuite/agtp/auditsvc"
	"github.com/agtpsuite/agtp/catalogsvc"
	"github.com/agtpsuite/agtp/frontdoor"
	"github.com/agtpsuite/agtp/identitysvc"
	identitydemo "github.com/agtpsuite/agtp/identitysvc/demo"
	"github.com/agtpsuite/agtp/policysvc"
	"github.com/agtpsuite/agtp/policysvc/agpkey"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/rcnssvc"
	"github.com/agtpsuite/agtp/services/console"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
)

// Config is the suite's configuration.
type Config struct {
	// StateDir holds the development PKI and keys (created on first run).
	StateDir string
	// RedisURL is used by every service; empty embeds an in-process Redis.
	RedisURL string
	// LogLevel and LogFormat apply to every service.
	LogLevel  string
	LogFormat string
	// Out receives the start-up banner.
	Out io.Writer
	// Telemetry applies to every service.
	Telemetry kit.TelemetryConfig
	// Listen, when set, chooses the listen address of each service's
	// listener ("grpc", "http", and the front door's "agtp" and "https");
	// tests use it to run the suite on free ports. Nil keeps the defaults.
	Listen func(service, listener string) string
	// LookupEnv is the environment every service reads its settings from,
	// as its own binary does: os.LookupEnv in make run, a map in tests;
	// nil reads none. The settings the suite sets itself (see the package
	// documentation) and RedisURL, LogLevel and LogFormat win over it.
	LookupEnv func(string) (string, bool)
}

// Validate reports configuration problems.
func (c Config) Validate() error {
	if c.StateDir == "" {
		return errors.New("state directory is empty")
	}
	return nil
}

// member is one service of the suite.
type member struct {
	name string
	run  func(ctx context.Context) error
}

// Suite is the running suite.
type Suite struct {
	cfg     Config
	members []member
	mini    *miniredis.Miniredis
	layout  devpki.Layout
	Addrs   map[string]string
	// Gateways are the services' REST gateway addresses, by service.
	Gateways map[string]string

	agtpAddr, httpsAddr string
	demoAgent           *identitydemo.Agent
	// agpKeyPath holds the demo agent's AGP API key.
	agpKeyPath string
	// demoCert and demoCertKey are the demo agent's Agent Certificate and key.
	demoCert, demoCertKey string
	// redisURL is the URL the services use, unless embedded.
	redisURL string
	// env lists the environment's settings for the banner.
	env []envSetting
	// console is the operator console, on the admin plane.
	console *console.Console
}

// New creates the PKI if needed, starts the embedded Redis when no URL is
// configured, and provisions every service.
func New(ctx context.Context, cfg Config) (_ *Suite, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if listen := cfg.Listen; listen != nil {
		// The configuration is built more than once (for the banner's
		// list of settings); each listener is asked for once.
		addrs := map[[2]string]string{}
		cfg.Listen = func(service, listener string) string {
			k := [2]string{service, listener}
			if _, ok := addrs[k]; !ok {
				addrs[k] = listen(service, listener)
			}
			return addrs[k]
		}
	}
	s := &Suite{cfg: cfg, Addrs: map[string]string{}, Gateways: map[string]string{}}
	defer func() {
		if err != nil && s.mini != nil {
			s.mini.Close()
		}
	}()
	stateDir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if s.layout, err = devpki.Ensure(stateDir, devpki.ServiceNames...); err != nil {
		return nil, fmt.Errorf("development PKI: %w", err)
	}
	demoDir := filepath.Join(stateDir, "demo-agent")
	if s.demoAgent, err = identitydemo.Ensure(demoDir); err != nil {
		return nil, err
	}
	if s.demoCert, s.demoCertKey, err = s.demoAgent.EnsureCertificate(demoDir, time.Now()); err != nil {
		return nil, err
	}
	if err := ensureDemoMerchant(stateDir); err != nil {
		return nil, err
	}
	lookup := cfg.LookupEnv
	if lookup == nil {
		lookup = noEnv
	}
	v, err := configure(cfg, s.layout, lookup, envFirst)
	if err != nil {
		return nil, err
	}
	if s.env, err = environmentReport(cfg, s.layout, lookup); err != nil {
		return nil, err
	}
	// Neither Config nor REDIS_URL names a Redis: embed one.
	if s.redisURL = v.audit.RedisURL; s.redisURL == "" {
		if s.mini, err = miniredis.Run(); err != nil {
			return nil, fmt.Errorf("embedded redis: %w", err)
		}
		for _, m := range v.each() {
			m.common.RedisURL = "redis://" + s.mini.Addr()
		}
	}

	var closers []func()
	defer func() {
		if err != nil {
			for _, c := range closers {
				c()
			}
		}
	}()
	add := func(name string, svc interface {
		Run(context.Context) error
		Close() error
		GRPCAddr() string
	}) {
		s.members = append(s.members, member{name: name, run: svc.Run})
		s.Addrs[name] = svc.GRPCAddr()
		if gw, ok := svc.(interface{ HTTPAddr() string }); ok && gw.HTTPAddr() != "" {
			s.Gateways[name] = gw.HTTPAddr()
		}
		closers = append(closers, func() { _ = svc.Close() })
	}
	a, err := auditsvc.New(ctx, v.audit)
	if err != nil {
		return nil, err
	}
	add("auditsvc", a)
	c, err := catalogsvc.New(ctx, v.catalog)
	if err != nil {
		return nil, err
	}
	add("catalogsvc", c)
	i, err := identitysvc.New(ctx, v.identity)
	if err != nil {
		return nil, err
	}
	add("identitysvc", i)
	p, err := policysvc.New(ctx, v.policy)
	if err != nil {
		return nil, err
	}
	add("policysvc", p)
	r, err := rcnssvc.New(ctx, v.rcns)
	if err != nil {
		return nil, err
	}
	add("rcnssvc", r)
	f, err := frontdoor.New(ctx, v.front)
	if err != nil {
		return nil, err
	}
	add("frontdoor", f)
	s.agtpAddr = f.AGTPAddr()
	s.httpsAddr = f.HTTPSAddr()
	if s.console, err = s.newConsole(ctx, lookup); err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = s.console.Close() })
	return s, nil
}

// LocalOperator is the person make run's one-time console link signs in.
const LocalOperator = "local-operator"

// ConsoleAddr is the operator console's default address, on the admin
// plane beside the services' gateways.
const ConsoleAddr = "127.0.0.1:8100"

// newConsole configures the operator console from the environment, as
// agtpconsole does, with the suite's own addresses and the console's
// certificate from the state directory.
func (s *Suite) newConsole(ctx context.Context, lookup func(string) (string, bool)) (*console.Console, error) {
	cfg := console.Default()
	if err := cfg.ApplyEnv(lookup); err != nil {
		return nil, err
	}
	cfg.Addr = ConsoleAddr
	if s.cfg.Listen != nil {
		cfg.Addr = s.cfg.Listen("console", "https")
	}
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = s.layout.CA(), s.layout.Cert(devpki.Console), s.layout.Key(devpki.Console)
	cfg.Peers = map[string]string{}
	for name, addr := range s.Addrs {
		cfg.Peers[name] = addr
	}
	cfg.JWKSURL = "https://" + s.httpsAddr + "/.well-known/jwks.json"
	// The health page's rates come from the services' metrics, served on
	// their admin listeners (the gateways, and the front door's own).
	cfg.Metrics = maps.Clone(s.Gateways)
	// Sessions live in the suite's Redis, as a deployed console's do.
	cfg.RedisURL = s.redisURL
	if s.mini != nil {
		cfg.RedisURL = "redis://" + s.mini.Addr()
	}
	logCfg := kit.DefaultCommon("console", "", "")
	logCfg.LogLevel, logCfg.LogFormat = s.cfg.LogLevel, s.cfg.LogFormat
	if logCfg.LogLevel == "" {
		logCfg.LogLevel = "info"
	}
	if logCfg.LogFormat == "" {
		logCfg.LogFormat = "text"
	}
	return console.New(ctx, cfg, logCfg.Logger(os.Stderr))
}

// Console is the operator console.
func (s *Suite) Console() *console.Console { return s.console }

// AGTPAddr is the front door's AGTP address and HTTPSAddr its public
// HTTPS listener.
func (s *Suite) AGTPAddr() string  { return s.agtpAddr }
func (s *Suite) HTTPSAddr() string { return s.httpsAddr }

// Layout is the suite's PKI.
func (s *Suite) Layout() devpki.Layout { return s.layout }

// StateDir is the absolute state directory.
func (s *Suite) StateDir() string { return s.layout.Dir }

// Run runs every service until ctx is done; the first failure stops all.
func (s *Suite) Run(ctx context.Context) error {
	defer func() {
		if s.mini != nil {
			s.mini.Close()
		}
	}()
	tasks := make([]kit.Task, 0, len(s.members))
	for _, m := range s.members {
		tasks = append(tasks, func(ctx context.Context) error {
			if err := m.run(ctx); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			return nil
		})
	}
	tasks = append(tasks, s.console.Run, s.registerDemoAgent)
	return kit.RunTasks(ctx, tasks...)
}

// registerDemoAgent registers the demo agent once identitysvc answers,
// then prints the banner, so the banner's Agent-ID works at once.
func (s *Suite) registerDemoAgent(ctx context.Context) error {
	admin, err := kit.LoadMTLS(s.layout.CA(), s.layout.Cert(devpki.Admin), s.layout.Key(devpki.Admin))
	if err != nil {
		return err
	}
	tel, err := kit.NewTelemetry(ctx, "agtpsuite", kit.TelemetryConfig{})
	if err != nil {
		return err
	}
	conn, err := kit.DialService(s.Addrs["identitysvc"], "identitysvc", admin, tel)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := identityv1.NewIdentityServiceClient(conn)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = s.demoAgent.Register(rctx, client)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := s.ensureAGPKey(ctx, admin, tel); err != nil {
		return err
	}
	s.banner()
	<-ctx.Done()
	return nil
}

// ensureAGPKey gives the demo agent an AGP API key (docs/agp.md): the
// secret is generated once and kept in the state directory; policysvc
// holds only its SHA-256, imported under the id "demo" on every start (the
// embedded Redis forgets it between runs).
func (s *Suite) ensureAGPKey(ctx context.Context, admin *kit.MTLS, tel *kit.Telemetry) error {
	path := filepath.Join(s.layout.Dir, "demo-agent", "agp-api-key")
	b, err := os.ReadFile(path)
	secret := strings.TrimSpace(string(b))
	if errors.Is(err, os.ErrNotExist) || secret == "" {
		if secret, err = agpkey.NewSecret(); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
			return fmt.Errorf("demo AGP key: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("demo AGP key: %w", err)
	}
	conn, err := kit.DialService(s.Addrs["policysvc"], "policysvc", admin, tel)
	if err != nil {
		return err
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := agpv1.NewAgpServiceClient(conn).ImportApiKey(rctx, &agpv1.ImportApiKeyRequest{
		Id: "demo", Label: "make run demo key", AgentId: s.demoAgent.AgentID,
		Scopes: []string{"discover", "query", "execute"}, KeySha256: agpkey.Hash(secret),
	}); err != nil {
		return fmt.Errorf("demo AGP key: %w", err)
	}
	s.agpKeyPath = path
	return nil
}

func (s *Suite) banner() {
	if s.cfg.Out == nil {
		return
	}
	redis := redact(s.redisURL)
	if s.mini != nil {
		redis = "embedded (in-process; set REDIS_URL to use a real server)"
	}
	fmt.Fprintf(s.cfg.Out, "AGTP suite running\n  state dir: %s\n  redis:     %s\n", s.layout.Dir, redis)
	for _, m := range s.members {
		fmt.Fprintf(s.cfg.Out, "  %-12s gRPC %s\n", m.name, s.Addrs[m.name])
	}
	s.printEnvironment()
	fmt.Fprintf(s.cfg.Out, `
AGTP on %[1]s (TLS/TCP and QUIC), HTTPS on https://%[2]s
Demo agent %[4]s (Genesis issuer key %[5]s)

The demo agent proves who it is with its Agent Certificate; to call as the
demo agent, paste these lines into your shell:
  export AGTP_CACERT=%[3]s
  export AGTP_CERT=%[7]s
  export AGTP_KEY=%[8]s

Then try:
  go run ./services/cmd/agtp -v DISCOVER agtp://%[1]s/
  go run ./services/cmd/agtp QUERY agtp://%[1]s/orders/ord-1001
  curl --cacert %[3]s https://%[2]s/.well-known/agtp
  curl --cacert %[3]s -H "X-Api-Key: $(cat %[6]s)" --json '{"businessId":"orders"}' https://%[2]s/agp/discover
`, s.agtpAddr, s.httpsAddr, s.layout.CA(), s.demoAgent.AgentID, s.demoAgent.KeyPath, s.agpKeyPath, s.demoCert, s.demoCertKey)
	if link, err := s.console.SignInLink(LocalOperator); err == nil {
		fmt.Fprintf(s.cfg.Out, `
The operator console (escalations, agents, audit chains, keys) is at
%[1]s. Sign in as %[2]s with this link; it works once, for 15 minutes:
  %[3]s
`, s.console.URL(), LocalOperator, link)
	}
	if gw := s.Gateways["catalogsvc"]; gw != "" {
		fmt.Fprintf(s.cfg.Out, `
Each service serves its REST routes on its own gateway, to the client
certificates its access table admits (docs/access.md); as the operator:
  curl --cacert %[2]s --cert %[3]s --key %[4]s https://%[1]s/v1/catalog/methods
`, gw, s.layout.CA(), s.layout.Cert(devpki.Admin), s.layout.Key(devpki.Admin))
	}
}

// printEnvironment lists, under the services, the environment's settings
// that changed a service's configuration (the rest are the defaults), and
// the ones ignored because the suite sets them itself.
func (s *Suite) printEnvironment() {
	var used, ignored []string
	width := 0
	for _, e := range s.env {
		if !e.overridden {
			width = max(width, len(e.name)+1+len(e.value))
		}
	}
	for _, e := range s.env {
		if e.overridden {
			ignored = append(ignored, e.name)
			continue
		}
		who := strings.Join(e.services, ", ")
		if len(e.services) == len(s.members) {
			who = "every service"
		}
		used = append(used, fmt.Sprintf("    %-*s  %s\n", width, e.name+"="+e.value, who))
	}
	if len(used) > 0 {
		fmt.Fprintf(s.cfg.Out, "  settings from the environment:\n%s", strings.Join(used, ""))
	}
	if len(ignored) > 0 {
		fmt.Fprintf(s.cfg.Out, "  ignored, make run sets these itself: %s\n", strings.Join(ignored, ", "))
	}
}

// demoMerchantManifest is the demo order desk's Merchant Manifest
// Document; its fingerprint is the SHA-256 of its canonical form, served
// with it at DESCRIBE /merchant.
const demoMerchantManifest = `{
  "merchant_id": "orders.demo.agtp.local",
  "display_name": "AGTP suite demo order desk",
  "status": "active",
  "accepted_currencies": ["USD", "EUR", "GBP"],
  "version": 1
}
`

// demoMerchantPath is where the demo merchant's manifest is kept.
func demoMerchantPath(stateDir string) string { return filepath.Join(stateDir, "demo-merchant.json") }

// ensureDemoMerchant writes the demo merchant's manifest once, so that an
// operator can edit it.
func ensureDemoMerchant(stateDir string) error {
	path := demoMerchantPath(stateDir)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(path, []byte(demoMerchantManifest), 0o644); err != nil {
			return fmt.Errorf("demo merchant manifest: %w", err)
		}
	}
	return nil
}

// demoCommerce makes the demo PURCHASE endpoint usable: the suite is a
// merchant (its manifest written once into the state directory, so an
// operator can edit it) and a PURCHASE spends the amount in its body
// against Budget-Limit. It uses the options file's format (docs/policy.md).
func demoCommerce(policy *policysvc.Config, manifest string) error {
	doc := fmt.Sprintf(`{
		"budget": {"costs": [{"method": "PURCHASE", "path": "/orders/{order_id}/payment", "amount_field": "amount", "currency_field": "currency"}]},
		"merchant": {"manifest_file": %q}}`, manifest)
	if err := json.Unmarshal([]byte(doc), &policy.Options); err != nil {
		return fmt.Errorf("demo policy options: %w", err)
	}
	return nil
}
