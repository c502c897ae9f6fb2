package attribution

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/agtpsuite/agtp/services/keyfile"
)

// AlgEdDSA and AlgNone are the two values of the JWS "alg" header this
// package writes (docs/decisions.md#D-attribution-record: EdDSA with Ed25519, none only without a key).
const (
	AlgEdDSA = "EdDSA"
	AlgNone  = "none"
)

// KeyID returns the RFC 7638 JWK thumbprint (SHA-256, base64url) of an
// Ed25519 public key. It is the kid the signer writes, so that every replica
// configured with the same key writes the same kid without coordination.
func KeyID(pub ed25519.PublicKey) (string, error) {
	if len(pub) != ed25519.PublicKeySize {
		return "", errors.New("attribution: not an Ed25519 public key")
	}
	jwk := jose.JSONWebKey{Key: pub}
	tp, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("attribution: thumbprint: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

// KeyResolver finds the public key for a kid. KeySet and PublicKeys
// implement it.
type KeyResolver interface {
	VerificationKey(kid string) (ed25519.PublicKey, bool)
}

// PublicKeys is a set of verification keys by kid, such as a parsed JWKS.
type PublicKeys map[string]ed25519.PublicKey

// VerificationKey implements KeyResolver.
func (p PublicKeys) VerificationKey(kid string) (ed25519.PublicKey, bool) {
	k, ok := p[kid]
	return k, ok
}

// ParseJWKS reads the Ed25519 keys of a JWKS document. Keys of other types
// are skipped; a key whose kid is not its RFC 7638 thumbprint is refused,
// so a JWKS cannot make one key answer for another key's kid.
func ParseJWKS(data []byte) (PublicKeys, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("attribution: parse JWKS: %w", err)
	}
	out := PublicKeys{}
	for _, k := range set.Keys {
		pub, ok := k.Key.(ed25519.PublicKey)
		if !ok {
			continue
		}
		kid, err := KeyID(pub)
		if err != nil {
			return nil, err
		}
		if k.KeyID != "" && k.KeyID != kid {
			return nil, fmt.Errorf("attribution: JWKS key %q: kid is not the key's RFC 7638 thumbprint", k.KeyID)
		}
		out[kid] = pub
	}
	return out, nil
}

// KeySet is the signing configuration: one active key that signs, and the
// public keys of earlier (rotated-out) keys, kept so that old records still
// verify. A nil *KeySet or one without an active key signs with alg none.
// A KeySet is immutable; rotate by building a new one.
type KeySet struct {
	active    ed25519.PrivateKey
	activeKID string
	public    PublicKeys
	order     []string // kids, active first, for a stable JWKS
}

// NewKeySet builds a key set. active may be nil (alg none). verifyOnly are
// earlier keys, kept for verification and published in the JWKS; a
// private key there is reduced to its public half.
func NewKeySet(active ed25519.PrivateKey, verifyOnly ...crypto.PublicKey) (*KeySet, error) {
	ks := &KeySet{public: PublicKeys{}}
	if active != nil {
		if len(active) != ed25519.PrivateKeySize {
			return nil, errors.New("attribution: active key is not an Ed25519 private key")
		}
		pub := active.Public().(ed25519.PublicKey)
		kid, err := KeyID(pub)
		if err != nil {
			return nil, err
		}
		ks.active, ks.activeKID = active, kid
		ks.public[kid] = pub
		ks.order = append(ks.order, kid)
	}
	for i, k := range verifyOnly {
		var pub ed25519.PublicKey
		switch k := k.(type) {
		case ed25519.PublicKey:
			pub = k
		case ed25519.PrivateKey:
			pub = k.Public().(ed25519.PublicKey)
		default:
			return nil, fmt.Errorf("attribution: verification key %d: not an Ed25519 key (%T)", i, k)
		}
		kid, err := KeyID(pub)
		if err != nil {
			return nil, fmt.Errorf("attribution: verification key %d: %w", i, err)
		}
		if _, dup := ks.public[kid]; dup {
			continue
		}
		ks.public[kid] = slices.Clone(pub)
		ks.order = append(ks.order, kid)
	}
	return ks, nil
}

// ActiveKID is the kid of the signing key, or "" for alg none.
func (ks *KeySet) ActiveKID() string {
	if ks == nil {
		return ""
	}
	return ks.activeKID
}

// VerificationKey implements KeyResolver over the active and earlier keys.
func (ks *KeySet) VerificationKey(kid string) (ed25519.PublicKey, bool) {
	if ks == nil {
		return nil, false
	}
	return ks.public.VerificationKey(kid)
}

// PublicKeys returns a copy of the verification keys by kid.
func (ks *KeySet) PublicKeys() PublicKeys {
	out := PublicKeys{}
	if ks != nil {
		for k, v := range ks.public {
			out[k] = v
		}
	}
	return out
}

// JWKS returns the public keys as a JWKS document (RFC 7517), active key
// first. It never contains private material.
func (ks *KeySet) JWKS() ([]byte, error) {
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	if ks != nil {
		for _, kid := range ks.order {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: ks.public[kid], KeyID: kid, Algorithm: AlgEdDSA, Use: "sig"})
		}
	}
	return json.Marshal(set)
}

// Signer returns a signer for the active key (alg none without one).
func (ks *KeySet) Signer() *Signer {
	if ks == nil || ks.active == nil {
		return NewSigner(nil)
	}
	return NewSigner(ks.active)
}

// LoadKeyFile reads one Ed25519 key from a file: PEM ("PRIVATE KEY" PKCS #8
// or "PUBLIC KEY" PKIX), a JWK, or a JWKS (every Ed25519 key in it). It
// returns ed25519.PrivateKey or ed25519.PublicKey values.
func LoadKeyFile(path string) ([]crypto.PublicKey, error) {
	data, err := keyfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("attribution: read key file: %w", err)
	}
	keys, err := ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("attribution: key file %s: %w", path, err)
	}
	return keys, nil
}

// ParseKeys is LoadKeyFile on bytes.
func ParseKeys(data []byte) ([]crypto.PublicKey, error) {
	trimmed := bytes.TrimSpace(data)
	if bytes.HasPrefix(trimmed, []byte("{")) {
		return parseJWKKeys(trimmed)
	}
	var out []crypto.PublicKey
	rest := trimmed
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		switch block.Type {
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			ed, ok := k.(ed25519.PrivateKey)
			if !ok {
				return nil, fmt.Errorf("private key is %T, want Ed25519", k)
			}
			out = append(out, ed)
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			ed, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("public key is %T, want Ed25519", k)
			}
			out = append(out, ed)
		default:
			return nil, fmt.Errorf("unsupported PEM block %q", block.Type)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no Ed25519 key found")
	}
	return out, nil
}

func parseJWKKeys(data []byte) ([]crypto.PublicKey, error) {
	var probe struct {
		Keys json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, err
	}
	var jwks []jose.JSONWebKey
	if probe.Keys != nil {
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(data, &set); err != nil {
			return nil, err
		}
		jwks = set.Keys
	} else {
		var k jose.JSONWebKey
		if err := json.Unmarshal(data, &k); err != nil {
			return nil, err
		}
		jwks = []jose.JSONWebKey{k}
	}
	var out []crypto.PublicKey
	for _, k := range jwks {
		switch key := k.Key.(type) {
		case ed25519.PrivateKey:
			out = append(out, key)
		case ed25519.PublicKey:
			out = append(out, key)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no Ed25519 key found")
	}
	return out, nil
}

// LoadSigningKey reads a signing key file: exactly one Ed25519 private
// key, in any form LoadKeyFile reads. Every service reads the suite's
// signing key through it.
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	keys, err := LoadKeyFile(path)
	if err != nil {
		return nil, err
	}
	if len(keys) != 1 {
		return nil, fmt.Errorf("attribution: %s: want exactly one signing key, found %d", path, len(keys))
	}
	priv, ok := keys[0].(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("attribution: %s: signing key file holds no private key", path)
	}
	return priv, nil
}

// LoadKeySet builds a key set from files: activePath holds the signing key
// (empty: alg none), oldPaths hold earlier keys (public or private).
func LoadKeySet(activePath string, oldPaths ...string) (*KeySet, error) {
	var active ed25519.PrivateKey
	if activePath != "" {
		var err error
		if active, err = LoadSigningKey(activePath); err != nil {
			return nil, err
		}
	}
	var old []crypto.PublicKey
	for _, p := range oldPaths {
		keys, err := LoadKeyFile(p)
		if err != nil {
			return nil, err
		}
		old = append(old, keys...)
	}
	return NewKeySet(active, old...)
}
