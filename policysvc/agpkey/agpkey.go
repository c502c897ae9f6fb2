// Package agpkey defines AGP API key secrets (docs/agp.md): how they are
// minted and how they are stored and looked up, by their SHA-256. Shared by
// policysvc, the front door and the tools that import keys. Follow keeps a
// cache of resolved keys in step with policysvc's key changes.
package agpkey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
)

// Prefix starts every secret, so a leaked key is recognisable in logs and
// by secret scanners.
const Prefix = "agp_"

// NewSecret mints a secret: the prefix and 32 random bytes, base64url.
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return Prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Hash is how a secret is stored and looked up. Secrets are 256-bit random
// values, so a plain SHA-256 cannot be brute-forced, and a lookup costs one
// hash rather than a password-hashing round on every request.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
