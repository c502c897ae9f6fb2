package access

import (
	"crypto/x509"
	"net/url"
	"testing"
)

func certWith(uris []string, dns ...string) *x509.Certificate {
	c := &x509.Certificate{DNSNames: dns}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			panic(err)
		}
		c.URIs = append(c.URIs, parsed)
	}
	return c
}

func TestRecognizerReadsIdentitiesFromCertificates(t *testing.T) {
	rec, err := NewRecognizer("", map[string]string{
		"spiffe://corp.example/ns/ops/sa/deployer": "operator/deployer",
		"dns:billing.corp.example":                 "system/billing",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want string
	}{
		{"a service", certWith([]string{"spiffe://agtp.internal/service/frontdoor"}, "frontdoor"), "service/frontdoor"},
		{"an operator", certWith([]string{"spiffe://agtp.internal/operator/admin"}), "operator/admin"},
		{"an internal system", certWith([]string{"spiffe://agtp.internal/system/reporting"}), "system/reporting"},
		{"a mapped SPIFFE ID", certWith([]string{"spiffe://corp.example/ns/ops/sa/deployer"}), "operator/deployer"},
		{"a mapped DNS name", certWith(nil, "billing.corp.example"), "system/billing"},
		{"the same identity twice", certWith([]string{"spiffe://agtp.internal/system/billing"}, "billing.corp.example"), "system/billing"},
		{"a DNS name alone is no identity", certWith(nil, "frontdoor"), "none"},
		{"another trust domain", certWith([]string{"spiffe://other.example/service/frontdoor"}), "none"},
		{"an unknown kind", certWith([]string{"spiffe://agtp.internal/agent/x"}), "none"},
		{"a name with upper case", certWith([]string{"spiffe://agtp.internal/service/FrontDoor"}), "none"},
		{"a deeper path", certWith([]string{"spiffe://agtp.internal/service/frontdoor/extra"}), "none"},
		{"a query", certWith([]string{"spiffe://agtp.internal/service/frontdoor?x=1"}), "none"},
		{"two identities", certWith([]string{"spiffe://agtp.internal/service/frontdoor", "spiffe://agtp.internal/operator/admin"}), "none"},
		{"an Agent-ID beside a service", certWith([]string{"spiffe://agtp.internal/service/frontdoor", "agtp://" + hex64}), "none"},
		{"no certificate", nil, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rec.Identify(tc.cert).String(); got != tc.want {
				t.Fatalf("Identify = %s, want %s", got, tc.want)
			}
		})
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestRecognizerRefusesBadConfiguration(t *testing.T) {
	for name, tc := range map[string]struct {
		domain  string
		mapping map[string]string
	}{
		"a trust domain with a slash": {domain: "agtp/internal"},
		"an unknown kind":             {mapping: map[string]string{"dns:x.example": "agent/x"}},
		"no name":                     {mapping: map[string]string{"dns:x.example": "operator/"}},
		"not kind/name":               {mapping: map[string]string{"dns:x.example": "operator"}},
		"an Agent-ID mapped":          {mapping: map[string]string{"agtp://" + hex64: "operator/x"}},
		"neither a URI nor dns:":      {mapping: map[string]string{"x.example": "operator/x"}},
	} {
		if _, err := NewRecognizer(tc.domain, tc.mapping); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRulesAllowExactlyWhatTheySay(t *testing.T) {
	front := Identity{Service, "frontdoor"}
	rcns := Identity{Service, "rcnssvc"}
	op := Identity{Operator, "admin"}
	sys := Identity{System, "reporting"}
	for _, tc := range []struct {
		rule    Rule
		allowed []Identity
	}{
		{Rule{}, nil},
		{Rule{Services: []string{"frontdoor"}}, []Identity{front}},
		{Rule{Operators: true}, []Identity{op}},
		{Rule{Services: []string{"frontdoor"}, Operators: true, Systems: true}, []Identity{front, op, sys}},
		{Rule{AnyPeer: true}, []Identity{front, rcns, op, sys, {}}},
	} {
		for _, id := range []Identity{front, rcns, op, sys, {}} {
			want := false
			for _, a := range tc.allowed {
				want = want || a == id
			}
			if got := tc.rule.Allows(id); got != want {
				t.Errorf("%+v allows %s = %t, want %t", tc.rule, id, got, want)
			}
		}
	}
}
