package outbound

import (
	"strings"
	"testing"
)

func TestLooserNamesEveryLooserSetting(t *testing.T) {
	cases := []struct {
		name string
		o    Options
		want []string // one line each, in order; none for a safe configuration
	}{
		{"none", Options{}, nil},
		{"exact hosts and wildcard ports", Options{
			Webhooks: []string{"https://hooks.example.com/agtp", "https://127.0.0.1:*", "https://[::1]:*"},
			Peers:    []string{"peer.example.com", "localhost:*"},
		}, nil},
		{"allow private", Options{AllowPrivate: true}, []string{
			"outbound allow_private is on: caller-named webhooks and AGTP hosts may reach loopback, private and link-local addresses (AGTP_OUTBOUND_ALLOW_PRIVATE, -outbound-allow-private)",
		}},
		{"any webhook host", Options{Webhooks: []string{"https://*:*"}}, []string{
			`outbound webhook rule "https://*:*" is a wildcard: callers may name any host as a webhook recipient (AGTP_OUTBOUND_WEBHOOKS, -outbound-webhooks)`,
		}},
		{"webhook hosts under a domain", Options{Webhooks: []string{"https://*.alerts.example.net/hooks"}}, []string{
			`outbound webhook rule "https://*.alerts.example.net/hooks" is a wildcard: callers may name any host under alerts.example.net as a webhook recipient (AGTP_OUTBOUND_WEBHOOKS, -outbound-webhooks)`,
		}},
		{"any peer host", Options{Peers: []string{"*:*"}}, []string{
			`outbound peer rule "*:*" is a wildcard: callers may name any host as a NOTIFY or DELEGATE host (AGTP_OUTBOUND_PEERS, -outbound-peers)`,
		}},
		{"peer hosts under a domain", Options{Peers: []string{"*.agents.example.org"}}, []string{
			`outbound peer rule "*.agents.example.org" is a wildcard: callers may name any host under agents.example.org as a NOTIFY or DELEGATE host (AGTP_OUTBOUND_PEERS, -outbound-peers)`,
		}},
		{"trusted recipients are the operator's own", Options{TrustedWebhooks: []string{"https://10.0.0.1/hook"}, TrustedPeers: []string{"10.0.0.2:4480"}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.o.Validate(); err != nil {
				t.Fatal(err)
			}
			got := tc.o.Looser()
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("Looser() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
