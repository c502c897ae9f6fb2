package outbound

import (
	"fmt"
	"strconv"

	"github.com/agtpsuite/agtp/services/agtp"
)

// Looser lists, one line each, what o lets callers reach beyond the
// default (no caller-named destination, and none of them private): a
// wildcard host in either list (* or *.domain), and AllowPrivate. Each
// line names the setting. Entries that do not parse are left to
// Validate. The front door and policysvc log each line as a warning at
// start-up.
func (o Options) Looser() []string {
	var out []string
	if o.AllowPrivate {
		out = append(out, "outbound allow_private is on: caller-named webhooks and AGTP hosts may reach loopback, private and link-local addresses ("+EnvAllowPrivate+", -outbound-allow-private)")
	}
	for _, e := range o.Webhooks {
		if r, err := parseWebhookRule(e); err == nil && (r.any || r.suffix) {
			out = append(out, fmt.Sprintf("outbound webhook rule %q is a wildcard: callers may name %s as a webhook recipient (%s, -outbound-webhooks)", e, r.covers(), EnvWebhooks))
		}
	}
	for _, e := range o.Peers {
		if r, err := parseHostRule(e, strconv.Itoa(agtp.DefaultPort)); err == nil && (r.any || r.suffix) {
			out = append(out, fmt.Sprintf("outbound peer rule %q is a wildcard: callers may name %s as a NOTIFY or DELEGATE host (%s, -outbound-peers)", e, r.covers(), EnvPeers))
		}
	}
	return out
}

// covers says which hosts a wildcard rule matches.
func (r hostRule) covers() string {
	if r.any {
		return "any host"
	}
	return "any host under " + r.host[1:]
}
