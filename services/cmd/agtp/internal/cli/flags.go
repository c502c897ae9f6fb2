package cli

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/services/agtp/client"
)

// flagSet is a flag.FlagSet that knows each flag's aliases, for a help
// text listing "-H, --header" once, and that parses flags placed before,
// between or after positional arguments, as curl allows.
type flagSet struct {
	*flag.FlagSet
	help  []string
	specs []flagSpec
}

// flagSpec describes one flag and its aliases, for help texts and shell
// completion scripts.
type flagSpec struct {
	names      []string
	arg, usage string
}

func newFlagSet(name string, out io.Writer) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs}
}

func (f *flagSet) describe(names []string, arg, usage string) {
	f.specs = append(f.specs, flagSpec{names: names, arg: arg, usage: usage})
	var spell []string
	for _, n := range names {
		if len(n) == 1 {
			spell = append(spell, "-"+n)
		} else {
			spell = append(spell, "--"+n)
		}
	}
	line := strings.Join(spell, ", ")
	if arg != "" {
		line += " " + arg
	}
	f.help = append(f.help, fmt.Sprintf("  %-30s %s", line, usage))
}

func (f *flagSet) str(p *string, names []string, arg, usage string) {
	for _, n := range names {
		f.StringVar(p, n, *p, usage)
	}
	f.describe(names, arg, usage)
}

func (f *flagSet) boolean(p *bool, names []string, usage string) {
	for _, n := range names {
		f.BoolVar(p, n, *p, usage)
	}
	f.describe(names, "", usage)
}

func (f *flagSet) duration(p *time.Duration, names []string, usage string) {
	for _, n := range names {
		f.DurationVar(p, n, *p, usage)
	}
	f.describe(names, "DURATION", usage)
}

func (f *flagSet) integer(p *int, names []string, arg, usage string) {
	for _, n := range names {
		f.IntVar(p, n, *p, usage)
	}
	f.describe(names, arg, usage)
}

func (f *flagSet) uint(p *uint64, names []string, arg, usage string) {
	for _, n := range names {
		f.Uint64Var(p, n, *p, usage)
	}
	f.describe(names, arg, usage)
}

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ", ") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func (f *flagSet) list(p *list, names []string, arg, usage string) {
	for _, n := range names {
		f.Var(p, n, usage)
	}
	f.describe(names, arg, usage)
}

func flagHelp(f *flagSet) string { return strings.Join(f.help, "\n") + "\n" }

// parse parses flags anywhere in args and returns the positional
// arguments in order. "--" ends the flags.
func (f *flagSet) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			return nil, err
		}
		rest := f.Args()
		consumed := args[:len(args)-len(rest)]
		if n := len(consumed); n > 0 && consumed[n-1] == "--" && !f.takesValue(consumed[:n-1]) {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// takesValue reports whether the last of args is a flag whose value is
// the next argument, so that "-d --" reads "--" as the value.
func (f *flagSet) takesValue(args []string) bool {
	if len(args) == 0 {
		return false
	}
	a := args[len(args)-1]
	if !strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
		return false
	}
	fl := f.Lookup(strings.TrimLeft(a, "-"))
	if fl == nil {
		return false
	}
	b, ok := fl.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// isSet reports whether any of names was given.
func (f *flagSet) isSet(names ...string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) {
		for _, n := range names {
			if fl.Name == n {
				set = true
			}
		}
	})
	return set
}

// Environment variables the connection flags fall back to, so that a
// shell (or a container) can hold an agent's identity and the suite CA
// once rather than on every command line.
const (
	EnvCACert  = "AGTP_CACERT"
	EnvCert    = "AGTP_CERT"
	EnvKey     = "AGTP_KEY"
	EnvAgentID = "AGTP_AGENT_ID"
	// EnvJWKSURL names where the server's signing keys are, for a front
	// door whose HTTPS is not on DefaultJWKSPort.
	EnvJWKSURL = "AGTP_JWKS_URL"
)

// connFlags are the connection flags every command that talks to a
// server shares.
type connFlags struct {
	quic      bool
	cacert    string
	insecure  bool
	cert, key string
	agentID   string
	// jwksURL is where --verify-attribution and audit verify fetch the
	// JWKS, with the same CA and client certificate.
	jwksURL string
	timeout time.Duration
	retries int

	flags *flagSet
	// fromEnv names the variables that supplied values, for messages.
	fromEnv []string
}

func (c *connFlags) register(f *flagSet) {
	c.timeout = 30 * time.Second
	c.flags = f
	f.str(&c.agentID, []string{"agent-id"}, "ID", "Agent-ID of the caller (64 hex digits) ($"+EnvAgentID+")")
	f.boolean(&c.quic, []string{"quic"}, "use QUIC instead of TLS over TCP")
	f.str(&c.cacert, []string{"cacert"}, "FILE", "trust this CA (PEM) for the server certificate, e.g. the suite CA `make run` prints ($"+EnvCACert+")")
	f.boolean(&c.insecure, []string{"k", "insecure"}, "do not verify the server certificate (testing only)")
	f.str(&c.cert, []string{"cert"}, "FILE", "client certificate (PEM) for mutual TLS, e.g. an Agent Certificate ($"+EnvCert+")")
	f.str(&c.key, []string{"key"}, "FILE", "private key (PEM) of --cert ($"+EnvKey+")")
	f.str(&c.jwksURL, []string{"jwks-url"}, "URL", fmt.Sprintf("where to fetch the JWKS (default https://HOST:%d/.well-known/jwks.json) ($%s)", DefaultJWKSPort, EnvJWKSURL))
	f.duration(&c.timeout, []string{"timeout"}, "give up after this long (default 30s)")
	f.integer(&c.retries, []string{"retry"}, "N", "wait out a 429 or 503 (honouring Retry-After, with jitter) and resend up to N times; only requests safe to repeat")
}

// applyEnv fills in the flags that were not given from the environment.
// A flag given on the command line wins even when empty, so --agent-id ""
// sends no Agent-ID whatever the environment holds. The certificate and
// its key come as a pair: with either flag given neither variable is
// read, or a certificate from the command line would meet a key from the
// environment.
func (c *connFlags) applyEnv(getenv func(string) string) {
	if getenv == nil || c.flags == nil {
		return
	}
	take := func(p *string, env string) {
		if v := getenv(env); v != "" {
			*p = v
			c.fromEnv = append(c.fromEnv, env)
		}
	}
	if !c.flags.isSet("cacert") {
		take(&c.cacert, EnvCACert)
	}
	if !c.flags.isSet("cert", "key") {
		take(&c.cert, EnvCert)
		take(&c.key, EnvKey)
	}
	if !c.flags.isSet("agent-id") {
		take(&c.agentID, EnvAgentID)
	}
	if !c.flags.isSet("jwks-url") {
		take(&c.jwksURL, EnvJWKSURL)
	}
}

func (c *connFlags) options() client.Options {
	return client.Options{
		QUIC: c.quic, CAFile: c.cacert, InsecureSkipVerify: c.insecure,
		CertFile: c.cert, KeyFile: c.key, AgentID: c.agentID,
		MaxConnsPerHost: 1, DialTimeout: min(c.timeout, client.DefaultDialTimeout),
		HandshakeTimeout: min(c.timeout, client.DefaultHandshakeTimeout),
		Retry:            client.RetryPolicy{MaxRetries: c.retries, MaxDelay: c.timeout},
	}
}

// check reads the environment for the flags not given (getenv may be
// nil) and checks the result.
func (c *connFlags) check(getenv func(string) string) error {
	c.applyEnv(getenv)
	if (c.cert == "") != (c.key == "") {
		if slices.Contains(c.fromEnv, EnvCert) || slices.Contains(c.fromEnv, EnvKey) {
			return fmt.Errorf("%s and %s go together: set both, or neither", EnvCert, EnvKey)
		}
		return fmt.Errorf("--cert and --key go together")
	}
	if c.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive")
	}
	if c.retries < 0 || c.retries > 100 {
		return fmt.Errorf("--retry must be between 0 and 100")
	}
	return nil
}
