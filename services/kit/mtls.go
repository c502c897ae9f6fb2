package kit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/agtpsuite/agtp/services/keyfile"
)

// MTLS holds the suite CA and this service's certificate, and builds the
// TLS configurations for mutual authentication between services. The
// certificate and the CA bundle are re-read when their files change on
// disk, so both can be rotated without a restart: a new CA is added to the
// bundle, certificates are reissued under it, then the old CA is removed.
type MTLS struct {
	caFile   string
	certFile string
	keyFile  string

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime int64
	pool    *x509.CertPool
	caMod   int64
}

// LoadMTLS reads the suite CA bundle and the service's certificate and key.
func LoadMTLS(caFile, certFile, keyFile string) (*MTLS, error) {
	m := &MTLS{caFile: caFile, certFile: certFile, keyFile: keyFile}
	if _, err := m.caPool(); err != nil {
		return nil, err
	}
	if _, err := m.certificate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Pool is the suite CA pool as the bundle is now.
func (m *MTLS) Pool() *x509.CertPool {
	p, _ := m.caPool()
	return p
}

// caPool returns the CA bundle, read again when its file changed. A
// bundle that does not load (half written) keeps the previous one.
func (m *MTLS) caPool() (*x509.CertPool, error) {
	st, err := os.Stat(m.caFile)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if m.pool != nil {
			return m.pool, nil
		}
		return nil, fmt.Errorf("suite CA: %w", err)
	}
	if m.pool != nil && st.ModTime().UnixNano() == m.caMod {
		return m.pool, nil
	}
	pool, err := keyfile.CertPool(m.caFile)
	if err != nil {
		if m.pool != nil {
			return m.pool, nil
		}
		return nil, fmt.Errorf("suite CA: %w", err)
	}
	m.pool, m.caMod = pool, st.ModTime().UnixNano()
	return pool, nil
}
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

// ServerConfig requires a client certificate issued by the suite CA, as
// the bundle is at each handshake. A caller may adjust the returned
// configuration (NextProtos, ClientAuth) before serving with it.
func (m *MTLS) ServerConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  m.Pool(),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return m.certificate()
		},
		NextProtos: []string{"h2"},
	}
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := cfg.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = m.Pool()
		return c, nil
	}
	return cfg
}

// ClientConfig presents this service's certificate and trusts only the
// suite CA, as the bundle is at each handshake: the chain and the name are
// verified in VerifyConnection against the current pool, which is why the
// standard verification (fixed to one pool) is switched off.
func (m *MTLS) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		ServerName:         serverName,
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return m.verifyServer(cs, serverName)
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return m.certificate()
		},
		NextProtos: []string{"h2"},
	}
}

// verifyServer is what crypto/tls would check of a server with RootCAs set
// to the suite CA and ServerName set: the chain, for server
// authentication, and the name.
func (m *MTLS) verifyServer(cs tls.ConnectionState, serverName string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	name := serverName
	if name == "" {
		name = cs.ServerName
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: m.Pool(), Intermediates: inter, DNSName: name,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("server certificate: %w", err)
	}
	return nil
}

// ErrNoTLS is returned when a service is configured without certificates.
var ErrNoTLS = errors.New("mTLS is required: set the suite CA, certificate and key")

// Leaf is this process's own certificate, parsed.
func (m *MTLS) Leaf() (*x509.Certificate, error) {
	c, err := m.certificate()
	if err != nil {
		return nil, err
	}
	if c.Leaf != nil {
		return c.Leaf, nil
	}
	return x509.ParseCertificate(c.Certificate[0])
}
