package cli

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/keyfile"
)

// readChain reads the PEM certificates of a file, in order.
func readChain(t *testing.T, path string) []*x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*x509.Certificate
	for blk, rest := pem.Decode(b); blk != nil; blk, rest = pem.Decode(rest) {
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func TestGenesisRequestCertAgainstIdentitysvc(t *testing.T) {
	s := startIdentity(t)
	dir := t.TempDir()
	issuerKey := filepath.Join(dir, "issuer.key")
	helper, helperID := makeGenesis(t, dir, issuerKey)
	if r := run(t, "", false, append(append([]string{"genesis", "register", "--grpc", s.grpcAddr, "--activate"}, s.tlsArgs()...), helper)...); r.code != ExitOK {
		t.Fatalf("register: exit %d\n%s", r.code, r.stderr)
	}
	agentRoots, err := keyfile.CertPool(s.pki.AgentCA())
	if err != nil {
		t.Fatal(err)
	}
	request := func(args ...string) result {
		t.Helper()
		return run(t, "", false, append(append([]string{"genesis", "request-cert", "--identity", s.grpcAddr, "--key", issuerKey}, s.tlsArgs()...), args...)...)
	}
	// issued checks what request-cert wrote: the certificate for key,
	// naming the agent and chained to the agent CA, then that CA.
	issued := func(t *testing.T, certOut string, key crypto.PublicKey, want time.Duration) {
		t.Helper()
		chain := readChain(t, certOut)
		if len(chain) != 2 || !chain[1].IsCA {
			t.Fatalf("want the certificate and the agent CA in %s, got %d certificates", certOut, len(chain))
		}
		leaf := chain[0]
		if err := agentcert.VerifyCA(leaf, chain[1:], agentRoots, time.Now()); err != nil {
			t.Fatalf("the certificate does not verify against the agent CA: %v", err)
		}
		if id, err := agentcert.AgentID(leaf); err != nil || id != helperID {
			t.Fatalf("the certificate names %q (%v), want %s", id, err, helperID)
		}
		if !leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(key) {
			t.Fatal("the certificate is not for the agent key")
		}
		if got := leaf.NotAfter.Sub(leaf.NotBefore); got != want {
			t.Fatalf("valid for %v, want %v", got, want)
		}
	}

	t.Run("a new agent key", func(t *testing.T) {
		certOut, keyOut := filepath.Join(dir, "helper.pem"), filepath.Join(dir, "helper-key.pem")
		r := request("--cert-out", certOut, "--key-out", keyOut, helper)
		if r.code != ExitOK || strings.TrimSpace(r.stdout) != helperID || !strings.Contains(r.stderr, "issued Agent Certificate "+certOut) {
			t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if info, err := os.Stat(keyOut); err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("the agent key must be mode 0600: %v %v", info.Mode(), err)
		}
		// The two files are the pair a client presents.
		pair, err := tls.LoadX509KeyPair(certOut, keyOut)
		if err != nil {
			t.Fatalf("the certificate and key are not a pair: %v", err)
		}
		issued(t, certOut, pair.PrivateKey.(crypto.Signer).Public(), agentcert.DefaultLifetime)
	})

	t.Run("an existing ECDSA agent key, one day", func(t *testing.T) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		agentKey := filepath.Join(dir, "ec-key.pem")
		der, _ := x509.MarshalPKCS8PrivateKey(key)
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
		if err := os.WriteFile(agentKey, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		certOut := filepath.Join(dir, "ec.pem")
		if r := request("--cert-out", certOut, "--agent-key", agentKey, "--days", "1", helper); r.code != ExitOK {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		issued(t, certOut, key.Public(), 24*time.Hour)
		if b, _ := os.ReadFile(agentKey); string(b) != string(keyPEM) {
			t.Fatal("--agent-key was rewritten")
		}
	})

	t.Run("the REST gateway route", func(t *testing.T) {
		cfg, err := adminTLS(s.pki.CA(), s.pki.Cert(devpki.Admin), s.pki.Key(devpki.Admin), "")
		if err != nil {
			t.Fatal(err)
		}
		rest, err := newRESTAdmin("https://"+s.httpAddr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer rest.close()
		issuer, err := keyfile.ReadEd25519(issuerKey)
		if err != nil {
			t.Fatal(err)
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		csr, err := agentcert.CreateCSR(helperID, key)
		if err != nil {
			t.Fatal(err)
		}
		var res identityv1.IssueAgentCertificateResponse
		err = rest.call(context.Background(), http.MethodPost, "/v1/identity/agents/"+helperID+"/certificates",
			&identityv1.IssueAgentCertificateRequest{Csr: csr, IssuerSignature: agentcert.SignRequest(issuer, helperID, csr)}, &res)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := agentcert.Parse(res.GetCertificate())
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := agentcert.AgentID(leaf); id != helperID || agentcert.VerifyCA(leaf, nil, agentRoots, time.Now()) != nil {
			t.Fatalf("the gateway's certificate names %q or does not verify", id)
		}
	})

	suspended, suspendedID := makeGenesis(t, dir, issuerKey, "--owner", "Paused Corp", "--label", "paused")
	if r := run(t, "", false, append(append([]string{"genesis", "register", "--grpc", s.grpcAddr, "--activate"}, s.tlsArgs()...), suspended)...); r.code != ExitOK {
		t.Fatalf("register: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := s.client.TransitionLifecycle(context.Background(), &identityv1.TransitionLifecycleRequest{
		AgentId: suspendedID, Transition: identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEACTIVATE, Reason: "test",
	}); err != nil {
		t.Fatal(err)
	}
	unregistered, _ := makeGenesis(t, dir, issuerKey, "--owner", "Nobody Corp", "--label", "nobody")
	// Another issuer's key, made by making its Genesis.
	makeGenesis(t, dir, filepath.Join(dir, "stranger.key"), "--owner", "Stranger Corp")

	for _, tc := range []struct {
		name string
		args []string
		code int
		say  []string
	}{
		{"more days than identitysvc allows", []string{"--days", "2", helper}, ExitClientError,
			[]string{"400 certificate-lifetime-too-long", "its maximum is 86400 s"}},
		{"a suspended agent", []string{suspended}, ExitClientError, []string{"422 agent-suspended", "REINSTATE"}},
		{"an unregistered agent", []string{unregistered}, ExitClientError, []string{"404 agent-not-found", "agtp genesis register"}},
		{"another issuer's key", []string{"--key", filepath.Join(dir, "stranger.key"), helper}, ExitError, []string{"is not the issuer of"}},
		{"no output file", []string{"--cert-out", "", helper}, ExitError, []string{"missing --cert-out"}},
		{"the issuer key as output", []string{"--cert-out", issuerKey, helper}, ExitError, []string{"names the issuer key"}},
		{"more days than the profile allows", []string{"--days", "91", helper}, ExitError, []string{"--days must be at most 90"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certOut := filepath.Join(t.TempDir(), "cert.pem")
			r := request(append([]string{"--cert-out", certOut, "--key-out", filepath.Join(t.TempDir(), "key.pem")}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, say := range tc.say {
				if !strings.Contains(r.stderr, say) {
					t.Errorf("stderr does not say %q:\n%s", say, r.stderr)
				}
			}
			if _, err := os.Stat(certOut); err == nil {
				t.Error("a refused request wrote a certificate")
			}
		})
	}

	if r := run(t, "", false, "genesis", "request-cert", "--help"); r.code != ExitOK || !strings.Contains(r.stdout, "--key-tls") || !strings.Contains(r.stdout, "agtp-agent-certificate-request") {
		t.Fatalf("--help: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
