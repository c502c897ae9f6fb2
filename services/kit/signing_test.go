package kit_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/kit"
)

// The signing key file reads the same in every service: catalogsvc and
// identitysvc (kit.LoadSigner) take what auditsvc (attribution.LoadKeySet)
// takes, and refuse what it refuses.
func TestLoadSignerReadsTheSigningKeyAsAuditsvcDoes(t *testing.T) {
	dir := t.TempDir()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	pubDER, _ := x509.MarshalPKIXPublicKey(key.Public())
	jwk, _ := json.Marshal(jose.JSONWebKey{Key: key})
	files := map[string][]byte{
		"key.pem":   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		"key.jwk":   jwk,
		"pub.pem":   pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
		"not-a-key": []byte("not a key\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := attribution.KeyID(key.Public().(ed25519.PublicKey))
	for _, tc := range []struct {
		file string
		ok   bool
	}{{"key.pem", true}, {"key.jwk", true}, {"pub.pem", false}, {"not-a-key", false}, {"missing", false}} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			priv, kid, err := kit.LoadSigner(path)
			ks, ksErr := attribution.LoadKeySet(path)
			if (err == nil) != tc.ok || (ksErr == nil) != tc.ok {
				t.Fatalf("LoadSigner: %v; LoadKeySet: %v; want ok=%v", err, ksErr, tc.ok)
			}
			if tc.ok && (!priv.Equal(key) || kid != want || ks.ActiveKID() != kid) {
				t.Fatalf("kid %s, auditsvc's %s, want %s", kid, ks.ActiveKID(), want)
			}
		})
	}
}
