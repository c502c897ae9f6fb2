// Package kit is the shared service kit: every internal service and the
// front door are built from it, so they start, serve, trace, report health
// and shut down the same way.
//
// A service is a Config (typed, with defaults and Validate), a constructor
// New(cfg) and Run(ctx). Run starts the service's tasks under RunTasks and,
// on cancellation, drains: health NOT_SERVING, stop accepting, GracefulStop
// with a deadline, then Stop.
package kit

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/services/access"
)

// Common is the configuration every service shares.
type Common struct {
	// Name is the service name used for logs, traces and certificates.
	Name string
	// GRPCAddr is the mTLS gRPC listen address.
	GRPCAddr string
	// HTTPAddr is the mTLS REST gateway listen address; empty disables it.
	HTTPAddr string
	// CAFile, CertFile and KeyFile are the suite CA bundle and this
	// service's certificate and key (used both as server and as client).
	CAFile   string
	CertFile string
	KeyFile  string
	// SigningKeyFile is the suite's Ed25519 signing key (PKCS#8 PEM), for
	// services that sign (manifest, identity documents, audit records).
	SigningKeyFile string
	// RedisURL is redis://, rediss:// or redis+cluster:// (see NewRedis).
	RedisURL string
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is text or json.
	LogFormat string
	// ShutdownTimeout bounds the graceful drain.
	ShutdownTimeout time.Duration
	// Peers maps service names to their gRPC addresses, for services that
	// call others.
	Peers map[string]string
	// Telemetry says where traces and metrics go.
	Telemetry TelemetryConfig
	// RedisRequired makes Validate insist on RedisURL.
	RedisRequired bool
	// PprofAddr, when set, serves net/http/pprof on this address for
	// profiling (the load benchmark's -pprof runs use it). Off by default;
	// loopback addresses only, because profiles expose internals and the
	// listener has no authentication.
	PprofAddr string
	// Reflection serves the gRPC reflection API, which lists every
	// service and message to whoever may connect. Off by default; on for
	// debugging with grpcurl and the like.
	Reflection bool
	// RuntimeSocketIO makes the process's TCP reads and writes through the
	// Go runtime's ordinary system-call path instead of rawsock's direct
	// calls, which keep the goroutine's processor (docs/performance.md,
	// "Direct socket I/O"): the way back, for a system where the direct
	// calls misbehave. Off by default; process-wide once any service of
	// the process sets it.
	RuntimeSocketIO bool
	// TrustDomain is the SPIFFE trust domain of the suite's identities:
	// a client certificate naming spiffe://<trust domain>/<kind>/<name>
	// is that service, operator or internal system (docs/access.md).
	TrustDomain string
	// IdentityMapFile maps external certificate names (another trust
	// domain's SPIFFE IDs, DNS SANs) to identities; empty maps none.
	IdentityMapFile string
}

// DefaultCommon returns defaults for the named service listening on the
// given gRPC and gateway addresses.
func DefaultCommon(name, grpcAddr, httpAddr string) Common {
	return Common{
		Name:            name,
		GRPCAddr:        grpcAddr,
		HTTPAddr:        httpAddr,
		LogLevel:        "info",
		LogFormat:       "text",
		ShutdownTimeout: 10 * time.Second,
		TrustDomain:     access.DefaultTrustDomain,
	}
}

// Validate reports every problem in the configuration at once.
func (c Common) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("name is empty"))
	}
	if c.GRPCAddr == "" {
		errs = append(errs, errors.New("grpc address is empty"))
	}
	if c.CAFile == "" || c.CertFile == "" || c.KeyFile == "" {
		errs = append(errs, ErrNoTLS)
	}
	if c.RedisRequired && c.RedisURL == "" {
		errs = append(errs, errors.New("redis url is empty (set REDIS_URL)"))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log format %q is not text or json", c.LogFormat))
	}
	if err := checkPprofAddr(c.PprofAddr); err != nil {
		errs = append(errs, err)
	}
	if c.Telemetry.Prometheus && c.HTTPAddr == "" {
		errs = append(errs, errors.New("the Prometheus endpoint (AGTP_PROMETHEUS) is served on the admin listener, and HTTP_ADDR is empty"))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("shutdown timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Peer returns the address of a named peer service.
func (c Common) Peer(name string) (string, error) {
	addr := c.Peers[name]
	if addr == "" {
		return "", fmt.Errorf("no address configured for peer %s", name)
	}
	return addr, nil
}

// BindFlags registers the common flags on fs, with c's values as defaults.
// Flags and environment are read only in the command layer.
func (c *Common) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address (env GRPC_ADDR)")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "REST gateway listen address, empty to disable (env HTTP_ADDR)")
	fs.StringVar(&c.CAFile, "ca", c.CAFile, "suite CA bundle, PEM (env AGTP_CA_FILE)")
	fs.StringVar(&c.CertFile, "cert", c.CertFile, "service certificate, PEM (env AGTP_CERT_FILE)")
	fs.StringVar(&c.KeyFile, "key", c.KeyFile, "service private key, PEM (env AGTP_KEY_FILE)")
	fs.StringVar(&c.SigningKeyFile, "signing-key", c.SigningKeyFile, "Ed25519 signing key, PKCS#8 PEM (env AGTP_SIGNING_KEY_FILE)")
	fs.StringVar(&c.RedisURL, "redis-url", c.RedisURL, "Redis URL: redis://, rediss:// or redis+cluster:// (env REDIS_URL)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error (env LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text or json (env LOG_FORMAT)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "graceful drain deadline (env SHUTDOWN_TIMEOUT)")
	fs.StringVar(&c.PprofAddr, "pprof-addr", c.PprofAddr, "serve net/http/pprof on this loopback address, for profiling; empty disables (env PPROF_ADDR)")
	fs.BoolVar(&c.Reflection, "grpc-reflection", c.Reflection, "serve the gRPC reflection API, for debugging (env GRPC_REFLECTION)")
	fs.BoolVar(&c.RuntimeSocketIO, "runtime-socket-io", c.RuntimeSocketIO, "make TCP reads and writes through the Go runtime's system-call path instead of direct calls that keep the processor; on or off (env AGTP_RUNTIME_SOCKET_IO)")
	fs.BoolVar(&c.Telemetry.Prometheus, "prometheus", c.Telemetry.Prometheus, "serve the metrics for a Prometheus scrape as GET /metrics on the admin listener (-http-addr); on or off (env AGTP_PROMETHEUS)")
	fs.StringVar(&c.Telemetry.InstanceID, "instance-id", c.Telemetry.InstanceID, "service.instance.id of traces and metrics, e.g. the pod's name; empty: a random UUID per process (env AGTP_INSTANCE_ID)")
	fs.StringVar(&c.TrustDomain, "trust-domain", c.TrustDomain, "SPIFFE trust domain of the suite's client identities (env AGTP_TRUST_DOMAIN)")
	fs.StringVar(&c.IdentityMapFile, "identity-map", c.IdentityMapFile, "JSON file mapping external certificate names to identities, e.g. {\"dns:ops.example\": \"operator/ops\"} (env AGTP_IDENTITY_MAP)")
	fs.Func("peer", "peer service address as name=host:port, repeatable (env AGTP_PEERS=name=addr,...)", func(v string) error {
		return c.addPeers(v)
	})
}

// ApplyEnv overrides values from the environment; lookup is os.LookupEnv in
// a main package and a map in tests.
func (c *Common) ApplyEnv(lookup func(string) (string, bool)) error {
	set := func(dst *string, key string) {
		if v, ok := lookup(key); ok && v != "" {
			*dst = v
		}
	}
	set(&c.GRPCAddr, "GRPC_ADDR")
	set(&c.HTTPAddr, "HTTP_ADDR")
	set(&c.CAFile, "AGTP_CA_FILE")
	set(&c.CertFile, "AGTP_CERT_FILE")
	set(&c.KeyFile, "AGTP_KEY_FILE")
	set(&c.RedisURL, "REDIS_URL")
	set(&c.SigningKeyFile, "AGTP_SIGNING_KEY_FILE")
	set(&c.LogLevel, "LOG_LEVEL")
	set(&c.LogFormat, "LOG_FORMAT")
	set(&c.PprofAddr, "PPROF_ADDR")
	set(&c.TrustDomain, "AGTP_TRUST_DOMAIN")
	set(&c.IdentityMapFile, "AGTP_IDENTITY_MAP")
	set(&c.Telemetry.InstanceID, "AGTP_INSTANCE_ID")
	if v, ok := lookup("SHUTDOWN_TIMEOUT"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("SHUTDOWN_TIMEOUT: %w", err)
		}
		c.ShutdownTimeout = d
	}
	if v, ok := lookup("OTEL_EXPORTER_OTLP_ENDPOINT"); ok && v != "" {
		c.Telemetry.OTLPExport = true
	}
	if v, ok := lookup("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); ok && v != "" {
		c.Telemetry.OTLPExport = true
	}
	if v, ok := lookup("GRPC_REFLECTION"); ok && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("GRPC_REFLECTION: %w", err)
		}
		c.Reflection = b
	}
	if v, ok := lookup("AGTP_RUNTIME_SOCKET_IO"); ok && v != "" {
		b, err := ParseSwitch(v)
		if err != nil {
			return fmt.Errorf("AGTP_RUNTIME_SOCKET_IO: %w", err)
		}
		c.RuntimeSocketIO = b
	}
	if v, ok := lookup("AGTP_PROMETHEUS"); ok && v != "" {
		b, err := ParseSwitch(v)
		if err != nil {
			return fmt.Errorf("AGTP_PROMETHEUS: %w", err)
		}
		c.Telemetry.Prometheus = b
	}
	if v, ok := lookup("AGTP_PEERS"); ok && v != "" {
		for _, p := range strings.Split(v, ",") {
			if err := c.addPeers(strings.TrimSpace(p)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ParseSwitch reads an on/off setting: on or off, or anything
// strconv.ParseBool takes (true, false, 1, 0).
func ParseSwitch(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%q is not on or off", v)
	}
	return b, nil
}

func (c *Common) addPeers(v string) error {
	name, addr, ok := strings.Cut(v, "=")
	if !ok || name == "" || addr == "" {
		return fmt.Errorf("peer %q is not name=host:port", v)
	}
	if c.Peers == nil {
		c.Peers = map[string]string{}
	}
	c.Peers[name] = addr
	return nil
}

// Logger builds the service's slog logger. A record written with a
// context that holds a valid span carries the span's trace_id and span_id.
func (c Common) Logger(out interface{ Write([]byte) (int, error) }) *slog.Logger {
	level, _ := parseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if c.LogFormat == "json" {
		h = slog.NewJSONHandler(out, opts)
	} else {
		h = slog.NewTextHandler(out, opts)
	}
	return slog.New(withTraceIDs(h)).With("service", c.Name)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log level %q: %w", s, err)
	}
	return l, nil
}
