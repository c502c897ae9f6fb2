package outbound

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// Environment variables of the settings; every service that dials
// caller-named destinations reads the same ones.
const (
	EnvWebhooks     = "AGTP_OUTBOUND_WEBHOOKS"
	EnvPeers        = "AGTP_OUTBOUND_PEERS"
	EnvAllowPrivate = "AGTP_OUTBOUND_ALLOW_PRIVATE"
)

// BindFlags registers -outbound-webhooks, -outbound-peers and
// -outbound-allow-private.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.Var((*list)(&o.Webhooks), "outbound-webhooks",
		"webhook destinations callers may name, comma-separated https://host[:port][/path-prefix] (host may be *.domain) (env "+EnvWebhooks+")")
	fs.Var((*list)(&o.Peers), "outbound-peers",
		"AGTP hosts callers may name for NOTIFY and DELEGATE, comma-separated host[:port] (host may be *.domain, port *) (env "+EnvPeers+")")
	fs.BoolVar(&o.AllowPrivate, "outbound-allow-private", o.AllowPrivate,
		"let caller-named destinations reach loopback, private and link-local addresses (env "+EnvAllowPrivate+")")
}

// ApplyEnv reads the settings from the environment; a set variable
// replaces the list.
func (o *Options) ApplyEnv(lookup func(string) (string, bool)) error {
	if v, ok := lookup(EnvWebhooks); ok && v != "" {
		o.Webhooks = SplitList(v)
	}
	if v, ok := lookup(EnvPeers); ok && v != "" {
		o.Peers = SplitList(v)
	}
	if v, ok := lookup(EnvAllowPrivate); ok && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s: %w", EnvAllowPrivate, err)
		}
		o.AllowPrivate = b
	}
	return nil
}

// Validate parses the options and reports every bad entry.
func (o Options) Validate() error {
	_, err := New(o)
	return err
}

// SplitList splits a comma-separated list, dropping blanks.
func SplitList(s string) []string {
	var out []string
	for e := range strings.SplitSeq(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// list is a comma-separated flag value; each use of the flag adds to it.
type list []string

func (l *list) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *list) Set(v string) error {
	*l = append(*l, SplitList(v)...)
	return nil
}
