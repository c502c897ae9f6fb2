package rcnssvc

import (
	"errors"
	"flag"

	"github.com/agtpsuite/agtp/rcnssvc/internal/server"
	"github.com/agtpsuite/agtp/services/kit"
)

// Config is the rcnssvc configuration.
type Config struct {
	kit.Common
	// OptionsFile is a JSON document of rcns options (docs/rcns.md).
	OptionsFile string
	// Options are used when no file is given.
	Options server.Options
	// Demo loads the demo synthesis patterns and turns RCNS on (make run).
	Demo bool
}

// DefaultConfig returns the defaults used by make run.
func DefaultConfig() Config {
	c := Config{Common: kit.DefaultCommon("rcnssvc", "127.0.0.1:7103", "127.0.0.1:8103"), Options: server.DefaultOptions()}
	c.RedisRequired = true
	return c
}

// BindFlags registers the flags of rcnssvc.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Common.BindFlags(fs)
	fs.StringVar(&c.OptionsFile, "options", c.OptionsFile, "rcns options, JSON (env AGTP_RCNS_FILE)")
	fs.StringVar(&c.Options.PatternsFile, "patterns", c.Options.PatternsFile, "synthesis patterns file, YAML or JSON (env AGTP_PATTERNS_FILE)")
	fs.BoolVar(&c.Demo, "demo", c.Demo, "load the demo patterns and enable RCNS (env AGTP_DEMO=true)")
}

// ApplyEnv reads the environment.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	if v, ok := lookup("AGTP_RCNS_FILE"); ok && v != "" {
		c.OptionsFile = v
	}
	if v, ok := lookup("AGTP_PATTERNS_FILE"); ok && v != "" {
		c.Options.PatternsFile = v
	}
	if v, ok := lookup("AGTP_DEMO"); ok {
		c.Demo = v == "true" || v == "1"
	}
	return c.Common.ApplyEnv(lookup)
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	errs := []error{c.Common.Validate()}
	for _, p := range []string{"catalogsvc", "policysvc", "auditsvc"} {
		if _, err := c.Peer(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
