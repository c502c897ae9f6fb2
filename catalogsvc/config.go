package catalogsvc

import (
	"errors"
	"flag"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/internal/server"
	"github.com/agtpsuite/agtp/services/kit"
)

// Config is the catalogsvc configuration.
type Config struct {
	kit.Common
	// Options are the catalog's own settings (docs/catalogsvc.md).
	Options server.Options
}

// DefaultConfig returns the defaults used by make run.
func DefaultConfig() Config {
	c := Config{Common: kit.DefaultCommon("catalogsvc", "127.0.0.1:7101", "127.0.0.1:8101"), Options: server.DefaultOptions()}
	c.RedisRequired = true
	c.Options.Manifest.ServerID = "agtp.localhost"
	return c
}

// BindFlags registers the flags of catalogsvc.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Common.BindFlags(fs)
	fs.StringVar(&c.Options.CatalogFile, "catalog", c.Options.CatalogFile, "method catalog JSON (default: the embedded AGTP-API catalog 1.0.0) (env AGTP_CATALOG_FILE)")
	fs.StringVar(&c.Options.EndpointsDir, "endpoints-dir", c.Options.EndpointsDir, "directory of endpoint definition files, reloaded on change (env AGTP_ENDPOINTS_DIR)")
	fs.BoolVar(&c.Options.DemoEndpoints, "demo", c.Options.DemoEndpoints, "load the embedded demo endpoints when no directory is given (env AGTP_DEMO=true)")
	fs.DurationVar(&c.Options.ReloadInterval, "reload-interval", c.Options.ReloadInterval, "how often the endpoints directory is checked")
	fs.StringVar(&c.Options.Manifest.ServerID, "server-id", c.Options.Manifest.ServerID, "server_id of the manifest (env AGTP_SERVER_ID)")
}

// ApplyEnv reads the environment.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	if err := c.Common.ApplyEnv(lookup); err != nil {
		return err
	}
	for key, dst := range map[string]*string{
		"AGTP_CATALOG_FILE": &c.Options.CatalogFile, "AGTP_ENDPOINTS_DIR": &c.Options.EndpointsDir, "AGTP_SERVER_ID": &c.Options.Manifest.ServerID,
	} {
		if v, ok := lookup(key); ok && v != "" {
			*dst = v
		}
	}
	if v, ok := lookup("AGTP_DEMO"); ok {
		c.Options.DemoEndpoints = v == "true" || v == "1"
	}
	return nil
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var reload error
	if c.Options.ReloadInterval < 0 || c.Options.ReloadInterval > 0 && c.Options.ReloadInterval < 100*time.Millisecond {
		reload = errors.New("reload interval must be 0 (off) or at least 100ms")
	}
	return errors.Join(c.Common.Validate(), c.Options.Validate(), reload)
}
