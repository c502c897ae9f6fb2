package agentcert_test

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/services/agtp"
)

// FuzzAgentID feeds a peer's certificate bytes through what the front
// door does with them at the handshake. The seeds in
// testdata/fuzz/FuzzAgentID are an issued certificate, garbage and a
// truncated certificate; the ones added here cover the SAN shapes.
func FuzzAgentID(f *testing.F) {
	a := newAgent(f)
	f.Add(a.issued(f).Raw)
	for _, uris := range [][]string{
		{"agtp://" + a.id, "spiffe://example.org/agent"},
		{"agtp://" + a.id, "agtp://" + a.id},
		{"AGTP://" + a.id},
		{"agtp://" + a.id + "#"},
		{"agtp://" + a.id + ":4480"},
	} {
		tmpl := a.template()
		tmpl.URIs = nil
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, sanURIs(f, uris...))
		f.Add(a.signed(f, tmpl, a.issuer).Raw)
	}
	var noKey ed25519.PublicKey
	emptyPool := x509.NewCertPool()

	f.Fuzz(func(t *testing.T, der []byte) {
		cert, err := agentcert.Parse(der)
		if err != nil {
			var e *agentcert.Error
			if !errors.As(err, &e) || e.Reason != agentcert.ReasonMalformed {
				t.Fatalf("Parse: %v, want reason %s", err, agentcert.ReasonMalformed)
			}
			return
		}
		if len(der) > agentcert.MaxCertificateBytes {
			t.Fatalf("Parse accepted %d bytes", len(der))
		}
		id, err := agentcert.AgentID(cert)
		if err != nil {
			var e *agentcert.Error
			if !errors.As(err, &e) || (e.Reason != agentcert.ReasonNoAgentID && e.Reason != agentcert.ReasonMalformed) {
				t.Fatalf("AgentID: %v, want reason %s or %s", err, agentcert.ReasonNoAgentID, agentcert.ReasonMalformed)
			}
			if id != "" {
				t.Fatalf("AgentID returned %q with an error", id)
			}
		} else {
			checkNamesOneAgent(t, cert, id)
		}
		// Neither trust path may accept what nothing vouches for, or
		// fail other than with an *Error.
		for name, err := range map[string]error{
			"VerifyIssuerSigned": agentcert.VerifyIssuerSigned(cert, noKey, now),
			"VerifyCA":           agentcert.VerifyCA(cert, nil, emptyPool, now),
		} {
			var e *agentcert.Error
			if !errors.As(err, &e) || e.Reason == "" {
				t.Fatalf("%s: %v, want an *agentcert.Error", name, err)
			}
		}
	})
}

// checkNamesOneAgent checks what AgentID's success promises: a canonical
// id, and one agtp SAN URI, spelled agtp://<id> both as parsed and as
// encoded.
func checkNamesOneAgent(t *testing.T, cert *x509.Certificate, id string) {
	t.Helper()
	if !agtp.IsCanonicalID(id) {
		t.Fatalf("AgentID = %q, not canonical", id)
	}
	if !agentcert.HasAgentURI(cert) {
		t.Fatal("AgentID succeeded on a certificate without an agtp URI")
	}
	want := agentcert.URI(id).String()
	var parsed []string
	for _, u := range cert.URIs {
		if u != nil && u.Scheme == agentcert.URIScheme {
			parsed = append(parsed, u.String())
		}
	}
	if len(parsed) != 1 || parsed[0] != want {
		t.Fatalf("agtp URIs as parsed = %q, want exactly [%s]", parsed, want)
	}
	if len(cert.URIs) > agentcert.MaxURIs {
		t.Fatalf("AgentID accepted %d URIs", len(cert.URIs))
	}
	var encoded []string
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		var names []asn1.RawValue
		if _, err := asn1.Unmarshal(ext.Value, &names); err != nil {
			t.Fatalf("x509 parsed a SAN that asn1 does not: %v", err)
		}
		for _, n := range names {
			if n.Class == asn1.ClassContextSpecific && n.Tag == 6 {
				if s := string(n.Bytes); strings.HasPrefix(strings.ToLower(s), agentcert.URIScheme+":") {
					encoded = append(encoded, s)
				}
			}
		}
	}
	if len(encoded) != 1 || encoded[0] != want {
		t.Fatalf("agtp URIs as encoded = %q, want exactly [%s]", encoded, want)
	}
}
