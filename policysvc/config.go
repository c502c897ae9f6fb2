package policysvc

import (
	"flag"

	"github.com/agtpsuite/agtp/services/kit"
)

// Config is the policysvc configuration.
type Config struct {
	kit.Common
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
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	return c.Common.Validate()
}
