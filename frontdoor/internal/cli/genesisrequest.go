package cli

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/demo"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// Reason tokens identitysvc answers IssueAgentCertificate with, which the
// CLI follows with a hint.
const (
	reasonAgentCANotConfigured = "agent-ca-not-configured"
	reasonIssuerSignature      = "issuer-signature-invalid"
	reasonLifetimeTooLong      = "certificate-lifetime-too-long"
	reasonAgentSuspended       = "agent-suspended"
	reasonAgentNotActivated    = "agent-not-activated"
	reasonAgentNotFound        = "agent-not-found"
)

// ---- request-cert ----

var requestCertCmd = genesisCmd{"request-cert",
	"agtp genesis request-cert --key ISSUER_KEY --cert-out FILE --key-out FILE [--agent-key FILE] [--days N] --cacert FILE --cert FILE --key-tls FILE [flags] GENESIS",
	`Asks identitysvc's agent CA for an Agent Certificate for the agent of GENESIS
(IssueAgentCertificate over gRPC with mutual TLS, like register). The agent key is a new
Ed25519 key written to --key-out (mode 0600), or --agent-key; a certificate request signed
by it proves possession, and a signature by the Genesis issuer key (--key) over
"agtp-agent-certificate-request", the Agent-ID and the request's SHA-256 proves the caller
speaks for the agent. --cert-out receives the certificate followed by the agent CA's chain
(PEM). Prints the Agent-ID on stdout and not_after and the certificate's SHA-256
fingerprint on stderr.`}

type genesisRequestOptions struct {
	key, certOut, keyOut, agentKey string
	days                           uint64
	grpcAddr                       string
	cacert, cert, keyTLS           string
	serverName                     string
	timeout                        time.Duration
	help                           bool
}

func genesisRequestFlags() (*flagSet, *genesisRequestOptions) {
	o := &genesisRequestOptions{timeout: 30 * time.Second}
	f := newFlagSet("agtp genesis request-cert", io.Discard)
	f.str(&o.key, []string{"key"}, "FILE", "the Genesis issuer's Ed25519 key (PKCS#8 PEM) (required)")
	f.str(&o.certOut, []string{"cert-out"}, "FILE", "write the certificate and the agent CA's chain here, PEM (required)")
	f.str(&o.keyOut, []string{"key-out"}, "FILE", "write the agent key here, PKCS#8 PEM, mode 0600 (required unless --agent-key)")
	f.str(&o.agentKey, []string{"agent-key"}, "FILE", "certify this agent key (PKCS#8 PEM, Ed25519 or ECDSA) instead of a new Ed25519 key")
	f.uint(&o.days, []string{"days"}, "N", "validity in days (default: identitysvc's, a day; more than its maximum is refused)")
	f.str(&o.grpcAddr, []string{"identity", "grpc"}, "HOST:PORT", "identitysvc's gRPC address (default "+DefaultIdentityGRPC+")")
	f.str(&o.cacert, []string{"cacert"}, "FILE", "the suite CA (PEM), e.g. .state/ca.pem (required)")
	f.str(&o.cert, []string{"cert"}, "FILE", "operator client certificate (PEM), e.g. .state/admin.pem (required)")
	f.str(&o.keyTLS, []string{"key-tls"}, "FILE", "private key of --cert, e.g. .state/admin-key.pem (required)")
	f.str(&o.serverName, []string{"server-name"}, "NAME", "name to check identitysvc's certificate for (default: the host)")
	f.duration(&o.timeout, []string{"timeout"}, "give up after this long (default 30s)")
	f.boolean(&o.help, []string{"h", "help"}, "show this help")
	return f, o
}

func requestCertUsage() string {
	f, _ := genesisRequestFlags()
	return "usage: " + requestCertCmd.synopsis + "\n\n" + requestCertCmd.about + "\n\nFlags:\n" + flagHelp(f) + `
Example (make run; the agent CA is .state/agent-ca.pem):
  agtp genesis request-cert --key issuer.key --cert-out helper.pem --key-out helper-key.pem \
       --cacert .state/ca.pem --cert .state/admin.pem --key-tls .state/admin-key.pem helper.json
`
}

func requestCertUsageError(env Env, msg string) int {
	fmt.Fprintf(env.Stderr, "agtp genesis request-cert: %s\n", msg)
	fmt.Fprintf(env.Stderr, "usage: %s\nRun 'agtp genesis request-cert --help' for more.\n", requestCertCmd.synopsis)
	return ExitError
}

func runGenesisRequestCert(ctx context.Context, args []string, env Env) int {
	const name = "request-cert"
	f, o := genesisRequestFlags()
	pos, err := f.parse(args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return requestCertUsageError(env, err.Error())
	}
	if err != nil || o.help {
		fmt.Fprint(env.Stdout, requestCertUsage())
		return ExitOK
	}
	if len(pos) != 1 {
		return requestCertUsageError(env, fmt.Sprintf("want one GENESIS file, got %d arguments", len(pos)))
	}
	var missing []string
	for _, m := range []struct{ flag, v string }{{"--key", o.key}, {"--cert-out", o.certOut}} {
		if m.v == "" {
			missing = append(missing, m.flag)
		}
	}
	if o.keyOut == "" && o.agentKey == "" {
		missing = append(missing, "--key-out")
	}
	if len(missing) > 0 {
		return requestCertUsageError(env, "missing "+strings.Join(missing, ", "))
	}
	if o.cacert == "" || o.cert == "" || o.keyTLS == "" {
		return requestCertUsageError(env, "identitysvc takes mutual TLS only: give --cacert, --cert and --key-tls "+
			"(for make run: --cacert .state/ca.pem --cert .state/admin.pem --key-tls .state/admin-key.pem)")
	}
	maxDays := uint64(agentcert.MaxLifetime / (24 * time.Hour))
	if o.days > maxDays {
		return requestCertUsageError(env, fmt.Sprintf("--days must be at most %d: an Agent Certificate is short-lived, renewed rather than kept", maxDays))
	}
	if o.timeout <= 0 {
		return requestCertUsageError(env, "--timeout must be positive")
	}
	in := pos[0]
	// The issuer key and the Genesis are what the certificate stands on;
	// writing over either would lose the agent.
	for _, out := range []struct{ flag, path string }{{"--cert-out", o.certOut}, {"--key-out", o.keyOut}} {
		if sameFile(out.path, o.key) {
			return requestCertUsageError(env, out.flag+" names the issuer key --key; give another file")
		}
		if in != "-" && sameFile(out.path, in) {
			return requestCertUsageError(env, out.flag+" names the Genesis; give another file")
		}
	}
	if sameFile(o.certOut, o.keyOut) || sameFile(o.certOut, o.agentKey) {
		return requestCertUsageError(env, "--cert-out names the agent key's file; give another file")
	}

	data, err := readGenesisFile(in, env.Stdin)
	if err != nil {
		return genesisFail(env, name, err)
	}
	g, err := genesis.Load(data)
	if err != nil {
		return invalidGenesis(env, name, displayName(in), err)
	}
	issuer, err := demo.ReadKey(o.key)
	if err != nil {
		return genesisFail(env, name, fmt.Errorf("--key: %w", err))
	}
	if pub, _ := issuer.Public().(ed25519.PublicKey); !g.IssuerPublicKey.Equal(pub) {
		fmt.Fprintf(env.Stderr, "agtp genesis request-cert: --key %s is not the issuer of %s: issuer_public_key has fingerprint %s, the key %s\n",
			o.key, displayName(in), g.IssuerFingerprint(), genesis.Fingerprint(pub))
		fmt.Fprint(env.Stderr, "  hint: identitysvc issues a certificate only on a request signed with the key that signed the Genesis\n")
		return ExitError
	}
	var agentKey crypto.Signer
	if o.agentKey != "" {
		if agentKey, err = readAgentKey(o.agentKey); err != nil {
			return genesisFail(env, name, fmt.Errorf("--agent-key: %w", err))
		}
		if pub, _ := agentKey.Public().(ed25519.PublicKey); pub.Equal(g.IssuerPublicKey) {
			return requestCertUsageError(env, "--agent-key is the Genesis issuer key; give the agent a key of its own (or omit --agent-key for a new one)")
		}
	} else if _, agentKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return genesisFail(env, name, fmt.Errorf("generate the agent key: %w", err))
	}
	csr, err := agentcert.CreateCSR(g.AgentID, agentKey)
	if err != nil {
		return genesisFail(env, name, err)
	}
	req := &identityv1.IssueAgentCertificateRequest{
		AgentId: g.AgentID, Csr: csr, IssuerSignature: agentcert.SignRequest(issuer, g.AgentID, csr),
		LifetimeSeconds: uint32(o.days * 24 * 3600),
	}

	tlsCfg, err := adminTLS(o.cacert, o.cert, o.keyTLS, o.serverName)
	if err != nil {
		return genesisFail(env, name, err)
	}
	addr := cmpOr(o.grpcAddr, DefaultIdentityGRPC)
	admin, err := newGRPCAdmin(addr, tlsCfg)
	if err != nil {
		return requestCertUsageError(env, err.Error())
	}
	defer admin.close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	res, err := admin.c.IssueAgentCertificate(ctx, req)
	if err != nil {
		return requestCertFailed(env, addr, g.AgentID, err)
	}
	cert, err := agentcert.Parse(res.GetCertificate())
	if err != nil {
		return genesisFail(env, name, fmt.Errorf("identitysvc answered with a certificate that does not parse: %w", err))
	}
	// Checked rather than trusted: a certificate for another key or
	// another agent would fail at the first handshake, far from here.
	if id, err := agentcert.AgentID(cert); err != nil || id != g.AgentID {
		return genesisFail(env, name, fmt.Errorf("identitysvc answered with a certificate for %q, not %s", id, g.AgentID))
	}
	if k, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(agentKey.Public()) {
		return genesisFail(env, name, errors.New("identitysvc answered with a certificate for another key"))
	}
	keyOut := o.keyOut
	if o.agentKey != "" && (keyOut == "" || sameFile(keyOut, o.agentKey)) {
		keyOut = "" // the key is already where it was read from
	}
	if err := writeCertAndKey(o.certOut, keyOut, append([][]byte{res.GetCertificate()}, res.GetCaChain()...), agentKey); err != nil {
		return genesisFail(env, name, err)
	}
	keyFile := cmpOr(keyOut, o.agentKey)
	fmt.Fprintf(env.Stderr, "issued Agent Certificate %s for %s by identitysvc's agent CA %q: not_after %s, sha256 %s; key %s\n",
		o.certOut, g.AgentID, cert.Issuer.CommonName, cert.NotAfter.UTC().Format(time.RFC3339), agentcert.Fingerprint(res.GetCertificate()), keyFile)
	fmt.Fprintln(env.Stdout, g.AgentID)
	return ExitOK
}

// writeCertAndKey writes a certificate chain (leaf first) as PEM, mode
// 0644, and, when keyPath is set, the private key as PKCS#8 PEM, mode
// 0600: the pair `agtp --cert/--key` presents. The key is written first,
// so a certificate on disk always has its key beside it.
func writeCertAndKey(certPath, keyPath string, chain [][]byte, key crypto.Signer) error {
	if keyPath != "" {
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return fmt.Errorf("encode the agent key: %w", err)
		}
		if err := demo.WriteFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return err
		}
	}
	var certs []byte
	for _, der := range chain {
		certs = append(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return demo.WriteFileAtomic(certPath, certs, 0o644)
}

// requestCertFailed explains a refused or failed request. An answer from
// identitysvc exits with its AGTP status class; no answer exits 1.
func requestCertFailed(env Env, where, agentID string, err error) int {
	code, reason, explanation, md := grpcerr.Reason(err)
	st, isStatus := status.FromError(err)
	if !isStatus || !fromService(st) {
		msg := err.Error()
		if isStatus {
			msg = st.Message()
		}
		fmt.Fprintf(env.Stderr, "agtp genesis request-cert: identitysvc at %s: %s\n", where, msg)
		if h := adminHint(msg, where); h != "" {
			fmt.Fprintf(env.Stderr, "  hint: %s\n", h)
		}
		return ExitError
	}
	agtpStatus := grpcerr.StatusFor(code)
	fmt.Fprintf(env.Stderr, "agtp genesis request-cert: %d %s: %s\n", agtpStatus, reason, explanation)
	hint := ""
	switch reason {
	case reasonAgentCANotConfigured:
		hint = "this identitysvc has no agent CA; an issuer-signed certificate needs none: agtp genesis cert --key ISSUER_KEY ..."
	case reasonLifetimeTooLong:
		hint = "ask for fewer --days, or omit --days for identitysvc's default (its maximum is " + md["max_lifetime_seconds"] + " s)"
	case reasonIssuerSignature:
		hint = "sign with the key that signed the Genesis registered as " + agentID
	case reasonAgentSuspended:
		hint = "REINSTATE the agent first"
	case reasonAgentNotActivated:
		hint = "ACTIVATE the agent first (or register it with --activate)"
	case reasonAgentNotFound:
		hint = "register the Genesis first: agtp genesis register --activate ..."
	}
	if hint != "" {
		fmt.Fprintf(env.Stderr, "  hint: %s\n", hint)
	}
	return exitForStatus(agtpStatus)
}
