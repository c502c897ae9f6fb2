package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/agtpsuite/agtp/services/devpki"
)

// Options say where the PKI lives and what the Secrets are for.
type Options struct {
	Namespace string
	// Dir keeps the PKI and the Redis password between runs.
	Dir string
	// RedisURL overrides the URL of deploy/k8s/redis-cluster.
	RedisURL string
}

// Secret is a v1 Secret with only what these need.
type Secret struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   Meta              `json:"metadata"`
	Type       string            `json:"type"`
	Data       map[string][]byte `json:"data"` // base64 in JSON, as the API wants
}

// Meta is the Secret's metadata.
type Meta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Labels    map[string]string `json:"labels"`
}

// RedisNodes is the number of pods of deploy/k8s/redis-cluster.
const RedisNodes = 6

// Make creates (or reuses) the PKI in o.Dir and returns the Secrets.
func Make(o Options) ([]Secret, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("a PKI directory is required")
	}
	l, err := devpki.Ensure(o.Dir, devpki.ServiceNames...)
	if err != nil {
		return nil, err
	}
	read := func(path string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return b, nil
	}
	ca, err := read(l.CA())
	if err != nil {
		return nil, err
	}
	secret := func(name, typ string, data map[string][]byte) Secret {
		return Secret{APIVersion: "v1", Kind: "Secret", Type: typ, Data: data,
			Metadata: Meta{Name: name, Namespace: o.Namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "agtp"}}}
	}
	tlsSecret := func(secretName, certName string) (Secret, error) {
		crt, err := read(l.Cert(certName))
		if err != nil {
			return Secret{}, err
		}
		key, err := read(l.Key(certName))
		if err != nil {
			return Secret{}, err
		}
		return secret(secretName, "kubernetes.io/tls", map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca}), nil
	}

	var out []Secret
	// The services', then the operator's and the internal system's client
	// certificates: each names its identity as a SPIFFE ID.
	for _, name := range append(append([]string{}, devpki.ServiceNames...), devpki.Admin, devpki.InternalSystem) {
		s, err := tlsSecret("agtp-"+name+"-tls", name)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	public, err := tlsSecret("agtp-frontdoor-public-tls", devpki.AGTPServer)
	if err != nil {
		return nil, err
	}
	out = append(out, public)
	signing, err := read(l.SigningKey())
	if err != nil {
		return nil, err
	}
	out = append(out, secret("agtp-signing-key", "Opaque", map[string][]byte{"signing.pem": signing}))

	password, err := redisPassword(filepath.Join(o.Dir, "redis-password"))
	if err != nil {
		return nil, err
	}
	url := o.RedisURL
	if url == "" {
		url = ClusterURL(password)
	}
	out = append(out, secret("agtp-redis", "Opaque", map[string][]byte{"password": []byte(password), "url": []byte(url)}))
	return out, nil
}

// ClusterURL is the REDIS_URL of deploy/k8s/redis-cluster: every pod as a
// seed, by its stable name in the namespace.
func ClusterURL(password string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "redis+cluster://:%s@redis-cluster-0.redis-cluster-headless:6379", password)
	for i := 1; i < RedisNodes; i++ {
		sep := "&"
		if i == 1 {
			sep = "?"
		}
		fmt.Fprintf(&b, "%saddr=redis-cluster-%d.redis-cluster-headless:6379", sep, i)
	}
	return b.String()
}

// redisPassword reads the password kept in path, or makes and keeps one.
func redisPassword(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	var raw [24]byte
	_, _ = rand.Read(raw[:])
	p := hex.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(p+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keep redis password: %w", err)
	}
	return p, nil
}

// Write prints the Secrets as a YAML stream (JSON documents, which YAML
// reads as they are).
func Write(w io.Writer, list []Secret) error {
	for _, s := range list {
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "---\n%s\n", b); err != nil {
			return err
		}
	}
	return nil
}
