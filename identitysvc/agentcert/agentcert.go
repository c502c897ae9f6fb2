// Package agentcert is the Agent Certificate profile (docs/identity.md,
// "Agent Certificates"): a short-lived X.509 certificate for a key an agent
// holds, binding that agent's canonical Agent-ID in one SAN URI
// agtp://<agent-id>. It is how a caller proves its Agent-ID at the TLS
// handshake (core §8, verification Level 3).
//
// A certificate is trusted one of two ways:
//
//   - issuer-signed: signed by the Ed25519 issuer_public_key of the agent's
//     Genesis. The Agent-ID pins its Genesis, and the Genesis pins the key,
//     so no certificate authority is involved; a verifier needs only the
//     agent's registry record.
//   - CA-issued: chained to an agent CA the verifier trusts (identitysvc's
//     registrar CA, or an organisation's own PKI). An agent CA is never the
//     suite's service CA.
//
// Parsing is bounded: a certificate larger than MaxCertificateBytes, or
// with more than MaxURIs SAN URIs, is refused before anything else is
// looked at.
package agentcert

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// URIScheme is the scheme of the SAN URI that names the agent.
const URIScheme = "agtp"

// Profile bounds.
const (
	// DefaultLifetime is how long a certificate is valid unless the issuer
	// asks otherwise.
	DefaultLifetime = 24 * time.Hour
	// MaxLifetime is the longest validity this package issues or accepts:
	// revocation of a key works through the agent's lifecycle, but a
	// certificate should not outlive the key rotation it stands for.
	MaxLifetime = 90 * 24 * time.Hour
	// MaxCertificateBytes bounds the DER of a certificate this package
	// parses.
	MaxCertificateBytes = 16 << 10
	// MaxURIs bounds the SAN URIs a certificate may carry.
	MaxURIs = 8
	// clockSkew is the leeway given to NotBefore for clocks that differ.
	clockSkew = 5 * time.Minute
	// backdate is how far before issuance a certificate's validity
	// starts, for verifiers elsewhere that allow no skew; it counts
	// towards the lifetime, so a certificate issued for MaxLifetime is
	// still within it.
	backdate = time.Minute
)

// Reasons of the errors this package returns; the front door answers them
// as the reason of a 401 (docs/identity.md).
const (
	// ReasonMalformed: not a parseable certificate, or too large.
	ReasonMalformed = "agent-certificate-malformed"
	// ReasonNoAgentID: no agtp:// SAN URI naming a canonical Agent-ID, or
	// more than one.
	ReasonNoAgentID = "agent-certificate-no-agent-id"
	// ReasonExpired: outside NotBefore..NotAfter.
	ReasonExpired = "agent-certificate-expired"
	// ReasonUntrusted: neither signed by the agent's Genesis issuer key
	// nor chained to a trusted agent CA.
	ReasonUntrusted = "agent-certificate-untrusted"
	// ReasonProfile: a certificate that breaks the profile (no client-auth
	// extended key usage, a key usage without digitalSignature, a CA
	// certificate, a lifetime longer than MaxLifetime).
	ReasonProfile = "agent-certificate-profile"
)

// Error is a certificate this package refuses, with a reason token and an
// explanation fit for an AGTP error body.
type Error struct {
	Reason      string
	Explanation string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Explanation }

func fail(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Explanation: fmt.Sprintf(format, args...)}
}

// URI is the SAN URI that names agentID.
func URI(agentID string) *url.URL {
	return &url.URL{Scheme: URIScheme, Host: agentID}
}

// Parse decodes one DER certificate within the profile's size bound.
func Parse(der []byte) (*x509.Certificate, error) {
	if len(der) > MaxCertificateBytes {
		return nil, fail(ReasonMalformed, "the certificate is %d bytes, more than %d", len(der), MaxCertificateBytes)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fail(ReasonMalformed, "the certificate does not parse: %v", err)
	}
	return cert, nil
}

// AgentID returns the canonical Agent-ID the certificate binds: its one
// SAN URI of the form agtp://<64 lowercase hex>, with nothing else (no
// user, port, path, query or fragment). Other SAN URIs are allowed beside
// it (a SPIFFE ID, say); two agtp URIs are refused, since a certificate
// names one agent.
//
// The URI must be encoded exactly so: url.Parse lowercases the scheme and
// decodes percent-escapes in the host, so "AGTP://..." or a host spelled
// in escapes would otherwise name the agent too, and a verifier that
// reads the SAN bytes would not agree on what the certificate says.
func AgentID(cert *x509.Certificate) (string, error) {
	if len(cert.Raw) > MaxCertificateBytes {
		return "", fail(ReasonMalformed, "the certificate is %d bytes, more than %d", len(cert.Raw), MaxCertificateBytes)
	}
	if len(cert.URIs) > MaxURIs {
		return "", fail(ReasonNoAgentID, "the certificate carries %d SAN URIs, more than %d", len(cert.URIs), MaxURIs)
	}
	id := ""
	for _, u := range cert.URIs {
		if u == nil || u.Scheme != URIScheme {
			continue
		}
		if id != "" {
			return "", fail(ReasonNoAgentID, "the certificate names more than one agent")
		}
		if u.Opaque != "" || u.User != nil || u.Port() != "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
			return "", fail(ReasonNoAgentID, "the agtp SAN URI must be agtp://<agent-id> and nothing else")
		}
		if !agtp.IsCanonicalID(u.Host) {
			return "", fail(ReasonNoAgentID, "the agtp SAN URI does not name a canonical Agent-ID (64 lowercase hexadecimal characters)")
		}
		id = u.Host
	}
	if id == "" {
		return "", fail(ReasonNoAgentID, "the certificate has no agtp://<agent-id> SAN URI")
	}
	raw, found, err := rawURIs(cert)
	if err != nil {
		return "", fail(ReasonMalformed, "the subject alternative names do not parse: %v", err)
	}
	if found {
		want := URI(id).String()
		n := 0
		for _, s := range raw {
			if scheme, _, ok := strings.Cut(s, ":"); ok && strings.EqualFold(scheme, URIScheme) {
				n++
				if s != want {
					return "", fail(ReasonNoAgentID, "the agtp SAN URI must be agtp://<agent-id> and nothing else")
				}
			}
		}
		if n != 1 {
			return "", fail(ReasonNoAgentID, "the certificate must name exactly one agent")
		}
	}
	return id, nil
}

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// rawURIs returns the SAN URIs as encoded, and whether the certificate
// has a SAN extension at all (one made in memory rather than parsed has
// none to read).
func rawURIs(cert *x509.Certificate) ([]string, bool, error) {
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		var names []asn1.RawValue
		rest, err := asn1.Unmarshal(ext.Value, &names)
		if err != nil {
			return nil, true, err
		}
		if len(rest) > 0 {
			return nil, true, errors.New("trailing data")
		}
		var uris []string
		for _, n := range names {
			// uniformResourceIdentifier [6] IA5String (RFC 5280
			// §4.2.1.6), implicitly tagged: Bytes are the string.
			if n.Class == asn1.ClassContextSpecific && n.Tag == 6 && !n.IsCompound {
				uris = append(uris, string(n.Bytes))
			}
		}
		return uris, true, nil
	}
	return nil, false, nil
}

// HasAgentURI reports whether the certificate carries any agtp SAN URI:
// whether it presents itself as an Agent Certificate at all.
func HasAgentURI(cert *x509.Certificate) bool {
	for _, u := range cert.URIs {
		if u != nil && u.Scheme == URIScheme {
			return true
		}
	}
	return false
}

// checkProfile checks what every Agent Certificate must be, however it is
// trusted: an end-entity certificate for client authentication, valid at
// now, for no longer than MaxLifetime.
//
// The client-auth usage must be stated: a certificate without extended
// key usage is good for any purpose under RFC 5280, which would let a
// server or signing certificate that happens to carry an agtp URI pass.
func checkProfile(cert *x509.Certificate, now time.Time) error {
	if cert.BasicConstraintsValid && cert.IsCA {
		return fail(ReasonProfile, "a CA certificate is not an Agent Certificate")
	}
	if !hasUsage(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) && !hasUsage(cert.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return fail(ReasonProfile, "the certificate is not for client authentication (extended key usage clientAuth)")
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		return fail(ReasonProfile, "the certificate's key usage does not allow digital signatures, which the TLS handshake needs")
	}
	if cert.NotAfter.Sub(cert.NotBefore) > MaxLifetime {
		return fail(ReasonProfile, "the certificate is valid for %s, longer than %s", cert.NotAfter.Sub(cert.NotBefore).Round(time.Hour), MaxLifetime)
	}
	if now.Before(cert.NotBefore.Add(-clockSkew)) {
		return fail(ReasonExpired, "the certificate is not valid before %s", cert.NotBefore.UTC().Format(time.RFC3339))
	}
	if now.After(cert.NotAfter) {
		return fail(ReasonExpired, "the certificate expired at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

func hasUsage(list []x509.ExtKeyUsage, u x509.ExtKeyUsage) bool {
	for _, v := range list {
		if v == u {
			return true
		}
	}
	return false
}

// VerifyIssuerSigned checks an issuer-signed certificate: within the
// profile at now, and signed (Ed25519) by issuer, the Genesis
// issuer_public_key of the agent the certificate names. The caller looks
// issuer up by that Agent-ID, which is what pins it.
func VerifyIssuerSigned(cert *x509.Certificate, issuer ed25519.PublicKey, now time.Time) error {
	if err := checkProfile(cert, now); err != nil {
		return err
	}
	if len(issuer) != ed25519.PublicKeySize {
		return fail(ReasonUntrusted, "the agent has no Genesis issuer key on record")
	}
	if cert.SignatureAlgorithm != x509.PureEd25519 || !ed25519.Verify(issuer, cert.RawTBSCertificate, cert.Signature) {
		return fail(ReasonUntrusted, "the certificate is not signed by the agent's Genesis issuer key")
	}
	return nil
}

// VerifyCA checks a CA-issued certificate: within the profile at now and
// chained, through intermediates, to one of roots for client
// authentication.
func VerifyCA(cert *x509.Certificate, intermediates []*x509.Certificate, roots *x509.CertPool, now time.Time) error {
	if err := checkProfile(cert, now); err != nil {
		return err
	}
	if roots == nil {
		return fail(ReasonUntrusted, "no agent CA is configured")
	}
	inter := x509.NewCertPool()
	for _, c := range intermediates {
		inter.AddCert(c)
	}
	// checkProfile allowed for clock skew on NotBefore; x509 allows none,
	// and would call a certificate from a clock a minute ahead untrusted.
	at := now
	if at.Before(cert.NotBefore) {
		at = cert.NotBefore
	}
	_, err := cert.Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return fail(ReasonUntrusted, "the certificate does not chain to a trusted agent CA")
	}
	return nil
}

// Fingerprint is the lowercase hex SHA-256 of a certificate's DER: how an
// Attribution-Record names the certificate a caller presented.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// Thumbprint is the RFC 8705 x5t#S256 of a certificate: base64url (no
// padding) of the SHA-256 of its DER, what a certificate-bound token's
// cnf claim carries.
func Thumbprint(der []byte) string {
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// Request describes a certificate to issue.
type Request struct {
	// AgentID is the canonical Agent-ID the certificate binds.
	AgentID string
	// PublicKey is the key the agent holds (Ed25519 or ECDSA).
	PublicKey crypto.PublicKey
	// Lifetime is the validity; DefaultLifetime when zero, at most
	// MaxLifetime.
	Lifetime time.Duration
	// Now is the start of validity; time.Now when zero.
	Now time.Time
}

func (r Request) template() (*x509.Certificate, error) {
	if !agtp.IsCanonicalID(r.AgentID) {
		return nil, errors.New("agentcert: the Agent-ID is not canonical (64 lowercase hexadecimal characters)")
	}
	if r.PublicKey == nil {
		return nil, errors.New("agentcert: no public key")
	}
	life := r.Lifetime
	if life == 0 {
		life = DefaultLifetime
	}
	if life < 0 || life > MaxLifetime {
		return nil, fmt.Errorf("agentcert: lifetime %s is outside 0..%s", life, MaxLifetime)
	}
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	// Validity is encoded to the second; truncating keeps NotAfter -
	// NotBefore exactly the lifetime.
	notBefore := now.Truncate(time.Second).Add(-backdate)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("agentcert: serial: %w", err)
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: r.AgentID},
		URIs:         []*url.URL{URI(r.AgentID)},
		NotBefore:    notBefore,
		NotAfter:     notBefore.Add(life),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, nil
}

// IssueByIssuer signs an issuer-signed certificate with the agent's
// Genesis issuer key and returns its DER.
func IssueByIssuer(req Request, issuer ed25519.PrivateKey) ([]byte, error) {
	if len(issuer) != ed25519.PrivateKeySize {
		return nil, errors.New("agentcert: the issuer key is not an Ed25519 private key")
	}
	tmpl, err := req.template()
	if err != nil {
		return nil, err
	}
	pub := issuer.Public().(ed25519.PublicKey)
	// The issuer is named by its key: there is no issuer certificate, and
	// the verifier finds the key through the Agent-ID, not through this
	// name.
	parent := &x509.Certificate{
		Subject:      pkix.Name{CommonName: "AGTP Genesis issuer " + hex.EncodeToString(pub[:8])},
		PublicKey:    pub,
		SubjectKeyId: keyID(pub),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, req.PublicKey, issuer)
	if err != nil {
		return nil, fmt.Errorf("agentcert: sign: %w", err)
	}
	return der, nil
}

// IssueByCA signs a CA-issued certificate with an agent CA and returns its
// DER.
func IssueByCA(req Request, ca *x509.Certificate, caKey crypto.Signer) ([]byte, error) {
	if ca == nil || caKey == nil {
		return nil, errors.New("agentcert: no CA certificate or key")
	}
	tmpl, err := req.template()
	if err != nil {
		return nil, err
	}
	if !ca.NotAfter.After(tmpl.NotBefore) {
		return nil, fmt.Errorf("agentcert: the CA certificate expired at %s", ca.NotAfter.UTC().Format(time.RFC3339))
	}
	if tmpl.NotAfter.After(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, req.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("agentcert: sign: %w", err)
	}
	return der, nil
}

func keyID(pub ed25519.PublicKey) []byte {
	sum := sha256.Sum256(pub)
	return sum[:20]
}
