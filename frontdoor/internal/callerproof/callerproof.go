// Package callerproof decides how an AGTP caller proved its Agent-ID
// (core §10.2 verification levels; docs/identity.md "Proven callers").
//
// The TLS or QUIC handshake asks for a client certificate but does not
// verify its chain: possession of the certificate's key is what the
// handshake proves, and what that key stands for is decided here, once per
// connection (Inspect). A certificate that names an agent (an Agent
// Certificate, identitysvc/agentcert) proves that agent when it is
// CA-issued by a trusted agent CA, or signed by the agent's Genesis issuer
// key. A certificate for the Genesis issuer key itself proves the agent its
// Agent-ID header names. Anything else proves a key, not an agent: an
// operator's certificate, say.
//
// The per-request part is a few comparisons: the issuer signature is
// checked once per certificate and remembered with the issuer key it
// verified against, so a later request, or a later connection presenting
// the same certificate, costs a string comparison.
package callerproof

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/inspect"
	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
)

// Mode is the caller_proof policy: what a header-only Agent-ID claim
// (Level 1) is worth.
type Mode string

// The caller_proof settings.
const (
	// Required never attributes a header-only claim: on an endpoint that
	// serves anonymous callers the request is answered as anonymous (its
	// record notes the ignored claim), elsewhere it is 401.
	Required Mode = "required"
	// Informational accepts a header-only claim on endpoints whose
	// semantic impact is informational (read-only, core §8); every other
	// call needs proof.
	Informational Mode = "informational"
	// Off accepts header-only claims everywhere. It is refused at start-up
	// unless every listener is on loopback.
	Off Mode = "off"
)

// ParseMode reads a caller_proof setting; empty is Required.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", Required:
		return Required, nil
	case Informational, Off:
		return Mode(s), nil
	}
	return "", fmt.Errorf("caller_proof %q is not one of required, informational, off", s)
}

// How a caller was proven, as Attribution-Records name it
// (verified_by).
const (
	ByCertificate      = "agent-certificate"
	ByGenesisIssuerKey = "genesis-issuer-key"
	ByToken            = "token"
	ByPeerServer       = "peer-server"
	ByClaim            = "claim"
)

// Verification levels of core §10.2 as Attribution-Records carry them.
const (
	LevelClaim       = 1
	LevelToken       = 2
	LevelCertificate = 3
)

// Peer is what one connection's client certificate established. It is
// computed at the handshake and shared by every request on the
// connection.
type Peer struct {
	// KeyFingerprint is the Genesis-issuer form of the certificate's key
	// (SHA-256 of a raw Ed25519 key, core §7.2.19), or the SHA-256 of the
	// SubjectPublicKeyInfo for other key types, which can never equal an
	// issuer fingerprint.
	KeyFingerprint string
	// SPKIFingerprint is the SHA-256 of the SubjectPublicKeyInfo, the form
	// operator fingerprints are configured in.
	SPKIFingerprint string
	// CertFingerprint is the SHA-256 of the certificate's DER, which
	// Attribution-Records carry.
	CertFingerprint string
	// Thumbprint is the RFC 8705 x5t#S256 a certificate-bound token's cnf
	// claim is compared with.
	Thumbprint string
	// AgentID is the agent an Agent Certificate names; empty when the
	// certificate names none.
	AgentID string
	// Err is why an Agent Certificate proves nothing (malformed SAN,
	// outside its validity, untrusted issuer); nil otherwise.
	Err *agentcert.Error
	// PeerServer is the name of the trusted peer AGTP server the
	// certificate belongs to (Verifier.TrustPeers), empty otherwise: that
	// server's word on the agent it forwards for is taken.
	PeerServer string

	cert       *x509.Certificate
	caIssued   bool
	issuerSeen atomic.Pointer[string] // issuer fingerprint the signature verified with
	verified   *verifiedCerts
}

// Verifier inspects client certificates at the handshake.
type Verifier struct {
	agentCAs  *x509.CertPool
	peerCAs   *x509.CertPool
	peerNames []string
	now       func() time.Time
	verified  *verifiedCerts
}

// NewVerifier returns a verifier trusting agentCAs (nil: none) for
// CA-issued Agent Certificates.
func NewVerifier(agentCAs *x509.CertPool) *Verifier {
	return &Verifier{agentCAs: agentCAs, now: time.Now, verified: newVerifiedCerts(maxVerifiedCerts)}
}

// maxVerifiedCerts bounds the issuer-signed certificates remembered
// across connections, about 200 bytes each.
const maxVerifiedCerts = 10000

// verifiedCerts remembers, across connections, which issuer-signed Agent
// Certificates (by the fingerprint of their DER) verified against which
// issuer key (by its fingerprint). An agent that opens a connection per
// request presents the same certificate every time, and its issuer
// signature, an Ed25519 verification, was a twentieth of the front
// door's CPU for such a request. Only the exact certificate bytes and
// issuer key that verified match; expiry is still checked per request.
type verifiedCerts struct {
	mu    sync.Mutex
	m     map[string]struct{}
	limit int
}

func newVerifiedCerts(limit int) *verifiedCerts {
	return &verifiedCerts{m: map[string]struct{}{}, limit: limit}
}

func verifiedKey(certFingerprint, issuerFingerprint string) string {
	return certFingerprint + " " + issuerFingerprint
}

func (c *verifiedCerts) has(certFingerprint, issuerFingerprint string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[verifiedKey(certFingerprint, issuerFingerprint)]
	return ok
}

func (c *verifiedCerts) add(certFingerprint, issuerFingerprint string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.limit {
		for k := range c.m { // map order is unspecified: an arbitrary entry goes
			delete(c.m, k)
			break
		}
	}
	c.m[verifiedKey(certFingerprint, issuerFingerprint)] = struct{}{}
}

// TrustPeers makes the verifier take the word of other AGTP servers: a
// client certificate that chains to pool for client authentication and
// carries one of names as a DNS SAN is that peer server's.
func (v *Verifier) TrustPeers(pool *x509.CertPool, names []string) {
	v.peerCAs, v.peerNames = pool, names
}

// peerServer is the trusted peer a certificate belongs to, "" for none.
func (v *Verifier) peerServer(cs *tls.ConnectionState) string {
	if v.peerCAs == nil {
		return ""
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: v.peerCAs, Intermediates: inter, CurrentTime: v.now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return ""
	}
	for _, name := range v.peerNames {
		if leaf.VerifyHostname(name) == nil {
			return name
		}
	}
	return ""
}

// Inspect establishes what a connection's client certificate proves. It
// returns nil when none was presented. The transport calls it only once
// the handshake has completed, i.e. proved possession of the key; a QUIC
// request read from 0-RTT data has no Peer.
func (v *Verifier) Inspect(cs *tls.ConnectionState) *Peer {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return nil
	}
	leaf := cs.PeerCertificates[0]
	p := &Peer{
		SPKIFingerprint: inspect.KeyFingerprint(leaf.RawSubjectPublicKeyInfo),
		CertFingerprint: agentcert.Fingerprint(leaf.Raw),
		Thumbprint:      agentcert.Thumbprint(leaf.Raw),
		cert:            leaf,
		verified:        v.verified,
	}
	p.KeyFingerprint = p.SPKIFingerprint
	if k, ok := leaf.PublicKey.(ed25519.PublicKey); ok {
		p.KeyFingerprint = genesis.Fingerprint(k)
	}
	if !agentcert.HasAgentURI(leaf) {
		p.PeerServer = v.peerServer(cs)
		return p
	}
	id, err := agentcert.AgentID(leaf)
	if err != nil {
		p.Err = asCertError(err)
		return p
	}
	p.AgentID = id
	// A certificate that chains to an agent CA is settled now; one that
	// does not may still be issuer-signed, which needs the agent's record
	// and is checked at its first request (VerifyAgent).
	if v.agentCAs != nil && agentcert.VerifyCA(leaf, cs.PeerCertificates[1:], v.agentCAs, v.now()) == nil {
		p.caIssued = true
	}
	return p
}

// VerifyAgent checks, for a request at now, that the Agent Certificate
// proves rec's agent: still valid, and CA-issued or signed by the issuer
// key on rec. The issuer signature is verified once per certificate and
// issuer key.
func (p *Peer) VerifyAgent(rec *identityv1.AgentRecord, now time.Time) *agentcert.Error {
	if p.Err != nil {
		return p.Err
	}
	if p.caIssued {
		return p.unexpired(now)
	}
	fp := rec.GetIssuerFingerprint()
	if seen := p.issuerSeen.Load(); seen != nil && *seen == fp && fp != "" {
		return p.unexpired(now)
	}
	if fp != "" && p.verified.has(p.CertFingerprint, fp) {
		// The same certificate verified against this issuer key on an
		// earlier connection; its profile was checked then and does not
		// change, only the clock does.
		if err := p.unexpired(now); err != nil {
			return err
		}
		p.issuerSeen.Store(&fp)
		return nil
	}
	if err := agentcert.VerifyIssuerSigned(p.cert, rec.GetIssuerPublicKey(), now); err != nil {
		e := asCertError(err)
		if e.Reason == agentcert.ReasonUntrusted {
			e.Explanation = "the certificate is neither issued by a trusted agent CA nor signed by the agent's Genesis issuer key"
		}
		return e
	}
	if genesis.Fingerprint(rec.GetIssuerPublicKey()) != fp {
		return &agentcert.Error{Reason: agentcert.ReasonUntrusted, Explanation: "the agent's record is inconsistent: its issuer key does not match its issuer fingerprint"}
	}
	p.issuerSeen.Store(&fp)
	p.verified.add(p.CertFingerprint, fp)
	return nil
}

// unexpired refuses a certificate that expired since it was verified.
func (p *Peer) unexpired(now time.Time) *agentcert.Error {
	if now.After(p.cert.NotAfter) {
		return &agentcert.Error{Reason: agentcert.ReasonExpired, Explanation: "the certificate expired at " + p.cert.NotAfter.UTC().Format(time.RFC3339)}
	}
	return nil
}

func asCertError(err error) *agentcert.Error {
	if e, ok := err.(*agentcert.Error); ok {
		c := *e
		return &c
	}
	return &agentcert.Error{Reason: agentcert.ReasonMalformed, Explanation: err.Error()}
}

// Proof is how the caller of one request was proven; the zero value is
// an anonymous caller.
type Proof struct {
	// Level is the core §10.2 verification level (LevelClaim, LevelToken,
	// LevelCertificate); 0 for an anonymous caller.
	Level int
	// By is one of ByCertificate, ByGenesisIssuerKey, ByToken, ByClaim.
	By string
	// CertFingerprint names the client certificate that proved the
	// caller.
	CertFingerprint string
	// TokenIssuer is the issuer of the token that proved the caller.
	TokenIssuer string
	// PeerServer is the trusted peer AGTP server that vouched for the
	// caller.
	PeerServer string
	// IgnoredClaim is an Agent-ID header that proved nothing and was
	// ignored (the request was answered as anonymous).
	IgnoredClaim string
}

// Delegated stands in for a client certificate on a request the front door
// makes itself for a DELEGATE it verified (core §7.2.7): the delegation,
// not the connection, proves that the sub-request's caller is the
// delegatee. Only the pipeline makes one; the transport never does.
type Delegated struct {
	// AgentID is the delegatee.
	AgentID string
	// Level is the verification level of the delegator the DELEGATE came
	// from.
	Level int
}

// Proofs that come from a DELEGATE: ByDelegation for the calls a verified
// DELEGATE runs as its delegatee, ByDelegationToken for a DELEGATE
// forwarded by another server, whose delegator signed its token.
const (
	ByDelegation      = "delegation"
	ByDelegationToken = "delegation-token"
)
