package cli

import (
	"context"
	"crypto"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/reasons"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
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
	agentCertFlags
	grpcAddr string
	adminFlags
	help bool
}

func genesisRequestFlags() (*flagSet, *genesisRequestOptions) {
	o := &genesisRequestOptions{agentCertFlags: agentCertFlags{cmd: &requestCertSpec}, adminFlags: adminFlags{timeout: 30 * time.Second}}
	f := newFlagSet("agtp genesis request-cert", io.Discard)
	o.agentCertFlags.define(f)
	f.str(&o.grpcAddr, []string{"identity", "grpc"}, "HOST:PORT", "identitysvc's gRPC address (default "+DefaultIdentityGRPC+")")
	o.adminFlags.define(f)
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

var requestCertSpec = agentCertCmd{
	name:           "request-cert",
	certOutUsage:   "write the certificate and the agent CA's chain here, PEM (required)",
	daysUsage:      "validity in days (default: identitysvc's, a day; more than its maximum is refused)",
	minDays:        0, // --days 0 asks for identitysvc's default
	certIsKeyOut:   "--cert-out names the agent key's file; give another file",
	certIsAgentKey: "--cert-out names the agent key's file; give another file",
	issuerHint:     "identitysvc issues a certificate only on a request signed with the key that signed the Genesis",
	usageError:     func(env Env, msg string) int { return genesisUsageError(env, "request-cert", msg) },
}

func runGenesisRequestCert(ctx context.Context, args []string, env Env) int {
	const name = "request-cert"
	f, o := genesisRequestFlags()
	pos, err := f.parse(args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return genesisUsageError(env, "request-cert", err.Error())
	}
	if err != nil || o.help {
		fmt.Fprint(env.Stdout, requestCertUsage())
		return ExitOK
	}
	if len(pos) != 1 {
		return genesisUsageError(env, "request-cert", fmt.Sprintf("want one GENESIS file, got %d arguments", len(pos)))
	}
	in := pos[0]
	if code, done := o.check(env, in, o.tlsProblem, o.daysProblem, o.timeoutProblem); done {
		return code
	}
	l, code, done := o.load(env, in)
	if done {
		return code
	}
	g, agentKey := l.g, l.agentKey
	csr, err := agentcert.CreateCSR(g.AgentID, agentKey)
	if err != nil {
		return genesisFail(env, name, err)
	}
	req := &identityv1.IssueAgentCertificateRequest{
		AgentId: g.AgentID, Csr: csr, IssuerSignature: agentcert.SignRequest(l.issuer, g.AgentID, csr),
		LifetimeSeconds: uint32(o.days * 24 * 3600),
	}

	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return genesisFail(env, name, err)
	}
	addr := cmpOr(o.grpcAddr, DefaultIdentityGRPC)
	admin, err := newGRPCAdmin(addr, tlsCfg)
	if err != nil {
		return genesisUsageError(env, "request-cert", err.Error())
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
	keyOut := o.keyOutFile()
	if err := writeCertAndKey(o.certOut, keyOut, append([][]byte{res.GetCertificate()}, res.GetCaChain()...), agentKey); err != nil {
		return genesisFail(env, name, err)
	}
	keyFile := cmpOr(keyOut, o.agentKey)
	fmt.Fprintf(env.Stderr, "issued Agent Certificate %s for %s by identitysvc's agent CA %q: not_after %s, sha256 %s; key %s\n",
		o.certOut, g.AgentID, cert.Issuer.CommonName, cert.NotAfter.UTC().Format(time.RFC3339), agentcert.Fingerprint(res.GetCertificate()), keyFile)
	fmt.Fprintln(env.Stdout, g.AgentID)
	return ExitOK
}

// requestCertFailed explains a refused or failed request. An answer from
// identitysvc exits with its AGTP status class; no answer exits 1.
func requestCertFailed(env Env, where, agentID string, err error) int {
	agtpStatus, reason, explanation, md, answered := serviceAnswer(env, "request-cert", where, err)
	if !answered {
		return ExitError
	}
	fmt.Fprintf(env.Stderr, "agtp genesis request-cert: %d %s: %s\n", agtpStatus, reason, explanation)
	hint := ""
	switch reason {
	case reasons.AgentCANotConfigured:
		hint = "this identitysvc has no agent CA; an issuer-signed certificate needs none: agtp genesis cert --key ISSUER_KEY ..."
	case reasons.CertificateLifetimeTooLong:
		hint = "ask for fewer --days, or omit --days for identitysvc's default (its maximum is " + md["max_lifetime_seconds"] + " s)"
	case reasons.IssuerSignatureInvalid:
		hint = "sign with the key that signed the Genesis registered as " + agentID
	case callerpolicy.ReasonAgentSuspended:
		hint = "REINSTATE the agent first"
	case callerpolicy.ReasonAgentNotActivated:
		hint = "ACTIVATE the agent first (or register it with --activate)"
	case callerpolicy.ReasonAgentNotFound:
		hint = "register the Genesis first: agtp genesis register --activate ..."
	}
	if hint != "" {
		fmt.Fprintf(env.Stderr, "  hint: %s\n", hint)
	}
	return exitForStatus(agtpStatus)
}
