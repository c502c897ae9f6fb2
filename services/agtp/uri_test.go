package agtp

import (
	"strings"
	"testing"
)

var testID = strings.Repeat("7f3a9c2d", 8) // 64 lowercase hex

func TestParseURIForms(t *testing.T) {
	tests := []struct {
		in   string
		want URI
		addr string
	}{
		// Form 1: canonical identity.
		{"agtp://" + testID, URI{Form: FormCanonical, AgentID: testID}, ""},
		{"AGTP://" + testID + "/status?format=json", URI{Form: FormCanonical, AgentID: testID, Path: "/status", RawQuery: "format=json"}, ""},
		// Form 1a: identity plus host hint, port allowed.
		{"agtp://" + testID + "@agents.acme.com", URI{Form: FormCanonicalHost, AgentID: testID, Host: "agents.acme.com"}, "agents.acme.com:4480"},
		{"agtp://" + testID + "@192.0.2.42", URI{Form: FormCanonicalHost, AgentID: testID, Host: "192.0.2.42"}, "192.0.2.42:4480"},
		{"agtp://" + testID + "@Agents.ACME.com:9999/orders?x=1", URI{Form: FormCanonicalHost, AgentID: testID, Host: "agents.acme.com", Port: 9999, Path: "/orders", RawQuery: "x=1"}, "agents.acme.com:9999"},
		{"agtp://" + testID + "@[2001:DB8::42]:5", URI{Form: FormCanonicalHost, AgentID: testID, Host: "2001:db8::42", Port: 5}, "[2001:db8::42]:5"},
		// Form 2: any RFC 3986 host, port allowed.
		{"agtp://agents.acme.com:9999", URI{Form: FormServer, Host: "agents.acme.com", Port: 9999}, "agents.acme.com:9999"},
		{"agtp://192.0.2.42", URI{Form: FormServer, Host: "192.0.2.42"}, "192.0.2.42:4480"},
		{"agtp://[2001:db8::42]", URI{Form: FormServer, Host: "2001:db8::42"}, "[2001:db8::42]:4480"},
		{"agtp://4chan.example", URI{Form: FormServer, Host: "4chan.example"}, "4chan.example:4480"},
		{"agtp://127.0.0.1:4480/agents/bookbot", URI{Form: FormServer, Host: "127.0.0.1", Port: 4480, Path: "/agents/bookbot"}, "127.0.0.1:4480"},
		// Form 2a: a bare domain.
		{"agtp://acme.com", URI{Form: FormOrganization, Host: "acme.com"}, "acme.com:4480"},
		{"agtp://localhost", URI{Form: FormOrganization, Host: "localhost"}, "localhost:4480"},
		{"agtp://acme.com?format=json", URI{Form: FormOrganization, Host: "acme.com", RawQuery: "format=json"}, "acme.com:4480"},
		{"agtp://acme.com/agents", URI{Form: FormOrganization, Host: "acme.com", Path: "/agents"}, "acme.com:4480"},
		{"agtp://deadbeef", URI{Form: FormOrganization, Host: "deadbeef"}, "deadbeef:4480"},
		// Form 3: domain-anchored agent.
		{"agtp://acme.com/agents/bookbot", URI{Form: FormDomainAgent, Host: "acme.com", AgentName: "bookbot", Path: "/agents/bookbot"}, "acme.com:4480"},
		{"agtp://acme.tld/agents/customer-service?format=json", URI{Form: FormDomainAgent, Host: "acme.tld", AgentName: "customer-service", Path: "/agents/customer-service", RawQuery: "format=json"}, "acme.tld:4480"},
		{"agtp://acme.com/agents/book_bot/status", URI{Form: FormDomainAgent, Host: "acme.com", AgentName: "book_bot", Path: "/agents/book_bot/status"}, "acme.com:4480"},
		// Form 4: agtp. subdomain.
		{"agtp://agtp.acme.com/agents/bookbot", URI{Form: FormSubdomainAgent, Host: "agtp.acme.com", AgentName: "bookbot", Path: "/agents/bookbot"}, "agtp.acme.com:4480"},
		// Package extensions parse, for the 301 (core §6.1.6).
		{"agtp://acme.tld/agents/customer-service.agtp", URI{Form: FormDomainAgent, Host: "acme.tld", AgentName: "customer-service", Path: "/agents/customer-service.agtp"}, "acme.tld:4480"},
		{"agtp://acme.tld/agents/customer-service.NOMO", URI{Form: FormDomainAgent, Host: "acme.tld", AgentName: "customer-service", Path: "/agents/customer-service.NOMO"}, "acme.tld:4480"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			u, err := ParseURI(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if u != tt.want {
				t.Fatalf("got  %+v\nwant %+v", u, tt.want)
			}
			if u.Address() != tt.addr {
				t.Errorf("Address = %q, want %q", u.Address(), tt.addr)
			}
			back, err := ParseURI(u.String())
			if err != nil || back != u {
				t.Errorf("String %q does not round-trip: %+v, %v", u.String(), back, err)
			}
		})
	}
}

func TestParseURIErrors(t *testing.T) {
	tests := []struct{ in, reason string }{
		// Malformed canonical IDs (core §6.1.8.1).
		{"agtp://" + strings.ToUpper(testID), ReasonInvalidCanonicalID},
		{"agtp://" + testID + "a", ReasonInvalidCanonicalID},
		{"agtp://" + testID[:63] + "A" + "0", ReasonInvalidCanonicalID},
		{"agtp://abc@acme.com", ReasonInvalidCanonicalID},
		{"agtp://@acme.com", ReasonInvalidCanonicalID},
		{"agtp://user:pw@acme.com", ReasonInvalidCanonicalID},
		// Everything else (core §6.1.8.3).
		{"http://acme.com", ReasonInvalidURIForm},
		{"agtp:/acme.com", ReasonInvalidURIForm},
		{"agtp://", ReasonInvalidURIForm},
		{"agtp:///agents/x", ReasonInvalidURIForm},
		{"agtp://acme.com/agents/x#frag", ReasonInvalidURIForm},
		{"agtp://" + testID + ":4480", ReasonInvalidURIForm},
		{"agtp://" + testID + "@", ReasonInvalidURIForm},
		{"agtp://acme.com:", ReasonInvalidURIForm},
		{"agtp://acme.com:0", ReasonInvalidURIForm},
		{"agtp://acme.com:65536", ReasonInvalidURIForm},
		{"agtp://acme.com:44a", ReasonInvalidURIForm},
		{"agtp://acme..com", ReasonInvalidURIForm},
		{"agtp://-acme.com", ReasonInvalidURIForm},
		{"agtp://acme_corp.com", ReasonInvalidURIForm},
		{"agtp://" + strings.Repeat("a", 64) + ".com", ReasonInvalidURIForm},
		{"agtp://999.1.1.1", ReasonInvalidURIForm},
		{"agtp://[::1", ReasonInvalidURIForm},
		{"agtp://[192.0.2.1]", ReasonInvalidURIForm},
		{"agtp://[fe80::1%25eth0]", ReasonInvalidURIForm},
		{"agtp://acme.com/agents/bad.name", ReasonInvalidURIForm},
		{"agtp://acme.com/agents/b%20t", ReasonInvalidURIForm},
		{"agtp://acme.com//x", ReasonInvalidURIForm},
		{"agtp://acme.com/a b", ReasonInvalidURIForm},
		{"agtp://acme.com/?q=a b", ReasonInvalidURIForm},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseURI(tt.in)
			wantProtocolError(t, err, 400, tt.reason, false)
		})
	}
}

func TestURIHelpers(t *testing.T) {
	u, _ := ParseURI("agtp://agtp.acme.com/agents/bookbot.agent?format=certificate")
	if u.Domain() != "acme.com" || u.Format() != FormatCertificate || u.Target() != "/agents/bookbot.agent?format=certificate" {
		t.Errorf("Domain %q Format %q Target %q", u.Domain(), u.Format(), u.Target())
	}
	c, changed := u.Canonical()
	if !changed || c.String() != "agtp://agtp.acme.com/agents/bookbot?format=certificate" {
		t.Errorf("Canonical = %s, %v", c, changed)
	}
	if _, changed := c.Canonical(); changed {
		t.Error("a canonical URI changed")
	}
	o, _ := ParseURI("agtp://acme.com")
	if o.Target() != "/" || o.Format() != "" || o.Domain() != "acme.com" {
		t.Errorf("Target %q Format %q Domain %q", o.Target(), o.Format(), o.Domain())
	}
	s, _ := ParseURI("agtp://192.0.2.1")
	if s.Domain() != "" {
		t.Error("a Form 2 URI has no organisation domain")
	}
	for _, tt := range []struct {
		in, out string
		ok      bool
	}{
		{"/agents/x.agent", "/agents/x", true},
		{"/agents/x.nomo", "/agents/x", true},
		{"/agents/x.AGTP", "/agents/x", true},
		{"/agents/x.json", "/agents/x.json", false},
		{"/agents/.agtp", "/agents/.agtp", false},
		{"/a.agtp/b", "/a.agtp/b", false},
		{"", "", false},
	} {
		out, ok := StripPackageExtension(tt.in)
		if out != tt.out || ok != tt.ok {
			t.Errorf("StripPackageExtension(%q) = %q, %v", tt.in, out, ok)
		}
	}
	if !IsCanonicalID(testID) || IsCanonicalID(strings.ToUpper(testID)) || IsCanonicalID(testID[:63]) {
		t.Error("IsCanonicalID")
	}
	names := map[URIForm]string{FormCanonical: "1", FormCanonicalHost: "1a", FormServer: "2", FormOrganization: "2a", FormDomainAgent: "3", FormSubdomainAgent: "4", 0: "unknown"}
	for f, want := range names {
		if f.String() != want {
			t.Errorf("URIForm(%d) = %q", f, f.String())
		}
	}
}

func TestParseAgentURI(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		in, id, addr string
		ok           bool
	}{
		{"agtp://" + id, id, "", true},
		{"agtp://" + id + "/", id, "", true},
		{"AGTP://" + id + "@peer.example", id, "peer.example:4480", true},
		{"agtp://" + id + "@127.0.0.1:9000", id, "127.0.0.1:9000", true},
		{"agtp://" + id + "/inbox", "", "", false},        // a path is not an agent
		{"agtp://" + id + "?x=1", "", "", false},          // nor a query
		{"agtp://acme.example/agents/bot", "", "", false}, // a name needs resolving first
		{id, "", "", false},                               // a bare Agent-ID is not a URI
		{"https://hooks.example/x", "", "", false},
		{"", "", "", false},
	} {
		id, addr, ok := ParseAgentURI(tc.in)
		if id != tc.id || addr != tc.addr || ok != tc.ok {
			t.Errorf("ParseAgentURI(%q) = %q %q %v, want %q %q %v", tc.in, id, addr, ok, tc.id, tc.addr, tc.ok)
		}
	}
}
