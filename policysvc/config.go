package policysvc

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/agtpsuite/agtp/policysvc/internal/agp"
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
	// AGP configures the Agent Gateway Protocol state (docs/agp.md): the
	// execute confirmation policy and its amount ceiling.
	AGP agp.Options
}

// DefaultConfig returns the defaults used by make run.
func DefaultConfig() Config {
	c := Config{Common: kit.DefaultCommon("policysvc", "127.0.0.1:7102", "127.0.0.1:8102")}
	c.RedisRequired = true
	c.Tasks.DefaultRecipient = "admin"
	c.Tasks.NotifyMaxBackoff = time.Minute
	// An AGP execute needs a confirmation token (AGP §8.1); make run
	// loosens it to open for the walkthrough, and says so.
	c.AGP.ExecutePolicy = "confirm"
	c.AGP.MaxExecuteAmountCents = 100
	return c
}

// BindFlags registers the flags of policysvc.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Common.BindFlags(fs)
	fs.StringVar(&c.OptionsFile, "options", c.OptionsFile, "policy options, JSON (env AGTP_POLICY_FILE)")
	fs.StringVar(&c.Tasks.DefaultRecipient, "escalation-recipient", c.Tasks.DefaultRecipient, "where an ESCALATE without recipient goes: admin, an Agent-ID or an https:// webhook (env AGTP_ESCALATION_RECIPIENT)")
	fs.StringVar(&c.Tasks.ClientCertFile, "notify-client-cert", c.Tasks.ClientCertFile, "certificate presented to remote recipients' AGTP servers, PEM: the suite's AGTP server certificate (env AGTP_NOTIFY_CLIENT_CERT_FILE)")
	fs.StringVar(&c.Tasks.ClientKeyFile, "notify-client-key", c.Tasks.ClientKeyFile, "key of -notify-client-cert, PEM (env AGTP_NOTIFY_CLIENT_KEY_FILE)")
	fs.StringVar(&c.Tasks.CAFile, "notify-ca", c.Tasks.CAFile, "extra CA roots, PEM, for NOTIFY webhooks and remote AGTP servers (env AGTP_NOTIFY_CA_FILE)")
	fs.StringVar(&c.Tasks.GroupsFile, "notify-groups", c.Tasks.GroupsFile, "NOTIFY broadcast groups, JSON {\"name\": [recipients]} (env AGTP_NOTIFY_GROUPS_FILE)")
	fs.DurationVar(&c.Tasks.NotifyMaxBackoff, "notify-max-backoff", c.Tasks.NotifyMaxBackoff, "longest wait between NOTIFY delivery attempts (env AGTP_NOTIFY_MAX_BACKOFF)")
	c.Tasks.Outbound.BindFlags(fs)
	fs.StringVar(&c.AGP.ExecutePolicy, "agp-execute-policy", c.AGP.ExecutePolicy, "AGP execute confirmation policy: open, confirm or strict (env AGTP_AGP_EXECUTE_POLICY)")
	fs.Float64Var(&c.AGP.MaxExecuteAmountCents, "agp-max-execute-amount", c.AGP.MaxExecuteAmountCents, "AGP strict policy ceiling in cents (env AGTP_AGP_MAX_EXECUTE_AMOUNT)")
}

// ApplyEnv reads the environment.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	if v, ok := lookup("AGTP_POLICY_FILE"); ok && v != "" {
		c.OptionsFile = v
	}
	if v, ok := lookup("AGTP_AGP_EXECUTE_POLICY"); ok && v != "" {
		c.AGP.ExecutePolicy = v
	}
	if v, ok := lookup("AGTP_AGP_MAX_EXECUTE_AMOUNT"); ok && v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("AGTP_AGP_MAX_EXECUTE_AMOUNT: %w", err)
		}
		c.AGP.MaxExecuteAmountCents = n
	}
	for key, dst := range map[string]*string{
		"AGTP_ESCALATION_RECIPIENT": &c.Tasks.DefaultRecipient, "AGTP_NOTIFY_CA_FILE": &c.Tasks.CAFile,
		"AGTP_NOTIFY_CLIENT_CERT_FILE": &c.Tasks.ClientCertFile, "AGTP_NOTIFY_CLIENT_KEY_FILE": &c.Tasks.ClientKeyFile, "AGTP_NOTIFY_GROUPS_FILE": &c.Tasks.GroupsFile,
	} {
		if v, ok := lookup(key); ok && v != "" {
			*dst = v
		}
	}
	if v, ok := lookup("AGTP_NOTIFY_MAX_BACKOFF"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("AGTP_NOTIFY_MAX_BACKOFF: %w", err)
		}
		c.Tasks.NotifyMaxBackoff = d
	}
	if err := c.Tasks.Outbound.ApplyEnv(lookup); err != nil {
		return err
	}
	return c.Common.ApplyEnv(lookup)
}

// looser lists, one line each, what cfg and the policy options in effect
// (opts: the file's, else cfg.Options) leave looser than a deployment
// exposed to strangers should be, each naming its setting; New logs them
// as warnings at start-up.
func looser(cfg Config, opts server.Options) []string {
	var out []string
	rl := opts.RateLimits
	limited := rl.PerIP.Enabled() || rl.PerPrincipal.Enabled()
	for _, r := range rl.Tiers {
		limited = limited || r.Enabled()
	}
	if !limited {
		out = append(out, "no rate limit is configured: the policy options set no rate_limits tier, per_ip or per_principal limit, so a caller's request rate is not limited (AGTP_POLICY_FILE, -options: rate_limits)")
	}
	if p := cfg.AGP.ExecutePolicy; p == "" || p == agp.PolicyOpen {
		out = append(out, "the AGP execute policy is open: AGP executes need no confirmation token and a token sent is ignored (AGTP_AGP_EXECUTE_POLICY, -agp-execute-policy: confirm or strict require one)")
	}
	return append(out, cfg.Tasks.Outbound.Looser()...)
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	// The options are validated, with their defaults applied, by New.
	// auditsvc signs escalation resolutions and key revocations.
	_, audit := c.Peer("auditsvc")
	return errors.Join(c.Common.Validate(), c.Tasks.Outbound.Validate(), audit)
}
