package kit

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
)

// LoadSigner reads the suite's Ed25519 signing key (PKCS#8 PEM) and
// returns it with its key ID (the RFC 7638 thumbprint every signer of the
// suite uses as kid).
func LoadSigner(path string) (ed25519.PrivateKey, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("read signing key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, "", fmt.Errorf("signing key %s is not PEM", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, "", fmt.Errorf("parse signing key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, "", fmt.Errorf("signing key %s is %T, not Ed25519", path, k)
	}
	kid, err := attribution.KeyID(priv.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, "", err
	}
	return priv, kid, nil
}
