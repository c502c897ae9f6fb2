// Package devpki creates the development PKI of the suite: a suite CA,
// one certificate per service (server and client use, the service name as
// a DNS SAN), the AGTP server certificate, the Ed25519 signing key, and an
// agent CA of its own for Agent Certificates.
//
// It is for `make run` and tests; production deployments pass their own
// files. Ensure is idempotent: existing files are kept, so restarts reuse
// the same identities.
package devpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/agtpsuite/agtp/services/access"
)

// Layout names the files in a state directory.
type Layout struct {
	Dir string
}

// CA is the suite CA certificate.
func (l Layout) CA() string { return filepath.Join(l.Dir, "ca.pem") }

// CAKey is the suite CA's private key.
func (l Layout) CAKey() string { return filepath.Join(l.Dir, "ca-key.pem") }

// AgentCA is the agent CA certificate: the CA identitysvc issues Agent
// Certificates with, and the one the front door trusts for them. It is
// separate from the suite CA, which the services trust for each other:
// an agent must never hold a certificate the services accept.
func (l Layout) AgentCA() string { return filepath.Join(l.Dir, "agent-ca.pem") }

// AgentCAKey is the agent CA's private key.
func (l Layout) AgentCAKey() string { return filepath.Join(l.Dir, "agent-ca-key.pem") }

// Cert is the certificate of a named service (or "agtp-server", "admin").
func (l Layout) Cert(name string) string { return filepath.Join(l.Dir, name+".pem") }

// Key is the private key of a named service.
func (l Layout) Key(name string) string { return filepath.Join(l.Dir, name+"-key.pem") }

// SigningKey is the suite's Ed25519 signing key (PKCS#8 PEM).
func (l Layout) SigningKey() string { return filepath.Join(l.Dir, "signing-ed25519.pem") }

// ServiceNames are the suite's services, each with a certificate.
var ServiceNames = []string{"frontdoor", "catalogsvc", "policysvc", "rcnssvc", "identitysvc", "auditsvc"}

// AGTPServer is the name of the front door's public certificate.
const AGTPServer = "agtp-server"

// Admin is the name of the operator's client certificate.
const Admin = "admin"

// Console is the name of the operator console's certificate: it calls
// the services as access.Console and serves the console's HTTPS listener.
const Console = "console"

// InternalSystem is the name of the certificate of an internal system of
// the organisation (a reporting job), for trying the read APIs as one.
const InternalSystem = "system-reporting"

// IdentityOf is the client identity the certificate of a name carries: an
// operator for Admin, an internal system for InternalSystem, none for the
// AGTP server certificate (it never calls the services), and a service
// for every other name.
func IdentityOf(name string) access.Identity {
	switch name {
	case Admin:
		return access.Identity{Kind: access.Operator, Name: "admin"}
	case Console:
		return access.Console
	case InternalSystem:
		return access.Identity{Kind: access.System, Name: "reporting"}
	case AGTPServer:
		return access.Identity{}
	}
	return access.Identity{Kind: access.Service, Name: name}
}

// Ensure creates whatever is missing in dir: the CA, a certificate per
// name, the AGTP server certificate, an operator client certificate
// (Admin), the console's (Console), an internal system's (InternalSystem),
// the signing key and the agent CA. Each client certificate names its
// identity as a SPIFFE ID.
func Ensure(dir string, names ...string) (Layout, error) {
	l := Layout{Dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return l, fmt.Errorf("create state dir: %w", err)
	}
	caCert, caKey, err := ensureCA(l.CA(), l.CAKey(), "AGTP suite development CA", nil)
	if err != nil {
		return l, err
	}
	// The agent CA's certificates are for client authentication only,
	// which its extended key usage enforces on everything it issues.
	if _, _, err := ensureCA(l.AgentCA(), l.AgentCAKey(), "AGTP suite development agent CA", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}); err != nil {
		return l, err
	}
	all := append(append([]string{}, names...), AGTPServer, Admin, Console, InternalSystem)
	for _, n := range all {
		if exists(l.Cert(n)) && exists(l.Key(n)) && namesIdentity(l.Cert(n), n) {
			continue
		}
		if err := issue(l, n, caCert, caKey); err != nil {
			return l, err
		}
	}
	if !exists(l.SigningKey()) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return l, fmt.Errorf("generate signing key: %w", err)
		}
		if err := writeKey(l.SigningKey(), priv); err != nil {
			return l, err
		}
	}
	return l, nil
}

// ensureCA loads the self-signed CA at certPath and keyPath, or creates
// it with a fresh key when either file is missing.
func ensureCA(certPath, keyPath, name string, usage []x509.ExtKeyUsage) (*x509.Certificate, crypto.Signer, error) {
	if exists(certPath) && exists(keyPath) {
		pair, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			return nil, nil, fmt.Errorf("load %s: %w", name, err)
		}
		cert, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			return nil, nil, fmt.Errorf("parse %s: %w", name, err)
		}
		return cert, pair.PrivateKey.(crypto.Signer), nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate %s key: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(5, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage:           usage,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("create %s: %w", name, err)
	}
	if err := writeKey(keyPath, key); err != nil {
		return nil, nil, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key, nil
}

// identityURIs is the URI SAN of a name's certificate: its SPIFFE ID in
// the default trust domain, the one the services recognise
// (docs/access.md).
func identityURIs(name string) []*url.URL {
	id := IdentityOf(name)
	if id.IsZero() {
		return nil
	}
	u, _ := url.Parse(access.SPIFFEID(access.DefaultTrustDomain, id))
	return []*url.URL{u}
}

// namesIdentity reports whether the certificate at path carries the URI
// SAN its name should; certificates from before identities were named in
// them are reissued.
func namesIdentity(path, name string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false
	}
	want := identityURIs(name)
	if len(cert.URIs) != len(want) {
		return false
	}
	for i := range want {
		if cert.URIs[i].String() != want[i].String() {
			return false
		}
	}
	return true
}

func issue(l Layout, name string, ca *x509.Certificate, caKey crypto.Signer) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key for %s: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"AGTP suite"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{name, "localhost"},
		URIs:         identityURIs(name),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("issue certificate for %s: %w", name, err)
	}
	if err := writeKey(l.Key(name), key); err != nil {
		return err
	}
	return writePEM(l.Cert(name), "CERTIFICATE", der, 0o644)
}

func writeKey(path string, key any) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal key: %w", err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

// writePEM writes through a temporary file and a rename, so a reader never
// sees half a file.
func writePEM(path, typ string, der []byte, mode fs.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
