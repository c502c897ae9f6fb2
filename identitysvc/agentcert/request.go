package agentcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
)

// Registrar-issued certificates (docs/identity.md, "Registrar-issued
// certificates"): identitysvc's IssueAgentCertificate signs a CA-issued
// certificate for a key the agent holds when the caller proves possession
// of two keys. The CSR's own signature proves the key to certify; an
// Ed25519 signature by the agent's Genesis issuer key over RequestMessage
// proves the caller speaks for the agent, since only the Genesis pins who
// the agent is.

// RequestContext opens every message an issuer key signs to ask for a
// certificate, so such a signature can never be taken for one made for
// another purpose (a Genesis, a lifecycle event).
const RequestContext = "agtp-agent-certificate-request"

// MaxCSRBytes bounds the DER of a certificate request that is parsed.
const MaxCSRBytes = 8 << 10

// RequestMessage is what the Genesis issuer key signs to ask for a
// certificate: RequestContext, the Agent-ID and the lowercase hex SHA-256
// of the DER CSR, separated by line feeds. Binding the
// CSR's digest means the signature authorises that one key and nothing
// else; binding the Agent-ID means it cannot be replayed for another
// agent of the same issuer.
func RequestMessage(agentID string, csrDER []byte) []byte {
	sum := sha256.Sum256(csrDER)
	return []byte(RequestContext + "\n" + agentID + "\n" + hex.EncodeToString(sum[:]))
}

// SignRequest is the issuer_signature of a request for agentID's
// certificate for the key that signed csrDER.
func SignRequest(issuer ed25519.PrivateKey, agentID string, csrDER []byte) []byte {
	return ed25519.Sign(issuer, RequestMessage(agentID, csrDER))
}

// VerifyRequest reports whether sig is issuer's signature of the request.
func VerifyRequest(issuer ed25519.PublicKey, agentID string, csrDER, sig []byte) bool {
	if len(issuer) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(issuer, RequestMessage(agentID, csrDER), sig)
}

// CreateCSR makes the DER certificate request for key's public key. The
// subject names the agent for readability only: the registrar sets the
// certificate's names from the Agent-ID it was asked for.
func CreateCSR(agentID string, key crypto.Signer) ([]byte, error) {
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: agentID}}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("agentcert: certificate request: %w", err)
	}
	return der, nil
}

// ParseCSR decodes a DER certificate request, checks its self-signature
// (proof of possession of the key it carries) and returns that key.
// Only the keys the profile issues for are accepted: Ed25519 and ECDSA on
// P-256, P-384 or P-521, which TLS 1.3 clients can sign with.
func ParseCSR(der []byte) (crypto.PublicKey, error) {
	if len(der) == 0 {
		return nil, errors.New("the certificate request is empty")
	}
	if len(der) > MaxCSRBytes {
		return nil, fmt.Errorf("the certificate request is %d bytes, more than %d", len(der), MaxCSRBytes)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("the certificate request does not parse: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the certificate request is not signed by the key it carries: %w", err)
	}
	switch k := csr.PublicKey.(type) {
	case ed25519.PublicKey:
		return k, nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return k, nil
		}
		return nil, fmt.Errorf("the certificate request's ECDSA curve %s is not P-256, P-384 or P-521", k.Curve.Params().Name)
	}
	return nil, fmt.Errorf("the certificate request's key is %T; an Agent Certificate is for an Ed25519 or ECDSA key", csr.PublicKey)
}
