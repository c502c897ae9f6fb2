package keyfile

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func pemFile(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadRefusesWhatIsNotAPrivateKey(t *testing.T) {
	dir := t.TempDir()
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edDER, _ := x509.MarshalPKCS8PrivateKey(ed)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	pubDER, _ := x509.MarshalPKIXPublicKey(ed.Public())
	edFile := pemFile(t, dir, "ed.pem", "PRIVATE KEY", edDER)
	ecFile := pemFile(t, dir, "ec.pem", "PRIVATE KEY", ecDER)
	pubFile := pemFile(t, dir, "pub.pem", "PUBLIC KEY", pubDER)
	badDER := pemFile(t, dir, "bad.pem", "PRIVATE KEY", []byte("not DER"))
	large := filepath.Join(dir, "large.pem")
	if err := os.WriteFile(large, append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: edDER}), make([]byte, MaxSize)...), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")

	for _, tc := range []struct {
		name        string
		path        string
		ed25519     bool   // ReadEd25519 must accept it
		private     bool   // ReadPrivate must accept it
		wantErr     string // in both errors otherwise
		notExisting bool
	}{
		{"an Ed25519 PKCS#8 key is read", edFile, true, true, "", false},
		{"an ECDSA key is a private key, not an Ed25519 one", ecFile, false, true, "not Ed25519", false},
		{"a public key is not a private key", pubFile, false, false, "not a PEM PRIVATE KEY", false},
		{"a PRIVATE KEY block must hold PKCS#8", badDER, false, false, "PKCS#8 private key", false},
		{"a file over MaxSize is refused unread", large, false, false, "too large for a key file", false},
		{"a missing file says so", missing, false, false, "no such file", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ReadPrivate(tc.path)
			if tc.private != (err == nil) || (err == nil && k == nil) {
				t.Fatalf("ReadPrivate: %T %v", k, err)
			}
			if err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ReadPrivate: %v, want %q", err, tc.wantErr)
			}
			ek, err := ReadEd25519(tc.path)
			if tc.ed25519 != (err == nil) {
				t.Fatalf("ReadEd25519: %v", err)
			}
			if err == nil && !ek.Equal(ed) {
				t.Fatal("ReadEd25519 returned another key")
			}
			if err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ReadEd25519: %v, want %q", err, tc.wantErr)
			}
			if tc.notExisting != errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("errors.Is(%v, fs.ErrNotExist) = %v", err, !tc.notExisting)
			}
		})
	}
}

// CertPool reads a CA bundle, and refuses a file that names no
// certificate rather than trusting nothing.
func TestCertPool(t *testing.T) {
	dir := t.TempDir()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	bundle := pemFile(t, dir, "ca.pem", "CERTIFICATE", der)
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	want := x509.NewCertPool()
	want.AddCert(ca)
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	notBundle := pemFile(t, dir, "key.pem", "PRIVATE KEY", keyDER)

	for _, tc := range []struct {
		name, path, wantErr string
	}{
		{"a bundle is read", bundle, ""},
		{"a file without a certificate is refused", notBundle, "holds no PEM certificate"},
		{"a missing file says so", filepath.Join(dir, "missing.pem"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool, err := CertPool(tc.path)
			if tc.wantErr == "" {
				if err != nil || !pool.Equal(want) {
					t.Fatalf("CertPool = %v, %v; want the bundle's certificate", pool, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CertPool error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
