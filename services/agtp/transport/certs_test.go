package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"os"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/testkit"
)

func servedSerial(t *testing.T, ts *testServer) *big.Int {
	t.Helper()
	conn := ts.dial(t, nil) // no session cache: every handshake sends the certificate
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// A rotation is picked up by new connections without a restart; a
// half-written rotation keeps the old certificate.
func TestCertificateReloadWithoutRestart(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true, CertCheckInterval: 10 * time.Millisecond}, echo())
	pki := testkit.PKI(t)
	old := servedSerial(t, ts)

	newCert, err := os.ReadFile(pki.Cert("intruder"))
	if err != nil {
		t.Fatal(err)
	}
	// Half-written: the certificate is cut short and the key is still the
	// old one.
	if err := os.WriteFile(ts.certs.cert, newCert[:len(newCert)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if got := servedSerial(t, ts); got.Cmp(old) != 0 {
		t.Fatalf("half-written rotation served serial %v", got)
	}
	if ts.Stats().CertReloadFailures == 0 {
		t.Error("failed reload not counted")
	}
	if err := ts.ReloadCertificate(); err == nil {
		t.Error("ReloadCertificate succeeded on a half-written file")
	}

	// Complete the rotation: certificate first, then key (a mismatch in
	// between also keeps the old pair).
	if err := os.WriteFile(ts.certs.cert, newCert, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if got := servedSerial(t, ts); got.Cmp(old) != 0 {
		t.Fatalf("certificate without its key served serial %v", got)
	}
	copyFile(t, pki.Key("intruder"), ts.certs.key)
	want := loadSerial(t, pki.Cert("intruder"))
	waitFor(t, "new certificate served", func() bool {
		time.Sleep(10 * time.Millisecond)
		return servedSerial(t, ts).Cmp(want) == 0
	})
	if ts.Stats().CertReloads != 1 {
		t.Errorf("CertReloads = %d", ts.Stats().CertReloads)
	}
}

func loadSerial(t *testing.T, path string) *big.Int {
	t.Helper()
	c, err := tls.LoadX509KeyPair(path, path[:len(path)-len(".pem")]+"-key.pem")
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.SerialNumber
}

// foreignCert is a self-signed client certificate from outside the suite
// CA.
func foreignCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42),
		Subject:      pkix.Name{CommonName: "mallory"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
