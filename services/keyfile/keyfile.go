// Package keyfile reads key files from disk for the services and the agtp
// command: the suite's signing key, Genesis issuer keys, agent keys and
// the verification keys of attribution, and the CA bundles they trust.
// One reader bounds what is read and says in one wording what is wrong
// with a file; what a file may hold beyond a PKCS #8 private key (JWK,
// JWKS, PKIX public keys) is attribution.ParseKeys'.
package keyfile

import (
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxSize bounds what is read of a key file: a PEM private key is well
// under a KiB, and a JWKS of a few hundred keys fits.
const MaxSize = 64 << 10

// Read returns the contents of the key file at path, refusing a file
// larger than MaxSize. A file that cannot be opened gives the error of
// os.Open, so errors.Is(err, fs.ErrNotExist) tells a missing file.
func Read(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%s is larger than %d KiB, too large for a key file", path, MaxSize>>10)
	}
	return b, nil
}

// ReadPrivate reads a PKCS #8 PEM private key ("PRIVATE KEY") of any
// algorithm x509 parses; the caller says which it takes.
func ReadPrivate(path string) (crypto.PrivateKey, error) {
	b, err := Read(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePrivate(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ParsePrivate is ReadPrivate on the file's contents.
func ParsePrivate(pemBytes []byte) (crypto.PrivateKey, error) {
	blk, _ := pem.Decode(pemBytes)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM PRIVATE KEY (PKCS#8)")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PKCS#8 private key: %w", err)
	}
	return k, nil
}

// ReadEd25519 reads a PKCS #8 PEM Ed25519 private key: the suite's
// signing key, a Genesis issuer key.
func ReadEd25519(path string) (ed25519.PrivateKey, error) {
	k, err := ReadPrivate(path)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s holds a %T key, not Ed25519", path, k)
	}
	return ek, nil
}

// CertPool reads a PEM bundle of CA certificates into a new pool.
func CertPool(path string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if err := AppendCerts(pool, path); err != nil {
		return nil, err
	}
	return pool, nil
}

// AppendCerts adds the certificates of the PEM bundle at path to pool. A
// file that holds none is an error: an empty pool trusts nothing, and a
// setting that names a file means it to trust something. A bundle is not
// bounded by MaxSize: it is the operator's file, and a system bundle is
// larger.
func AppendCerts(pool *x509.CertPool, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read CA bundle: %w", err)
	}
	if !pool.AppendCertsFromPEM(b) {
		return fmt.Errorf("CA bundle %s holds no PEM certificate", path)
	}
	return nil
}
