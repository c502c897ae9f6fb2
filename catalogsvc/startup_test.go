package catalogsvc

import (
	"context"
	"io"
	"testing"

	"github.com/agtpsuite/agtp/services/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestStartupWarnsOfTheDemo checks that catalogsvc serving its embedded
// demo endpoints, anonymous ones included, says so at start-up as a
// warning, and that it does not otherwise.
func TestStartupWarnsOfTheDemo(t *testing.T) {
	warnings := map[string]string{
		"demo": "demo endpoints are on: the embedded demo endpoints are served, anonymous ones included; for development only (AGTP_DEMO, -demo)",
	}
	cases := []struct {
		name  string
		adapt func(*Config)
		want  []string
	}{
		{"defaults", func(*Config) {}, nil},
		{"demo", func(c *Config) { c.Options.DemoEndpoints = true }, []string{"demo"}},
		{"an endpoints directory wins over the demo", func(c *Config) {
			c.Options.DemoEndpoints, c.Options.EndpointsDir = true, t.TempDir()
		}, nil},
	}
	l := testkit.PKI(t)
	redis := testkit.StartRedis(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.GRPCAddr, cfg.HTTPAddr, cfg.LogFormat = "127.0.0.1:0", "127.0.0.1:0", "json"
			cfg.CAFile, cfg.CertFile, cfg.KeyFile = l.CA(), l.Cert("catalogsvc"), l.Key("catalogsvc")
			cfg.RedisURL = redis.URL()
			tc.adapt(&cfg)
			log := testkit.StartupLog(t, func() (io.Closer, error) { return New(context.Background(), cfg) })
			testkit.CheckWarnings(t, log, warnings, tc.want)
		})
	}
}
