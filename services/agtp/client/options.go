package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/keyfile"
)

// Defaults of Options.
const (
	DefaultDialTimeout      = 10 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultMaxConnsPerHost  = 16
	// DefaultIdleConnTimeout is below the servers' idle timeout
	// (agtp.DefaultIdleTimeout, 60 s), so that the client usually closes
	// an idle connection before the server does and seldom writes into
	// one the server is closing.
	DefaultIdleConnTimeout = 50 * time.Second
	// DefaultMaxResponseBody bounds one response body. It is larger than
	// the servers' request limit (1 MiB) because manifests, directories
	// and audit exports are answers, not requests.
	DefaultMaxResponseBody = 16 << 20
	// DefaultMaxSeries bounds how many responses Do reads for one
	// request when the server streams; see Client.Do.
	DefaultMaxSeries = 1024
)

// Options configure a Client. The zero value is usable: TLS against the
// system roots, TCP, DefaultMaxConnsPerHost connections per address, no
// pipelining and no default headers.
type Options struct {
	// TLS, when set, is the base TLS configuration; it is cloned, and the
	// fields below are applied on top of it. AGTP's rules always win:
	// TLS 1.3 minimum and ALPN "agtp" (agtp.ClientTLSConfig).
	TLS *tls.Config
	// RootCAs, or the PEM bundle CAFile when RootCAs is nil, are the
	// roots server certificates are verified against; the system pool
	// when both are empty. For the local suite this is the CA that `make
	// run` prints in its banner.
	RootCAs *x509.CertPool
	CAFile  string
	// InsecureSkipVerify accepts any server certificate. For tests
	// against a server whose CA is not at hand; never in production.
	InsecureSkipVerify bool
	// Certificates, or the PEM pair CertFile and KeyFile, are presented
	// to servers that ask for a client certificate (mutual TLS: AGTP-CERT
	// identity, lifecycle authorization, INSPECT agent_only).
	Certificates      []tls.Certificate
	CertFile, KeyFile string
	// ServerName overrides the name the server certificate is verified
	// for; by default it is the host of the address dialled.
	ServerName string

	// QUIC sends requests over QUIC (one bidirectional stream per
	// request) instead of TLS over TCP.
	QUIC bool
	// Disable0RTT never sends a request in QUIC 0-RTT data. Otherwise a
	// QUERY or DISCOVER on a resumed connection may go out before the
	// handshake completes (agtp.AllowedIn0RTT); other methods always
	// wait for it.
	Disable0RTT bool

	// DialTimeout bounds the TCP connect (or UDP address resolution).
	// Default 10 s.
	DialTimeout time.Duration
	// DialContext, when set, makes the TCP connections in place of a
	// plain net.Dialer (within DialTimeout): a server that dials hosts
	// its callers name passes one that refuses internal addresses
	// (services/outbound). QUIC does not use it, so the two do not go
	// together.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// HandshakeTimeout bounds the TLS or QUIC handshake. Default 10 s.
	HandshakeTimeout time.Duration
	// MaxConnsPerHost bounds the TCP connections open to one address
	// (idle and busy). A request that finds them all busy waits for one,
	// or pipelines (see MaxPipeline). QUIC uses one connection per
	// address and ignores it. Default 16.
	MaxConnsPerHost int
	// IdleConnTimeout closes a pooled connection that has carried no
	// request for this long. Default 50 s.
	IdleConnTimeout time.Duration
	// MaxPipeline is the number of requests that may be in flight on one
	// TCP connection: 1 (the default) never pipelines. Above 1, a
	// request that finds every connection busy and MaxConnsPerHost
	// reached is written behind the requests already in flight on the
	// least loaded connection; responses still come back in order, so a
	// slow response delays the ones behind it.
	MaxPipeline int

	// Header fields added to every request that does not already carry
	// a field of the same name.
	Header agtp.Header
	// AgentID, AuthorityScope and SessionID are shorthands for the
	// Agent-ID, Authority-Scope and Session-ID defaults. Agent-ID names
	// the caller (docs/decisions.md#D-agent-id-is-the-caller), never the
	// agent addressed.
	AgentID        string
	AuthorityScope string
	SessionID      string

	// Limits bound each response read. Zero fields are the agtp
	// defaults, except MaxBody, whose default here is
	// DefaultMaxResponseBody. BodyLimit is not consulted for responses.
	Limits agtp.Limits
	// MaxSeries bounds the responses Do reads for one request.
	// Default 1024.
	MaxSeries int

	// Retry waits out 429 and 503 answers to requests that are safe to
	// repeat, honouring Retry-After. The zero value never retries.
	Retry RetryPolicy
}

// withDefaults returns o with zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.MaxConnsPerHost <= 0 {
		o.MaxConnsPerHost = DefaultMaxConnsPerHost
	}
	if o.IdleConnTimeout <= 0 {
		o.IdleConnTimeout = DefaultIdleConnTimeout
	}
	if o.MaxPipeline <= 0 {
		o.MaxPipeline = 1
	}
	if o.Limits.MaxBody <= 0 {
		o.Limits.MaxBody = DefaultMaxResponseBody
	}
	o.Retry = o.Retry.withDefaults()
	if o.MaxSeries <= 0 {
		o.MaxSeries = DefaultMaxSeries
	}
	return o
}

// Validate reports configuration errors that defaults cannot fix.
func (o Options) Validate() error {
	var errs []error
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, errors.New("client certificate: CertFile and KeyFile go together"))
	}
	if o.CertFile != "" && len(o.Certificates) > 0 {
		errs = append(errs, errors.New("client certificate: set Certificates or CertFile/KeyFile, not both"))
	}
	if o.CAFile != "" && o.RootCAs != nil {
		errs = append(errs, errors.New("roots: set RootCAs or CAFile, not both"))
	}
	if o.QUIC && o.DialContext != nil {
		errs = append(errs, errors.New("DialContext applies to TCP; it cannot be used with QUIC"))
	}
	if o.Retry.MaxRetries < 0 || o.Retry.MaxRetries > 100 {
		errs = append(errs, fmt.Errorf("Retry.MaxRetries %d is outside 0..100", o.Retry.MaxRetries))
	}
	if o.MaxPipeline > 1<<10 {
		errs = append(errs, fmt.Errorf("MaxPipeline %d is above 1024", o.MaxPipeline))
	}
	for _, f := range o.Header {
		if f.Name == "" {
			errs = append(errs, errors.New("a default header field has no name"))
		}
	}
	return errors.Join(errs...)
}

// tlsConfig builds the TLS configuration shared by every connection;
// ServerName is filled in per address.
func (o Options) tlsConfig() (*tls.Config, error) {
	var cfg *tls.Config
	if o.TLS != nil {
		cfg = o.TLS.Clone()
	} else {
		cfg = &tls.Config{}
	}
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS13)
	cfg.NextProtos = []string{agtp.ALPN}
	switch {
	case o.RootCAs != nil:
		cfg.RootCAs = o.RootCAs
	case o.CAFile != "":
		pool, err := keyfile.CertPool(o.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if o.InsecureSkipVerify {
		cfg.InsecureSkipVerify = true
	}
	switch {
	case len(o.Certificates) > 0:
		cfg.Certificates = o.Certificates
	case o.CertFile != "":
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if o.ServerName != "" {
		cfg.ServerName = o.ServerName
	}
	if cfg.ClientSessionCache == nil {
		// Resumption makes reconnects cheaper and is what QUIC 0-RTT
		// needs.
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(64)
	}
	return cfg, nil
}
