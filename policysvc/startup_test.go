package policysvc

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/policysvc/internal/ratelimit"
	"github.com/agtpsuite/agtp/services/outbound"
	"github.com/agtpsuite/agtp/services/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestStartupWarnsOfLooserSettings starts policysvc with each setting
// that is looser than a deployment exposed to strangers should have, and
// checks that the start-up log says so, once, as a warning; a
// configuration with a rate limit, a confirming execute policy and
// outbound lists that name hosts exactly warns of none of them.
func TestStartupWarnsOfLooserSettings(t *testing.T) {
	warnings := map[string]string{
		"no rate limit":    "no rate limit is configured: the policy options set no rate_limits tier, per_ip or per_principal limit, so a caller's request rate is not limited (AGTP_POLICY_FILE",
		"open execute":     "the AGP execute policy is open: AGP executes need no confirmation token and a token sent is ignored (AGTP_AGP_EXECUTE_POLICY",
		"private outbound": "outbound allow_private is on: caller-named webhooks and AGTP hosts may reach loopback, private and link-local addresses (AGTP_OUTBOUND_ALLOW_PRIVATE",
		"wildcard webhook": `outbound webhook rule "https://*:*" is a wildcard: callers may name any host as a webhook recipient (AGTP_OUTBOUND_WEBHOOKS`,
		"wildcard peer":    `outbound peer rule "*.agents.example.com" is a wildcard: callers may name any host under agents.example.com as a NOTIFY or DELEGATE host (AGTP_OUTBOUND_PEERS`,
	}
	rate := ratelimit.Rate{Limit: 100, Period: time.Minute}
	policyFile := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(policyFile, []byte(`{"rate_limits": {"per_principal": {"limit": 100, "period": 60000000000}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	safe := func(c *Config) {
		c.Options.RateLimits.PerIP = rate
		c.AGP.ExecutePolicy = "confirm"
		c.Tasks.Outbound = outbound.Options{Webhooks: []string{"https://hooks.example.com/agtp", "https://127.0.0.1:*"}, Peers: []string{"peer.example.com", "localhost:*"}}
	}
	cases := []struct {
		name  string
		adapt func(*Config)
		want  []string
	}{
		{"safe", safe, nil},
		{"a tier's limit", func(c *Config) {
			safe(c)
			c.Options.RateLimits.PerIP = ratelimit.Rate{}
			c.Options.RateLimits.Tiers = map[string]ratelimit.Rate{"default": rate}
		}, nil},
		{"a per-principal limit in the policy file", func(c *Config) { safe(c); c.Options = Config{}.Options; c.OptionsFile = policyFile }, nil},
		{"defaults", func(*Config) {}, []string{"no rate limit"}},
		{"no rate limit", func(c *Config) { safe(c); c.Options.RateLimits.PerIP = ratelimit.Rate{} }, []string{"no rate limit"}},
		{"the policy file replaces the options", func(c *Config) {
			safe(c)
			c.OptionsFile = filepath.Join(t.TempDir(), "empty.json")
			if err := os.WriteFile(c.OptionsFile, []byte(`{}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"no rate limit"}},
		{"open execute", func(c *Config) { safe(c); c.AGP.ExecutePolicy = "open" }, []string{"open execute"}},
		{"execute policy left empty", func(c *Config) { safe(c); c.AGP.ExecutePolicy = "" }, []string{"open execute"}},
		{"private outbound", func(c *Config) { safe(c); c.Tasks.Outbound.AllowPrivate = true }, []string{"private outbound"}},
		{"wildcard outbound", func(c *Config) {
			safe(c)
			c.Tasks.Outbound.Webhooks = append(c.Tasks.Outbound.Webhooks, "https://*:*")
			c.Tasks.Outbound.Peers = append(c.Tasks.Outbound.Peers, "*.agents.example.com")
		}, []string{"wildcard webhook", "wildcard peer"}},
	}
	l := testkit.PKI(t)
	redis := testkit.StartRedis(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.GRPCAddr, cfg.HTTPAddr, cfg.LogFormat = "127.0.0.1:0", "127.0.0.1:0", "json"
			cfg.CAFile, cfg.CertFile, cfg.KeyFile = l.CA(), l.Cert("policysvc"), l.Key("policysvc")
			cfg.RedisURL = redis.URL()
			// The connection is made on first use, which this never sees.
			cfg.Peers = map[string]string{"auditsvc": "127.0.0.1:1"}
			tc.adapt(&cfg)
			log := testkit.StartupLog(t, func() (io.Closer, error) { return New(context.Background(), cfg) })
			testkit.CheckWarnings(t, log, warnings, tc.want)
		})
	}
}
