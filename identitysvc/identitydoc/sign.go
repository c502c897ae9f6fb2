// Package identitydoc builds, signs and verifies the documents a registry
// serves about its agents: the Agent Identity Document (core §6.3), its
// ?format= variants (§6.1.7), the status document (§6.4.4) and the Agent
// Namespace Document (§6.2).
//
// Identity and status documents are signed inline (§6.3.5):
// manifest_signature is Ed25519 over the JCS form of the document without
// manifest_signature (manifest_issuer and manifest_issuer_public_key stay
// in), base64url. The namespace document carries
// {"algorithm":"EdDSA","key_id","value"}, Ed25519 over the JCS form of the
// document without signature: EdDSA instead of the draft example's ES256,
// since every other key in AGTP is Ed25519 (docs/decisions.md#D-eddsa).
package identitydoc

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/services/jcs"
)

// Inline signature members (core §6.3.5).
const (
	FieldManifestIssuer          = "manifest_issuer"
	FieldManifestIssuerPublicKey = "manifest_issuer_public_key"
	FieldManifestSignature       = "manifest_signature"
)

// AlgorithmEdDSA is the namespace signature algorithm this suite emits.
const AlgorithmEdDSA = "EdDSA"

// Signer signs documents with the suite's Ed25519 key.
type Signer struct {
	Key ed25519.PrivateKey
	// Issuer is the manifest_issuer value (operator-defined: a domain
	// name or registrar identifier).
	Issuer string
	// KeyID names the key in namespace signatures.
	KeyID string
}

// DefaultKeyID derives a key ID from a public key: "ed25519:" and the
// first 16 hex digits of its fingerprint.
func DefaultKeyID(pub ed25519.PublicKey) string {
	return "ed25519:" + genesis.Fingerprint(pub)[:16]
}

func (s Signer) public() ed25519.PublicKey {
	pub, _ := s.Key.Public().(ed25519.PublicKey)
	return pub
}

// SignInline strips any caller-supplied signature members (core §6.3.5:
// the registrar must not let issuance be forged), adds its own, signs,
// verifies the result (a document that fails is never served) and
// returns the canonical bytes. doc is modified.
func (s Signer) SignInline(doc map[string]any) ([]byte, error) {
	if len(s.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("identitydoc: no Ed25519 signing key")
	}
	delete(doc, FieldManifestSignature)
	doc[FieldManifestIssuer] = s.Issuer
	doc[FieldManifestIssuerPublicKey] = genesis.EncodeKey(s.public())
	input, err := jcs.Append(nil, doc)
	if err != nil {
		return nil, fmt.Errorf("identitydoc: %w", err)
	}
	doc[FieldManifestSignature] = base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.Key, input))
	out, err := jcs.Append(nil, doc)
	if err != nil {
		return nil, fmt.Errorf("identitydoc: %w", err)
	}
	if err := VerifyInline(out); err != nil {
		return nil, fmt.Errorf("identitydoc: signed document does not verify: %w", err)
	}
	return out, nil
}

// VerifyInline checks an inline-signed document (identity or status):
// all three signature members present, and manifest_signature verifying
// with manifest_issuer_public_key over the JCS form without
// manifest_signature. It does not say whether the issuer is trusted;
// that is the relying party's policy (core §6.3.5).
func VerifyInline(doc []byte) error {
	obj, err := jcs.ParseObject(doc)
	if err != nil {
		return fmt.Errorf("identitydoc: %w", err)
	}
	issuer, _ := obj[FieldManifestIssuer].(string)
	keyS, _ := obj[FieldManifestIssuerPublicKey].(string)
	sigS, _ := obj[FieldManifestSignature].(string)
	if issuer == "" || keyS == "" || sigS == "" {
		return errors.New("identitydoc: document is not signed (manifest_issuer, manifest_issuer_public_key and manifest_signature are required)")
	}
	key, err := decodeB64URL(keyS)
	if err != nil || len(key) != ed25519.PublicKeySize {
		return errors.New("identitydoc: manifest_issuer_public_key is not a base64url 32-byte Ed25519 key")
	}
	sig, err := decodeB64URL(sigS)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return errors.New("identitydoc: manifest_signature is not a base64url 64-byte Ed25519 signature")
	}
	delete(obj, FieldManifestSignature)
	input, err := jcs.Append(nil, obj)
	if err != nil {
		return fmt.Errorf("identitydoc: %w", err)
	}
	if !ed25519.Verify(key, input, sig) {
		return errors.New("identitydoc: manifest_signature does not verify")
	}
	return nil
}

// SignNamespace sets the signature member of a namespace document and
// returns the canonical bytes. doc is modified.
func (s Signer) SignNamespace(doc map[string]any) ([]byte, error) {
	if len(s.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("identitydoc: no Ed25519 signing key")
	}
	delete(doc, "signature")
	input, err := jcs.Append(nil, doc)
	if err != nil {
		return nil, fmt.Errorf("identitydoc: %w", err)
	}
	keyID := s.KeyID
	if keyID == "" {
		keyID = DefaultKeyID(s.public())
	}
	doc["signature"] = map[string]any{
		"algorithm": AlgorithmEdDSA,
		"key_id":    keyID,
		"value":     base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.Key, input)),
	}
	out, err := jcs.Append(nil, doc)
	if err != nil {
		return nil, fmt.Errorf("identitydoc: %w", err)
	}
	if err := VerifyNamespace(out, s.public()); err != nil {
		return nil, fmt.Errorf("identitydoc: signed namespace document does not verify: %w", err)
	}
	return out, nil
}

// VerifyNamespace checks a namespace document's EdDSA signature with pub.
// The caller must also reject documents whose generated_at is older than
// its freshness threshold (core §6.2.3).
func VerifyNamespace(doc []byte, pub ed25519.PublicKey) error {
	obj, err := jcs.ParseObject(doc)
	if err != nil {
		return fmt.Errorf("identitydoc: %w", err)
	}
	sig, _ := obj["signature"].(map[string]any)
	if sig == nil {
		return errors.New("identitydoc: namespace document has no signature")
	}
	if alg, _ := sig["algorithm"].(string); alg != AlgorithmEdDSA {
		return fmt.Errorf("identitydoc: namespace signature algorithm %q is not %s", alg, AlgorithmEdDSA)
	}
	value, _ := sig["value"].(string)
	raw, err := decodeB64URL(value)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return errors.New("identitydoc: namespace signature value is not a base64url Ed25519 signature")
	}
	delete(obj, "signature")
	input, err := jcs.Append(nil, obj)
	if err != nil {
		return fmt.Errorf("identitydoc: %w", err)
	}
	if !ed25519.Verify(pub, input, raw) {
		return errors.New("identitydoc: namespace signature does not verify")
	}
	return nil
}

func decodeB64URL(s string) ([]byte, error) {
	if strings.ContainsAny(s, "+/") {
		return nil, errors.New("standard base64 alphabet")
	}
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// Indent renders canonical JSON for humans (the ?format=manifest
// variant); the signature still verifies, since it covers the canonical
// form, not the whitespace.
func Indent(canonical []byte) []byte {
	var buf bytes.Buffer
	if err := jsonIndent(&buf, canonical); err != nil {
		return canonical
	}
	return buf.Bytes()
}
