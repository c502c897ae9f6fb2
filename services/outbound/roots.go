package outbound

import (
	"crypto/x509"
	"github.com/agtpsuite/agtp/services/keyfile"
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
	if err := keyfile.AppendCerts(roots, caFile); err != nil {
		return nil, err
	}
	return roots, nil
}
