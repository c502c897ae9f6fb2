package kit

import (
	"crypto/x509"
	"fmt"
	"os"
)

// LoadCertPool reads a PEM bundle of CA certificates into a pool; a file
// that holds none is an error, since an empty pool trusts nothing and a
// deployment that names a file means it to trust something.
func LoadCertPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", file)
	}
	return pool, nil
}
