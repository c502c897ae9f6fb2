package kit

import (
	"crypto/ed25519"
	"fmt"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
)

// LoadSigner reads the suite's Ed25519 signing key (a PKCS#8 PEM file, or
// any other form attribution.LoadSigningKey reads, as auditsvc does) and
// returns it with its key ID (the RFC 7638 thumbprint every signer of the
// suite uses as kid).
func LoadSigner(path string) (ed25519.PrivateKey, string, error) {
	priv, err := attribution.LoadSigningKey(path)
	if err != nil {
		return nil, "", fmt.Errorf("signing key: %w", err)
	}
	kid, err := attribution.KeyID(priv.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, "", err
	}
	return priv, kid, nil
}
