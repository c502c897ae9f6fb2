package identitysvc

import (
	"errors"
	"flag"
	"strings"

	"github.com/agtpsuite/agtp/identitysvc/internal/server"
	"github.com/agtpsuite/agtp/services/kit"
)

// Config is the identitysvc configuration.
type Config struct {
	kit.Common
	// Options are the registry's settings (docs/identity.md).
	Options server.Options
}

// DefaultConfig returns the defaults used by make run.
func DefaultConfig() Config {
	c := Config{Common: kit.DefaultCommon("identitysvc", "127.0.0.1:7104", "127.0.0.1:8104")}
	c.RedisRequired = true
	c.Options.LifecycleAuth = "open"
	return c
}

// BindFlags registers the flags of identitysvc.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Common.BindFlags(fs)
	fs.StringVar(&c.Options.LifecycleAuth, "lifecycle-auth", c.Options.LifecycleAuth, "lifecycle authorisation: open or genesis_issuer (env AGTP_LIFECYCLE_AUTH)")
	fs.StringVar(&c.Options.OrgDomain, "org-domain", c.Options.OrgDomain, "organisation domain of hosted agents (env AGTP_ORG_DOMAIN)")
	fs.StringVar(&c.Options.IssuerURL, "issuer-url", c.Options.IssuerURL, "issuer URL of identity documents")
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
	return c.Common.ApplyEnv(lookup)
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	errs = append(errs, c.Common.Validate())
	if c.SigningKeyFile == "" {
		errs = append(errs, errors.New("a signing key is required (AGTP_SIGNING_KEY_FILE): identity documents are signed"))
	}
	if _, err := c.Peer("auditsvc"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
