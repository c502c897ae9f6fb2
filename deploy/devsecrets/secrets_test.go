package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// decode reads the YAML stream Write prints (JSON documents).
func decode(t *testing.T, out []byte) map[string]Secret {
	t.Helper()
	got := map[string]Secret{}
	for _, doc := range strings.Split(string(out), "---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var s Secret
		if err := json.Unmarshal([]byte(doc), &s); err != nil {
			t.Fatalf("document %q: %v", doc, err)
		}
		got[s.Metadata.Name] = s
	}
	return got
}

func TestSecretsAreTheOnesTheManifestsMount(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := run(&buf, Options{Namespace: "agtp-dev", Dir: dir}); err != nil {
		t.Fatal(err)
	}
	got := decode(t, buf.Bytes())

	// deploy/check.ExternalSecrets (the Secrets the manifests mount but do
	// not contain), plus the operator's and the internal system's
	// certificates, named as the cert-manager component names them.
	want := []string{
		"agtp-signing-key", "agtp-redis", "agtp-frontdoor-public-tls",
		"agtp-frontdoor-tls", "agtp-catalogsvc-tls", "agtp-policysvc-tls",
		"agtp-rcnssvc-tls", "agtp-identitysvc-tls", "agtp-auditsvc-tls",
		"agtp-admin-tls", "agtp-system-reporting-tls",
	}
	var names []string
	for n, s := range got {
		names = append(names, n)
		if s.Metadata.Namespace != "agtp-dev" || s.APIVersion != "v1" || s.Kind != "Secret" {
			t.Errorf("%s: %+v", n, s.Metadata)
		}
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("secrets %v, want %v", names, want)
	}

	t.Run("service certificates verify against the CA for their service name, as server and client", func(t *testing.T) {
		for _, svc := range []string{"frontdoor", "catalogsvc", "policysvc", "rcnssvc", "identitysvc", "auditsvc"} {
			s := got["agtp-"+svc+"-tls"]
			if s.Type != "kubernetes.io/tls" {
				t.Errorf("%s: type %s", svc, s.Type)
			}
			pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
			if err != nil {
				t.Fatalf("%s: %v", svc, err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
				t.Fatalf("%s: ca.crt holds no certificate", svc)
			}
			leaf, _ := x509.ParseCertificate(pair.Certificate[0])
			for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				if _, err := leaf.Verify(x509.VerifyOptions{DNSName: svc, Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
					t.Errorf("%s: %v", svc, err)
				}
			}
		}
	})

	t.Run("client certificates name their identity as a SPIFFE ID, the public certificate none", func(t *testing.T) {
		// The identities deploy/k8s/components/cert-manager issues.
		ids := map[string]string{
			"agtp-frontdoor-tls":        "spiffe://agtp.internal/service/frontdoor",
			"agtp-catalogsvc-tls":       "spiffe://agtp.internal/service/catalogsvc",
			"agtp-policysvc-tls":        "spiffe://agtp.internal/service/policysvc",
			"agtp-rcnssvc-tls":          "spiffe://agtp.internal/service/rcnssvc",
			"agtp-identitysvc-tls":      "spiffe://agtp.internal/service/identitysvc",
			"agtp-auditsvc-tls":         "spiffe://agtp.internal/service/auditsvc",
			"agtp-admin-tls":            "spiffe://agtp.internal/operator/admin",
			"agtp-system-reporting-tls": "spiffe://agtp.internal/system/reporting",
			"agtp-frontdoor-public-tls": "",
		}
		for name, want := range ids {
			s := got[name]
			pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			leaf, _ := x509.ParseCertificate(pair.Certificate[0])
			var uris []string
			for _, u := range leaf.URIs {
				uris = append(uris, u.String())
			}
			if want == "" && len(uris) != 0 || want != "" && !slices.Equal(uris, []string{want}) {
				t.Errorf("%s: URI SANs %v, want %q", name, uris, want)
			}
			if want == "" {
				continue
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(s.Data["ca.crt"])
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("%s: not a client certificate of the suite CA: %v", name, err)
			}
		}
	})

	t.Run("the signing key is Ed25519 PKCS#8", func(t *testing.T) {
		block, _ := pem.Decode(got["agtp-signing-key"].Data["signing.pem"])
		if block == nil {
			t.Fatal("signing.pem holds no PEM block")
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if _, ok := k.(ed25519.PrivateKey); err != nil || !ok {
			t.Fatalf("signing key %T, %v", k, err)
		}
	})

	t.Run("the Redis URL is a cluster URL with every node and the password", func(t *testing.T) {
		r := got["agtp-redis"]
		url := string(r.Data["url"])
		opts, err := redis.ParseClusterURL(strings.Replace(url, "+cluster", "", 1))
		if err != nil {
			t.Fatal(err)
		}
		if len(opts.Addrs) != RedisNodes || opts.Password != string(r.Data["password"]) || len(r.Data["password"]) < 32 {
			t.Fatalf("url %s: %d addrs, password %q", url, len(opts.Addrs), opts.Password)
		}
	})

	t.Run("a second run reuses the identities", func(t *testing.T) {
		var again bytes.Buffer
		if err := run(&again, Options{Namespace: "agtp-dev", Dir: dir}); err != nil {
			t.Fatal(err)
		}
		if again.String() != buf.String() {
			t.Fatal("a second run printed other Secrets")
		}
	})
}
