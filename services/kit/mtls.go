package kit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// MTLS holds the suite CA and this service's certificate, and builds the
// TLS configurations for mutual authentication between services. The
// certificate files are re-read when they change on disk, so certificates
// can be rotated without a restart.
type MTLS struct {
	pool     *x509.CertPool
	certFile string
	keyFile  string

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime int64
}

// LoadMTLS reads the suite CA bundle and the service's certificate and key.
func LoadMTLS(caFile, certFile, keyFile string) (*MTLS, error) {
	pool, err := LoadCertPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("suite CA: %w", err)
	}
	m := &MTLS{pool: pool, certFile: certFile, keyFile: keyFile}
	if _, err := m.certificate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Pool is the suite CA pool.
func (m *MTLS) Pool() *x509.CertPool { return m.pool }

func (m *MTLS) certificate() (*tls.Certificate, error) {
	st, err := os.Stat(m.certFile)
	if err != nil {
		return nil, fmt.Errorf("stat certificate: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cert != nil && st.ModTime().UnixNano() == m.modTime {
		return m.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(m.certFile, m.keyFile)
	if err != nil {
		if m.cert != nil {
			// A half-written rotation keeps the old certificate serving.
			return m.cert, nil
		}
		return nil, fmt.Errorf("load certificate: %w", err)
	}
	m.cert, m.modTime = &cert, st.ModTime().UnixNano()
	return m.cert, nil
}

// ServerConfig requires a client certificate issued by the suite CA.
func (m *MTLS) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  m.pool,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return m.certificate()
		},
		NextProtos: []string{"h2"},
	}
}

// ClientConfig presents this service's certificate and trusts only the
// suite CA.
func (m *MTLS) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    m.pool,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return m.certificate()
		},
		NextProtos: []string{"h2"},
	}
}

// ErrNoTLS is returned when a service is configured without certificates.
var ErrNoTLS = errors.New("mTLS is required: set the suite CA, certificate and key")
