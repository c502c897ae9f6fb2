package cli

import (
	"bufio"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/testkit"
)

// certServer is an AGTP server over TLS that requires a client
// certificate, any, as a front door does before it decides what the
// certificate proves, and answers every request with what it saw.
type certServer struct {
	ln    net.Listener
	ca    string
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

// seen is a certServer's answer.
type seen struct {
	AgentIDHeader   *string `json:"agent_id_header"`
	CertFingerprint string  `json:"cert_fingerprint"`
	CertAgentID     string  `json:"cert_agent_id"`
}

func (s *certServer) uri(path string) string { return "agtp://" + s.ln.Addr().String() + path }

func startCertServer(t *testing.T) *certServer {
	t.Helper()
	pki := testkit.PKI(t)
	pair, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := agtp.ServerTLSConfig(pair)
	cfg.ClientAuth = tls.RequireAnyClientCert
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &certServer{ln: ln, ca: pki.CA()}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, conn)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer conn.Close()
				s.serve(conn.(*tls.Conn))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *certServer) serve(conn *tls.Conn) {
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if conn.Handshake() != nil {
		return
	}
	var v seen
	if peers := conn.ConnectionState().PeerCertificates; len(peers) > 0 {
		v.CertFingerprint = agentcert.Fingerprint(peers[0].Raw)
		v.CertAgentID, _ = agentcert.AgentID(peers[0])
	}
	br, bw := bufio.NewReader(conn), bufio.NewWriter(conn)
	for {
		req, err := agtp.ReadRequest(br, agtp.Limits{})
		if err != nil {
			return
		}
		answer := v
		if h, ok := req.Header.Lookup(agtp.HeaderAgentID); ok {
			answer.AgentIDHeader = &h
		}
		b, _ := json.Marshal(answer)
		if agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, b).Write(bw) != nil || bw.Flush() != nil {
			return
		}
	}
}

func decodeSeen(t *testing.T, r result) seen {
	t.Helper()
	if r.code != ExitOK {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var v seen
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("stdout is not the server's answer: %v\n%s", err, r.stdout)
	}
	return v
}

// readPEM returns the DER of the one PEM block of typ in path.
func readPEM(t *testing.T, path, typ string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != typ || len(strings.TrimSpace(string(rest))) != 0 {
		t.Fatalf("%s is not one PEM %s:\n%s", path, typ, b)
	}
	return blk.Bytes
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	cert, err := agentcert.Parse(readPEM(t, path, "CERTIFICATE"))
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// writeKey writes key as PKCS#8 PEM with mode.
func writeKey(t *testing.T, path string, key any, mode os.FileMode) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// agentFiles is an agent with a Genesis, its issuer key and an Agent
// Certificate issued by `genesis cert`.
type agentFiles struct {
	dir, issuerKey, genesis, id string
	cert, key                   string
}

func issueAgent(t *testing.T) agentFiles {
	t.Helper()
	dir := t.TempDir()
	a := agentFiles{dir: dir, issuerKey: filepath.Join(dir, "issuer.key"),
		cert: filepath.Join(dir, "agent.pem"), key: filepath.Join(dir, "agent-key.pem")}
	a.genesis, a.id = makeGenesis(t, dir, a.issuerKey)
	r := run(t, "", false, "genesis", "cert", "--key", a.issuerKey, "--cert-out", a.cert, "--key-out", a.key, a.genesis)
	if r.code != ExitOK {
		t.Fatalf("genesis cert: exit %d\n%s", r.code, r.stderr)
	}
	return a
}

func TestGenesisCertIssuesAnIssuerSignedCertificate(t *testing.T) {
	a := issueAgent(t)
	g := loadFile(t, a.genesis)
	cert := readCert(t, a.cert)

	id, err := agentcert.AgentID(cert)
	if err != nil || id != g.AgentID || id != a.id {
		t.Fatalf("AgentID = %q, %v; want the Genesis's %s", id, err, g.AgentID)
	}
	if err := agentcert.VerifyIssuerSigned(cert, g.IssuerPublicKey, time.Now()); err != nil {
		t.Fatalf("VerifyIssuerSigned with the Genesis issuer key: %v", err)
	}
	if got := cert.NotAfter.Sub(cert.NotBefore); got != agentcert.DefaultLifetime {
		t.Fatalf("valid for %s, want %s by default", got, agentcert.DefaultLifetime)
	}

	// The agent key: a new Ed25519 key, PKCS#8, mode 0600, the one the
	// certificate is for, and a pair TLS loads.
	fi, err := os.Stat(a.key)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("--key-out mode %v, want 0600", fi.Mode().Perm())
	}
	k, err := x509.ParsePKCS8PrivateKey(readPEM(t, a.key, "PRIVATE KEY"))
	if err != nil {
		t.Fatal(err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok || !priv.Public().(ed25519.PublicKey).Equal(cert.PublicKey) {
		t.Fatalf("--key-out holds a %T that is not the certificate's key", k)
	}
	if priv.Public().(ed25519.PublicKey).Equal(g.IssuerPublicKey) {
		t.Fatal("the agent key is the issuer key")
	}
	if _, err := tls.LoadX509KeyPair(a.cert, a.key); err != nil {
		t.Fatalf("the files are not a TLS pair: %v", err)
	}

	// Another certificate, for a week: the summary names what a
	// verifier or an operator looks for.
	certOut := filepath.Join(a.dir, "week.pem")
	r := run(t, "", false, "genesis", "cert", "--key", a.issuerKey, "--days", "7", "--cert-out", certOut,
		"--key-out", filepath.Join(a.dir, "week-key.pem"), a.genesis)
	if r.code != ExitOK {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	week := readCert(t, certOut)
	if got := week.NotAfter.Sub(week.NotBefore); got != 7*24*time.Hour {
		t.Fatalf("--days 7: valid for %s", got)
	}
	if strings.TrimSpace(r.stdout) != a.id {
		t.Fatalf("stdout %q, want the Agent-ID", r.stdout)
	}
	summary := strings.TrimSuffix(r.stderr, "\n")
	for _, want := range []string{a.id, "not_after " + week.NotAfter.UTC().Format(time.RFC3339), "sha256 " + agentcert.Fingerprint(week.Raw)} {
		if !strings.Contains(summary, want) || strings.Contains(summary, "\n") {
			t.Fatalf("stderr is not one line naming %q:\n%s", want, r.stderr)
		}
	}
}

func TestGenesisCertAgentKey(t *testing.T) {
	a := issueAgent(t)
	g := loadFile(t, a.genesis)
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	edFile, ecFile, rsaFile := filepath.Join(a.dir, "ed.key"), filepath.Join(a.dir, "ec.key"), filepath.Join(a.dir, "rsa.key")
	// 0640, so that a rewrite would show in the mode.
	writeKey(t, edFile, edKey, 0o640)
	writeKey(t, ecFile, ecKey, 0o640)
	writeKey(t, rsaFile, rsaKey, 0o600)
	notPEM := filepath.Join(a.dir, "not-pem.key")
	if err := os.WriteFile(notPEM, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		args    []string
		pub     crypto.PublicKey // the key the certificate must be for
		keyOut  string           // where the agent key must be (and be pub's)
		keep    string           // a file that must be left as it was
		wantErr string
	}{
		{"Ed25519, --key-out the same file", []string{"--agent-key", edFile, "--key-out", edFile}, edKey.Public(), edFile, edFile, ""},
		{"Ed25519, no --key-out", []string{"--agent-key", edFile}, edKey.Public(), edFile, edFile, ""},
		{"ECDSA, copied to --key-out", []string{"--agent-key", ecFile, "--key-out", filepath.Join(a.dir, "ec-copy.key")}, ecKey.Public(), filepath.Join(a.dir, "ec-copy.key"), ecFile, ""},
		{"RSA is refused", []string{"--agent-key", rsaFile, "--key-out", filepath.Join(a.dir, "x.key")}, nil, "", rsaFile, "an agent key is Ed25519 or ECDSA"},
		{"not PEM", []string{"--agent-key", notPEM}, nil, "", notPEM, "not a PEM PRIVATE KEY"},
		{"no such file", []string{"--agent-key", filepath.Join(a.dir, "missing.key")}, nil, "", "", "no such file"},
		{"the issuer key", []string{"--agent-key", a.issuerKey, "--key-out", filepath.Join(a.dir, "y.key")}, nil, "", a.issuerKey, "is the Genesis issuer key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before []byte
			var beforeMode os.FileMode
			if tc.keep != "" {
				if before, err = os.ReadFile(tc.keep); err != nil {
					t.Fatal(err)
				}
				fi, _ := os.Stat(tc.keep)
				beforeMode = fi.Mode()
			}
			certOut := filepath.Join(t.TempDir(), "agent.pem")
			args := append([]string{"genesis", "cert", "--key", a.issuerKey, "--cert-out", certOut}, tc.args...)
			r := run(t, "", false, append(args, a.genesis)...)
			if tc.keep != "" {
				after, _ := os.ReadFile(tc.keep)
				fi, _ := os.Stat(tc.keep)
				if string(after) != string(before) || fi.Mode() != beforeMode {
					t.Fatalf("%s was rewritten (mode %v, was %v)", tc.keep, fi.Mode(), beforeMode)
				}
			}
			if tc.wantErr != "" {
				if r.code != ExitError || !strings.Contains(r.stderr, tc.wantErr) {
					t.Fatalf("exit %d, stderr does not say %q:\n%s", r.code, tc.wantErr, r.stderr)
				}
				if _, err := os.Stat(certOut); err == nil {
					t.Fatal("a certificate was written")
				}
				return
			}
			if r.code != ExitOK {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			cert := readCert(t, certOut)
			if err := agentcert.VerifyIssuerSigned(cert, g.IssuerPublicKey, time.Now()); err != nil {
				t.Fatal(err)
			}
			if !tc.pub.(interface{ Equal(crypto.PublicKey) bool }).Equal(cert.PublicKey) {
				t.Fatalf("the certificate is for a %T that is not --agent-key", cert.PublicKey)
			}
			if _, err := tls.LoadX509KeyPair(certOut, tc.keyOut); err != nil {
				t.Fatalf("certificate and %s are not a pair: %v", tc.keyOut, err)
			}
			if !strings.Contains(r.stderr, "key "+tc.keyOut) {
				t.Fatalf("the summary does not name the key file %s:\n%s", tc.keyOut, r.stderr)
			}
		})
	}
}

func TestGenesisCertRefuses(t *testing.T) {
	a := issueAgent(t)
	otherKey := filepath.Join(a.dir, "other-issuer.key")
	other, _ := makeGenesis(t, a.dir, otherKey)
	tampered := filepath.Join(a.dir, "tampered.json")
	b, err := os.ReadFile(a.genesis)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tampered, b, 0o644); err != nil {
		t.Fatal(err)
	}
	editFile(t, tampered, func(m map[string]any) { m["owner"] = "Someone Else" })
	out := func(name string) string { return filepath.Join(a.dir, name) }
	base := func(extra ...string) []string {
		return append([]string{"genesis", "cert", "--key", a.issuerKey, "--cert-out", out("c.pem"), "--key-out", out("k.pem")}, extra...)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"another Genesis's issuer key", append(base(), other), ExitError, "is not the issuer of"},
		{"another issuer key for this Genesis", []string{"genesis", "cert", "--key", otherKey, "--cert-out", out("c.pem"), "--key-out", out("k.pem"), a.genesis}, ExitError, "is not the issuer of"},
		{"a Genesis that does not verify", append(base(), tampered), ExitVerify, genesis.ReasonHashMismatch},
		{"no GENESIS", base(), ExitError, "want one GENESIS file"},
		{"no --key", []string{"genesis", "cert", "--cert-out", out("c.pem"), "--key-out", out("k.pem"), a.genesis}, ExitError, "missing --key"},
		{"no --cert-out or --key-out", []string{"genesis", "cert", "--key", a.issuerKey, a.genesis}, ExitError, "missing --cert-out, --key-out"},
		{"--days 0", base("--days", "0", a.genesis), ExitError, "--days must be 1 to 90"},
		{"--days 91", base("--days", "91", a.genesis), ExitError, "--days must be 1 to 90"},
		{"--key-out the issuer key", []string{"genesis", "cert", "--key", a.issuerKey, "--cert-out", out("c.pem"), "--key-out", a.issuerKey, a.genesis}, ExitError, "--key-out names the issuer key"},
		{"--cert-out the Genesis", []string{"genesis", "cert", "--key", a.issuerKey, "--cert-out", a.genesis, "--key-out", out("k.pem"), a.genesis}, ExitError, "--cert-out names the Genesis"},
		{"--cert-out and --key-out one file", []string{"genesis", "cert", "--key", a.issuerKey, "--cert-out", out("c.pem"), "--key-out", out("c.pem"), a.genesis}, ExitError, "name the same file"},
		{"an issuer key that is not a key", []string{"genesis", "cert", "--key", tampered, "--cert-out", out("c.pem"), "--key-out", out("k.pem"), a.genesis}, ExitError, "--key: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			issuerBefore, _ := os.ReadFile(a.issuerKey)
			genesisBefore, _ := os.ReadFile(a.genesis)
			r := run(t, "", false, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d (want %d), stderr does not say %q:\n%s", r.code, tc.code, tc.want, r.stderr)
			}
			for _, name := range []string{"c.pem", "k.pem"} {
				if _, err := os.Stat(out(name)); err == nil {
					t.Fatalf("%s was written", name)
				}
			}
			if after, _ := os.ReadFile(a.issuerKey); string(after) != string(issuerBefore) {
				t.Fatal("the issuer key changed")
			}
			if after, _ := os.ReadFile(a.genesis); string(after) != string(genesisBefore) {
				t.Fatal("the Genesis changed")
			}
		})
	}
}

// TestGenesisCertProvesTheAgentOverTLS uses what `genesis cert` wrote
// the way an agent does: the request carries no Agent-ID, and the
// certificate the server receives names the agent and verifies against
// its Genesis.
func TestGenesisCertProvesTheAgentOverTLS(t *testing.T) {
	a := issueAgent(t)
	g := loadFile(t, a.genesis)
	srv := startCertServer(t)

	v := decodeSeen(t, run(t, "", false, "--cacert", srv.ca, "--cert", a.cert, "--key", a.key, "QUERY", srv.uri("/documents")))
	if v.AgentIDHeader != nil {
		t.Fatalf("sent Agent-ID %q; the certificate names the caller", *v.AgentIDHeader)
	}
	if v.CertAgentID != g.AgentID {
		t.Fatalf("the server's certificate names %q, want %s", v.CertAgentID, g.AgentID)
	}
	cert := readCert(t, a.cert)
	if v.CertFingerprint != agentcert.Fingerprint(cert.Raw) {
		t.Fatal("the server received another certificate")
	}
}
