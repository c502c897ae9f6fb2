package rcnssvc

import (
	"context"
	"io"
	"testing"

	"github.com/agtpsuite/agtp/services/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestStartupWarnsOfTheDemo checks that rcnssvc's demo (RCNS on, the
// demo patterns, trust tier 2 admitted) says so at start-up as a
// warning, and that it does not otherwise.
func TestStartupWarnsOfTheDemo(t *testing.T) {
	warnings := map[string]string{
		"demo": "demo is on: RCNS is enabled with the demo synthesis patterns and callers of trust tier 2 (org-asserted) may negotiate contracts; for development only (AGTP_DEMO, -demo)",
	}
	cases := []struct {
		name string
		demo bool
		want []string
	}{
		{"defaults", false, nil},
		{"demo", true, []string{"demo"}},
	}
	l := testkit.PKI(t)
	redis := testkit.StartRedis(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.GRPCAddr, cfg.HTTPAddr, cfg.LogFormat = "127.0.0.1:0", "127.0.0.1:0", "json"
			cfg.CAFile, cfg.CertFile, cfg.KeyFile = l.CA(), l.Cert("rcnssvc"), l.Key("rcnssvc")
			cfg.RedisURL = redis.URL()
			// Connections are made on first use, which these never see.
			cfg.Peers = map[string]string{"catalogsvc": "127.0.0.1:1", "policysvc": "127.0.0.1:1", "auditsvc": "127.0.0.1:1"}
			cfg.Demo = tc.demo
			log := testkit.StartupLog(t, func() (io.Closer, error) { return New(context.Background(), cfg) })
			testkit.CheckWarnings(t, log, warnings, tc.want)
		})
	}
}
