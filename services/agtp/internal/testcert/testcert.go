// Package testcert makes the TLS certificate the agtp tests share: one
// self-signed ECDSA certificate for "localhost", 127.0.0.1 and ::1,
// generated once per test binary.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"sync"
	"time"
)

var (
	once sync.Once
	cert tls.Certificate
	pool *x509.CertPool
	err  error
)

// Get returns the certificate and a pool that trusts it.
func Get() (tls.Certificate, *x509.CertPool, error) {
	once.Do(func() {
		var key *ecdsa.PrivateKey
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(1),
			Subject:               pkix.Name{CommonName: "agtp test"},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(24 * time.Hour),
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			BasicConstraintsValid: true,
			IsCA:                  true,
			DNSNames:              []string{"localhost"},
			IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		var der []byte
		der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return
		}
		var leaf *x509.Certificate
		leaf, err = x509.ParseCertificate(der)
		if err != nil {
			return
		}
		cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
		pool = x509.NewCertPool()
		pool.AddCert(leaf)
	})
	return cert, pool, err
}
