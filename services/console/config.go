package console

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/services/kit"
)

// Config is the console's configuration.
type Config struct {
	// Addr is the HTTPS listen address, on the admin plane (never the
	// public AGTP or HTTPS listeners).
	Addr string
	// URL is the console's own origin as browsers reach it
	// (https://host:port): a change from any other origin is refused.
	URL string
	// CAFile, CertFile and KeyFile are the suite CA bundle and the
	// console's certificate (access.Console), which it presents to the
	// services and serves HTTPS with.
	CAFile, CertFile, KeyFile string
	// Peers are the services' gRPC addresses by name.
	Peers map[string]string
	// JWKSURL is the published JWKS (the front door's
	// /.well-known/jwks.json) that the page verifying a chain in the
	// browser fetches, so its reader need not trust the console.
	JWKSURL string
	// OIDC is the organisation's OpenID Connect provider.
	OIDC OIDCConfig
	// RedisURL is where sessions and one-time sign-in links are kept, so
	// that they survive a restart and work on every replica; empty keeps
	// them in this process's memory.
	RedisURL string
	// IdleTimeout ends a session unused for this long; SessionTimeout
	// ends any session this long after sign-in.
	IdleTimeout, SessionTimeout time.Duration
	// PageSize is how many rows a list page shows.
	PageSize int
	// Metrics are the services' admin listeners by name, whose GET
	// /metrics (AGTP_PROMETHEUS=on) the health page's request and error
	// rates come from; a service not named shows readiness only.
	Metrics map[string]string
	// MetricsInterval is how often the console scrapes them: the rates
	// are over the last interval.
	MetricsInterval time.Duration
}

// Default is the console's configuration without any setting.
func Default() Config {
	return Config{Addr: "127.0.0.1:8100", IdleTimeout: 30 * time.Minute, SessionTimeout: 12 * time.Hour, PageSize: 25, Peers: map[string]string{},
		Metrics: map[string]string{}, MetricsInterval: 15 * time.Second}
}

// peerNames are the services the console talks to.
var peerNames = []string{"policysvc", "identitysvc", "auditsvc", "catalogsvc", "rcnssvc", "frontdoor"}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("console: listen address is empty"))
	}
	if c.CAFile == "" || c.CertFile == "" || c.KeyFile == "" {
		errs = append(errs, errors.New("console: the CA bundle, certificate and key are required (AGTP_CA_FILE, AGTP_CERT_FILE, AGTP_KEY_FILE)"))
	}
	if u, err := url.Parse(c.URL); c.URL != "" && (err != nil || u.Scheme != "https" || u.Host == "" || u.Path != "" && u.Path != "/") {
		errs = append(errs, fmt.Errorf("console: URL %q is not an https origin", c.URL))
	}
	for _, p := range peerNames {
		if c.Peers[p] == "" {
			errs = append(errs, fmt.Errorf("console: no address for %s (AGTP_PEERS)", p))
		}
	}
	if c.IdleTimeout <= 0 || c.SessionTimeout < c.IdleTimeout {
		errs = append(errs, errors.New("console: the idle timeout must be positive and at most the session timeout"))
	}
	for name := range c.Metrics {
		if !slices.Contains(peerNames, name) {
			errs = append(errs, fmt.Errorf("console: metrics of %q: not a service the console knows (%s)", name, strings.Join(peerNames, ", ")))
		}
	}
	if len(c.Metrics) > 0 && c.MetricsInterval < time.Second {
		errs = append(errs, errors.New("console: the metrics interval must be at least 1s"))
	}
	if c.PageSize < 1 || c.PageSize > 500 {
		errs = append(errs, errors.New("console: page size must be 1-500"))
	}
	errs = append(errs, c.OIDC.Validate())
	return errors.Join(errs...)
}

// origin is the console's own origin: URL, or https://Addr.
func (c Config) origin() string {
	if c.URL != "" {
		return strings.TrimSuffix(c.URL, "/")
	}
	return "https://" + c.Addr
}

// BindFlags registers the console's flags.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "HTTPS listen address (env CONSOLE_ADDR)")
	fs.StringVar(&c.URL, "url", c.URL, "the console's origin as browsers reach it (env AGTP_CONSOLE_URL)")
	fs.StringVar(&c.CAFile, "ca", c.CAFile, "suite CA bundle, PEM (env AGTP_CA_FILE)")
	fs.StringVar(&c.CertFile, "cert", c.CertFile, "the console's certificate, PEM (env AGTP_CERT_FILE)")
	fs.StringVar(&c.KeyFile, "key", c.KeyFile, "the console's private key, PEM (env AGTP_KEY_FILE)")
	fs.StringVar(&c.RedisURL, "redis-url", c.RedisURL, "Redis URL for sessions, shared by replicas; empty keeps them in memory (env REDIS_URL)")
	fs.StringVar(&c.JWKSURL, "jwks-url", c.JWKSURL, "the published JWKS browsers verify chains with (env AGTP_CONSOLE_JWKS_URL)")
}

// ApplyEnv reads the environment. The suite's TLS files and peers are
// read as every service reads them (kit.Common).
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	common := kit.Common{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, Peers: c.Peers}
	if err := common.ApplyEnv(lookup); err != nil {
		return err
	}
	c.CAFile, c.CertFile, c.KeyFile, c.Peers = common.CAFile, common.CertFile, common.KeyFile, common.Peers
	set := func(dst *string, key string) {
		if v, ok := lookup(key); ok && v != "" {
			*dst = v
		}
	}
	set(&c.Addr, "CONSOLE_ADDR")
	set(&c.URL, "AGTP_CONSOLE_URL")
	set(&c.JWKSURL, "AGTP_CONSOLE_JWKS_URL")
	set(&c.RedisURL, "REDIS_URL")
	set(&c.OIDC.Issuer, "AGTP_CONSOLE_OIDC_ISSUER")
	set(&c.OIDC.ClientID, "AGTP_CONSOLE_OIDC_CLIENT_ID")
	set(&c.OIDC.ClientSecret, "AGTP_CONSOLE_OIDC_CLIENT_SECRET")
	set(&c.OIDC.RedirectURL, "AGTP_CONSOLE_OIDC_REDIRECT_URL")
	set(&c.OIDC.GroupsClaim, "AGTP_CONSOLE_OIDC_GROUPS_CLAIM")
	set(&c.OIDC.LoginKeyFile, "AGTP_CONSOLE_OIDC_LOGIN_KEY_FILE")
	if v, ok := lookup("AGTP_CONSOLE_OIDC_ALLOWED_GROUPS"); ok && v != "" {
		c.OIDC.AllowedGroups = nil
		for _, g := range strings.Split(v, ",") {
			if g = strings.TrimSpace(g); g != "" {
				c.OIDC.AllowedGroups = append(c.OIDC.AllowedGroups, g)
			}
		}
	}
	if v, ok := lookup("AGTP_CONSOLE_METRICS"); ok && v != "" {
		c.Metrics = map[string]string{}
		for _, kv := range strings.Split(v, ",") {
			name, addr, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || name == "" || addr == "" {
				return fmt.Errorf("AGTP_CONSOLE_METRICS: %q is not name=host:port", kv)
			}
			c.Metrics[name] = addr
		}
	}
	for key, dst := range map[string]*time.Duration{"AGTP_CONSOLE_IDLE_TIMEOUT": &c.IdleTimeout, "AGTP_CONSOLE_SESSION_TIMEOUT": &c.SessionTimeout,
		"AGTP_CONSOLE_METRICS_INTERVAL": &c.MetricsInterval} {
		if v, ok := lookup(key); ok && v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			*dst = d
		}
	}
	return nil
}
