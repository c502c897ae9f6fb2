package agtp_test

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
)

const fuzzAgentID = "7f3a9c2d7f3a9c2d7f3a9c2d7f3a9c2d7f3a9c2d7f3a9c2d7f3a9c2d7f3a9c2d"

// fuzzURISeeds has every form, with and without port, path, query and
// package extension, and the refusals next to each.
var fuzzURISeeds = []string{
	"agtp://" + fuzzAgentID,
	"agtp://" + fuzzAgentID + "/",
	"AGTP://" + fuzzAgentID + "/?format=status",
	"agtp://" + fuzzAgentID + "@agents.acme.com",
	"agtp://" + fuzzAgentID + "@agents.acme.com:9999/",
	"agtp://" + fuzzAgentID + "@[2001:DB8::1]:4480",
	"agtp://" + fuzzAgentID + "@192.0.2.7",
	"agtp://" + strings.ToUpper(fuzzAgentID),
	"agtp://" + fuzzAgentID + "0",
	"agtp://" + fuzzAgentID + ":4480",
	"agtp://" + fuzzAgentID + "@",
	"agtp://acme.com",
	"agtp://Acme.COM:4480/orders?x=1",
	"agtp://192.0.2.7:1/",
	"agtp://[::1]",
	"agtp://[fe80::1%25eth0]",
	"agtp://acme.com/agents/bob",
	"agtp://acme.com/agents/bob.agent",
	"agtp://acme.com/agents/bob.AGENT.nomo?format=json",
	"agtp://agtp.acme.com/agents/bob-1_x/tasks/7",
	"agtp://agtp.acme.com/agents/b%C3%B6b",
	"agtp://acme.com/agents/",
	"agtp://acme.com:0",
	"agtp://acme.com:65536",
	"agtp://acme.com#frag",
	"agtp://-acme.com",
	"agtp://1acme.com/agents/bob",
	"agtp:/acme.com",
	"https://acme.com",
}

// FuzzParseAgentURI checks the parser for URIs that name one agent
// (recipients, delegatees, callbacks): it accepts exactly the Form 1 and
// 1a URIs ParseURI accepts without a path beyond "/" or a query, returns
// their Agent-ID and dial address, and agrees with itself on the
// canonical spelling.
func FuzzParseAgentURI(f *testing.F) {
	for _, s := range fuzzURISeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, addr, ok := agtp.ParseAgentURI(s)
		u, err := agtp.ParseURI(s)
		agentForm := err == nil && (u.Form == agtp.FormCanonical || u.Form == agtp.FormCanonicalHost) &&
			(u.Path == "" || u.Path == "/") && u.RawQuery == ""
		if ok != agentForm {
			t.Fatalf("ParseAgentURI ok=%v, ParseURI %+v, %v", ok, u, err)
		}
		if !ok {
			if id != "" || addr != "" {
				t.Fatalf("refusal returned %q, %q", id, addr)
			}
			return
		}
		if !agtp.IsCanonicalID(id) || id != u.AgentID || addr != u.Address() {
			t.Fatalf("ParseAgentURI = %q, %q; ParseURI %+v", id, addr, u)
		}
		switch u.Form {
		case agtp.FormCanonical:
			if addr != "" {
				t.Fatalf("Form 1 with address %q", addr)
			}
		case agtp.FormCanonicalHost:
			host, port, err := net.SplitHostPort(addr)
			n, perr := strconv.Atoi(port)
			if err != nil || host != u.Host || perr != nil || n < 1 || n > 65535 {
				t.Fatalf("Form 1a address %q: %v", addr, err)
			}
		}
		id2, addr2, ok2 := agtp.ParseAgentURI(u.String())
		if !ok2 || id2 != id || addr2 != addr {
			t.Fatalf("canonical spelling %q reads as %q, %q, %v", u.String(), id2, addr2, ok2)
		}
	})
}

// FuzzURIForms checks what each form promises once ParseURI accepts a
// URI: which members are set, the domain, the dial address, a
// request-target the client can send, and a canonical (extension-free)
// URI that parses to the same agent.
func FuzzURIForms(f *testing.F) {
	for _, s := range fuzzURISeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p, stripped := agtp.StripPackageExtension(s); !strings.HasPrefix(s, p) || stripped != (len(p) < len(s)) || len(s)-len(p) > len(".agent") {
			t.Fatalf("StripPackageExtension(%q) = %q, %v", s, p, stripped)
		}
		u, err := agtp.ParseURI(s)
		if err != nil {
			return
		}
		if u.Form.String() == "unknown" {
			t.Fatalf("form %d", u.Form)
		}
		if u.Host != strings.ToLower(u.Host) || u.Port < 0 || u.Port > 65535 {
			t.Fatalf("host %q port %d", u.Host, u.Port)
		}
		dom := u.Domain()
		switch u.Form {
		case agtp.FormCanonical:
			if !agtp.IsCanonicalID(u.AgentID) || u.Host != "" || u.Port != 0 || u.AgentName != "" || u.Address() != "" || dom != "" {
				t.Fatalf("Form 1 %+v", u)
			}
		case agtp.FormCanonicalHost:
			if !agtp.IsCanonicalID(u.AgentID) || u.Host == "" || u.AgentName != "" || dom != "" {
				t.Fatalf("Form 1a %+v", u)
			}
		case agtp.FormServer:
			if u.AgentID != "" || u.Host == "" || u.AgentName != "" || dom != "" {
				t.Fatalf("Form 2 %+v", u)
			}
		case agtp.FormOrganization:
			if u.AgentID != "" || u.Port != 0 || u.AgentName != "" || dom != u.Host {
				t.Fatalf("Form 2a %+v", u)
			}
		case agtp.FormDomainAgent, agtp.FormSubdomainAgent:
			if u.AgentID != "" || u.Port != 0 || u.AgentName == "" || !strings.HasPrefix(u.Path, "/agents/") {
				t.Fatalf("Form %s %+v", u.Form, u)
			}
			if u.Form == agtp.FormSubdomainAgent && (!strings.HasPrefix(u.Host, "agtp.") || dom != u.Host[len("agtp."):]) ||
				u.Form == agtp.FormDomainAgent && dom != u.Host {
				t.Fatalf("Form %s %+v has domain %q", u.Form, u, dom)
			}
		}
		if a := u.Address(); u.Host != "" {
			if host, _, err := net.SplitHostPort(a); err != nil || host != u.Host {
				t.Fatalf("address %q for host %q: %v", a, u.Host, err)
			}
		}
		target := u.Target()
		if !strings.HasPrefix(target, "/") {
			t.Fatalf("target %q", target)
		}
		if _, err := agtp.NewRequest(agtp.MethodQuery, target); err != nil {
			t.Fatalf("a client cannot send the target %q of %q: %v", target, s, err)
		}
		_ = u.Format()
		c, stripped := u.Canonical()
		if !stripped && c != u {
			t.Fatalf("Canonical changed %+v to %+v without an extension", u, c)
		}
		back, err := agtp.ParseURI(c.String())
		if err != nil || back.AgentID != u.AgentID || back.Host != u.Host || back.Port != u.Port || back.AgentName != u.AgentName {
			t.Fatalf("canonical URI %q of %q reads as %+v, %v", c.String(), s, back, err)
		}
	})
}
