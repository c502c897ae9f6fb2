package identitysvc

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/internal/registry"
	"github.com/agtpsuite/agtp/identitysvc/internal/server"
	"github.com/agtpsuite/agtp/services/kit"
)

// Config is the identitysvc configuration.
type Config struct {
	kit.Common
	// Options are the registry's settings (docs/identity.md).
	Options server.Options
	// AgentCACertFile and AgentCAKeyFile are the agent CA that issues
	// registrar-issued Agent Certificates (PEM; the certificate file may
	// carry the CA's chain after it). Both or neither; without them
	// IssueAgentCertificate issues nothing. The agent CA is never the
	// service CA of CAFile.
	AgentCACertFile string
	AgentCAKeyFile  string
}

// DefaultConfig returns the defaults used by make run.
func DefaultConfig() Config {
	c := Config{Common: kit.DefaultCommon("identitysvc", "127.0.0.1:7104", "127.0.0.1:8104")}
	c.RedisRequired = true
	c.Options.LifecycleAuth = registry.AuthGenesisIssuer
	c.Options.AgentCertMaxLifetime = agentcert.DefaultLifetime
	return c
}

// BindFlags registers the flags of identitysvc.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Common.BindFlags(fs)
	fs.StringVar(&c.Options.LifecycleAuth, "lifecycle-auth", c.Options.LifecycleAuth, "lifecycle authorisation: genesis_issuer, or open (loopback listeners only) (env AGTP_LIFECYCLE_AUTH)")
	fs.StringVar(&c.Options.OrgDomain, "org-domain", c.Options.OrgDomain, "organisation domain of hosted agents (env AGTP_ORG_DOMAIN)")
	fs.StringVar(&c.Options.IssuerURL, "issuer-url", c.Options.IssuerURL, "issuer URL of identity documents")
	fs.StringVar(&c.AgentCACertFile, "agent-ca-cert", c.AgentCACertFile, "agent CA certificate that issues Agent Certificates, PEM; never the service CA (env AGTP_AGENT_CA_CERT_FILE)")
	fs.StringVar(&c.AgentCAKeyFile, "agent-ca-key", c.AgentCAKeyFile, "private key of the agent CA, PEM (env AGTP_AGENT_CA_KEY_FILE)")
	fs.DurationVar(&c.Options.AgentCertMaxLifetime, "agent-cert-max-lifetime", c.Options.AgentCertMaxLifetime, "longest validity of an issued Agent Certificate (env AGTP_AGENT_CERT_MAX_LIFETIME)")
}

// ApplyEnv reads the environment.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	if v, ok := lookup("AGTP_LIFECYCLE_AUTH"); ok && v != "" {
		c.Options.LifecycleAuth = v
	}
	if v, ok := lookup("AGTP_ORG_DOMAIN"); ok && v != "" {
		c.Options.OrgDomain = v
	}
	if v, ok := lookup("AGTP_OPERATOR_FINGERPRINTS"); ok && v != "" {
		c.Options.OperatorFingerprints = strings.Split(v, ",")
	}
	if v, ok := lookup("AGTP_AGENT_CA_CERT_FILE"); ok && v != "" {
		c.AgentCACertFile = v
	}
	if v, ok := lookup("AGTP_AGENT_CA_KEY_FILE"); ok && v != "" {
		c.AgentCAKeyFile = v
	}
	if v, ok := lookup("AGTP_AGENT_CERT_MAX_LIFETIME"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("AGTP_AGENT_CERT_MAX_LIFETIME: %w", err)
		}
		c.Options.AgentCertMaxLifetime = d
	}
	return c.Common.ApplyEnv(lookup)
}

// Validate reports every problem at once. It reads the agent CA's files,
// so that an unusable agent CA, or the service CA given as one, stops
// identitysvc at start-up rather than at the first issuance.
func (c Config) Validate() error {
	var errs []error
	errs = append(errs, c.Common.Validate())
	if c.SigningKeyFile == "" {
		errs = append(errs, errors.New("a signing key is required (AGTP_SIGNING_KEY_FILE): identity documents are signed"))
	}
	if _, err := c.Peer("auditsvc"); err != nil {
		errs = append(errs, err)
	}
	if c.Options.LifecycleAuth == registry.AuthOpen && !c.loopbackOnly() {
		errs = append(errs, fmt.Errorf("lifecycle auth %q lets any caller run every lifecycle method, so it is allowed only when every listener "+
			"is on loopback (gRPC %q, REST gateway %q): use %q (AGTP_LIFECYCLE_AUTH) with operator fingerprints, or listen on loopback only",
			registry.AuthOpen, c.GRPCAddr, c.HTTPAddr, registry.AuthGenesisIssuer))
	}
	if _, err := c.loadAgentCA(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// loopbackOnly reports whether every listener of identitysvc (gRPC and,
// when enabled, the REST gateway) is on a loopback address, so that only
// processes on this host can reach it.
func (c Config) loopbackOnly() bool {
	if !kit.IsLoopbackAddr(c.GRPCAddr) {
		return false
	}
	return c.HTTPAddr == "" || kit.IsLoopbackAddr(c.HTTPAddr)
}
