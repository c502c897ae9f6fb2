// Package manifest canonicalises and signs the server manifest (AGTP-API
// §8.8): manifest_signature is a JWS (EdDSA, Ed25519) over the RFC 8785
// (JCS) form of the manifest without manifest_signature.
//
// The JWS is the compact serialisation with a detached payload
// (RFC 7515 Appendix F, "header..signature"): the payload is the
// manifest itself, so embedding it would double the document. A verifier
// removes manifest_signature, canonicalises the rest with JCS and checks
// the signature over that.
package manifest

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/go-jose/go-jose/v4"

	"github.com/agtpsuite/agtp/services/jcs"
)

// MediaType is the manifest's Content-Type (AGTP-API §8.10, §17.2).
const MediaType = "application/vnd.agtp.manifest+json"

// SignatureField is the member that carries the JWS.
const SignatureField = "manifest_signature"

// Signer signs manifests with an Ed25519 key.
type Signer struct {
	key crypto.Signer
	pub ed25519.PublicKey
	kid string
}

// NewSigner wraps an Ed25519 key (an ed25519.PrivateKey or any
// crypto.Signer whose public key is Ed25519, such as a KMS handle).
func NewSigner(key crypto.Signer, kid string) (*Signer, error) {
	if key == nil {
		return nil, errors.New("manifest: nil signing key")
	}
	pub, ok := key.Public().(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("manifest: signing key is %T, not Ed25519", key.Public())
	}
	if kid == "" {
		return nil, errors.New("manifest: signing key needs a kid")
	}
	return &Signer{key: key, pub: pub, kid: kid}, nil
}

// KeyID is the kid in the JWS header.
func (s *Signer) KeyID() string { return s.kid }

// Public returns the verification key.
func (s *Signer) Public() ed25519.PublicKey { return s.pub }

type opaque struct{ s *Signer }

func (o opaque) Public() *jose.JSONWebKey {
	return &jose.JSONWebKey{Key: o.s.pub, KeyID: o.s.kid, Algorithm: string(jose.EdDSA)}
}
func (o opaque) Algs() []jose.SignatureAlgorithm { return []jose.SignatureAlgorithm{jose.EdDSA} }
func (o opaque) SignPayload(payload []byte, alg jose.SignatureAlgorithm) ([]byte, error) {
	if alg != jose.EdDSA {
		return nil, fmt.Errorf("manifest: algorithm %s is not EdDSA", alg)
	}
	return o.s.key.Sign(rand.Reader, payload, crypto.Hash(0))
}

// Finish canonicalises the manifest document, signs it when s is not nil
// and returns the JCS bytes with manifest_signature set (null when
// unsigned). doc is modified.
func Finish(doc map[string]any, s *Signer) ([]byte, error) {
	delete(doc, SignatureField)
	payload, err := jcs.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("manifest: canonicalise: %w", err)
	}
	if s == nil {
		doc[SignatureField] = nil
	} else {
		sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: opaque{s}},
			(&jose.SignerOptions{}).WithHeader("kid", s.kid).WithType("JOSE"))
		if err != nil {
			return nil, fmt.Errorf("manifest: signer: %w", err)
		}
		obj, err := sig.Sign(payload)
		if err != nil {
			return nil, fmt.Errorf("manifest: sign: %w", err)
		}
		compact, err := obj.DetachedCompactSerialize()
		if err != nil {
			return nil, fmt.Errorf("manifest: serialise: %w", err)
		}
		doc[SignatureField] = compact
	}
	out, err := jcs.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("manifest: canonicalise: %w", err)
	}
	return out, nil
}

// ETag is the quoted strong validator of a manifest body (AGTP-API §8.11).
func ETag(body []byte) string {
	sum := sha256.Sum256(body)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// Verify checks a signed manifest body against an Ed25519 public key and
// returns the kid it was signed with.
func Verify(body []byte, pub ed25519.PublicKey) (string, error) {
	doc, err := jcs.ParseObject(body)
	if err != nil {
		return "", fmt.Errorf("manifest: %w", err)
	}
	sig, ok := doc[SignatureField].(string)
	if !ok || sig == "" {
		return "", errors.New("manifest: unsigned")
	}
	delete(doc, SignatureField)
	payload, err := jcs.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("manifest: %w", err)
	}
	obj, err := jose.ParseDetached(sig, payload, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return "", fmt.Errorf("manifest: signature: %w", err)
	}
	if _, err := obj.Verify(pub); err != nil {
		return "", fmt.Errorf("manifest: signature: %w", err)
	}
	return obj.Signatures[0].Header.KeyID, nil
}
