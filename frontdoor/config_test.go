package frontdoor

import (
	"strings"
	"testing"
)

func TestPublicAGTPHost(t *testing.T) {
	cases := []struct {
		name, public, domain, listen, want string
	}{
		{"configured wins", "agtp.example.test", "example.test", "127.0.0.1:4480", "agtp.example.test"},
		{"default port left out", "", "example.test", "127.0.0.1:4480", "127.0.0.1"},
		{"other port kept", "", "example.test", "127.0.0.1:9443", "127.0.0.1:9443"},
		{"wildcard address names the domain", "", "example.test", "0.0.0.0:4480", "example.test"},
		{"IPv6 wildcard with a port", "", "example.test", "[::]:5000", "example.test:5000"},
		{"IPv6 loopback", "", "example.test", "[::1]:4480", "[::1]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.PublicHost, c.Domain = tc.public, tc.domain
			if got := c.PublicAGTPHost(tc.listen); got != tc.want {
				t.Fatalf("PublicAGTPHost(%q) = %q, want %q", tc.listen, got, tc.want)
			}
		})
	}
}

func TestValidateDomainAndPublicHost(t *testing.T) {
	cases := []struct {
		domain, public string
		wantErr        string
	}{
		{"example.test", "agtp.example.test:4481", ""},
		{"example.test:4480", "", "domain"},
		{"agtp://example.test", "", "domain"},
		{"example.test", "agtp.example.test/agents", "public host"},
		{"example.test", "user@agtp.example.test", "public host"},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		c.Domain, c.PublicHost = tc.domain, tc.public
		err := c.Validate() // also reports the missing certificates, which these cases do not set
		var msg string
		if err != nil {
			msg = err.Error()
		}
		for _, what := range []string{"domain", "public host"} {
			if got := strings.Contains(msg, what+" \""); got != (what == tc.wantErr) {
				t.Errorf("domain %q, public host %q: error %q; want a %q complaint: %v", tc.domain, tc.public, msg, what, what == tc.wantErr)
			}
		}
	}
}
