package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/testkit"
)

// escape is a terminal escape a hostile server might send: set the
// window title, then clear the screen.
const escape = "\x1b]0;owned\x07\x1b[2J"

// An issuer key named as --out is refused before anything is written:
// overwritten by the Genesis, the key that alone can sign the agent's
// Genesis again would be lost (`genesis cert` refuses the same mistake).
// The next tests: whatever a server wrote reaches the terminal escaped.
func TestGenesisNewRefusesOutOverTheIssuerKey(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	makeGenesis(t, dir, key) // creates the key
	before, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, "", false, newArgs(key, "--out", key)...)
	after, _ := os.ReadFile(key)
	if !bytes.Equal(before, after) {
		t.Fatalf("exit %d: the issuer key was overwritten; it now holds:\n%s", r.code, after)
	}
	if r.code == ExitOK {
		t.Fatalf("exit 0 writing the Genesis over the issuer key")
	}
}

func TestGenesisSignRefusesOutOverTheIssuerKey(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	g, _ := makeGenesis(t, dir, key)
	before, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, "", false, "genesis", "sign", "--key", key, "--out", key, g)
	after, _ := os.ReadFile(key)
	if !bytes.Equal(before, after) {
		t.Fatalf("exit %d: the issuer key was overwritten; it now holds:\n%s", r.code, after)
	}
	if r.code == ExitOK {
		t.Fatalf("exit 0 writing the Genesis over the issuer key")
	}
}

// audit verify prints the reason and explanation of an INSPECT refusal
// escaped: a JSON string may hold any control byte.
func TestAuditVerifyEscapesTheServersExplanation(t *testing.T) {
	sg := newSigning(t)
	good := buildChain(t, 2, sg.signer, nil)
	for _, tc := range []struct {
		name   string
		target string
	}{
		{"chain head refused", "chain_head"},
		{"record refused", "audit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := inspectHandler(good, 2, nil)
			srv := startServer(t, func(ctx context.Context, ci *transport.ConnInfo, req *agtp.Request) *agtp.Response {
				if strings.Contains(string(req.Body), `"target":"`+tc.target+`"`) {
					return agtp.NewErrorResponse(403, "forbidden"+escape, "no"+escape)
				}
				return inner(ctx, ci, req)
			})
			r := run(t, "", false, "audit", "verify", "--cacert", srv.ca, "--jwks", sg.jwksFile,
				"agtp://"+chainAgent+"@"+srv.TCPAddr().String())
			if r.code == ExitOK {
				t.Fatalf("exit 0\n%s", r.stdout)
			}
			if strings.Contains(r.stdout, "\x1b") || strings.Contains(r.stderr, "\x1b") {
				t.Fatalf("server-controlled escape printed raw:\nstdout %q\nstderr %q", r.stdout, r.stderr)
			}
		})
	}
}

// selfSigned writes a certificate whose subject CN and DNS name carry a
// terminal escape, as any server reached with --insecure may present.
func selfSigned(t *testing.T, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// -v promises that "a server cannot drive the terminal", the "* " notes
// with the server certificate's names included.
func TestVerboseEscapesTheServerCertificateNames(t *testing.T) {
	certFile, keyFile := selfSigned(t, "evil"+escape)
	s := startServerWith(t, "127.0.0.1:0", certFile, keyFile, certFile, echo)
	r := run(t, "", false, "-k", "-v", "QUERY", "agtp://"+s.TCPAddr().String()+"/")
	if r.code != ExitOK {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "\x1b") {
		t.Fatalf("server certificate name printed raw to stderr: %q", r.stderr)
	}
}

// --verify-attribution does not print the JWKS server's own status text.
func TestVerifyAttributionEscapesTheJWKSStatus(t *testing.T) {
	sg := newSigning(t)
	good := startServer(t, sg.handler(false))
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 404 " + escape + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		rw.Flush()
	}))
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	hs.StartTLS()
	defer hs.Close()
	r := run(t, "", false, "--cacert", good.ca, "--verify-attribution", "--jwks-url", hs.URL+"/.well-known/jwks.json", "QUERY", good.uri("/"))
	if r.code == ExitOK {
		t.Fatalf("exit 0: %s", r.stderr)
	}
	if strings.Contains(r.stderr, "\x1b") {
		t.Fatalf("JWKS server's status text printed raw to stderr: %q", r.stderr)
	}
}
