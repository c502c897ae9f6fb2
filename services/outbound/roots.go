package outbound

import (
	"crypto/x509"
	"fmt"
	"os"
)

// RootCAs is the trust pool for connections to servers outside the suite:
// the system roots plus the PEM certificates in caFile (none when it is
// empty), for destinations whose certificates a private CA issues.
func RootCAs(caFile string) (*x509.CertPool, error) {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if caFile == "" {
		return roots, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
	}
	return roots, nil
}
