package policysvc

import (
	"flag"

	"github.com/agtpsuite/agtp/policysvc/internal/server"
	"github.com/agtpsuite/agtp/policysvc/internal/tasks"
	"github.com/agtpsuite/agtp/services/kit"
)

// Config is the policysvc configuration.
type Config struct {
	kit.Common
	// OptionsFile is a JSON document of policy options (docs/policy.md):
	// rate-limit tiers, idempotency, OAuth, trust tiers, budget, zone and
	// merchant settings. Empty uses the defaults.
	OptionsFile string
	// Options are used when no file is given (the suite sets them in code).
	Options server.Options
	// Tasks configure the task service (ESCALATE, CONFIRM, NOTIFY,
	// DELEGATE bookkeeping; docs/mechanics.md). Zero values take defaults.
	Tasks tasks.Options
}

// DefaultConfig returns the defaults used by make run.
func DefaultConfig() Config {
	c := Config{Common: kit.DefaultCommon("policysvc", "127.0.0.1:7102", "127.0.0.1:8102")}
	c.RedisRequired = true
	return c
}

// BindFlags registers the flags of policysvc.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Common.BindFlags(fs)
	fs.StringVar(&c.OptionsFile, "options", c.OptionsFile, "policy options, JSON (env AGTP_POLICY_FILE)")
}

// ApplyEnv reads the environment.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	if v, ok := lookup("AGTP_POLICY_FILE"); ok && v != "" {
		c.OptionsFile = v
	}
	return c.Common.ApplyEnv(lookup)
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	// The options are validated, with their defaults applied, by New.
	return c.Common.Validate()
}
