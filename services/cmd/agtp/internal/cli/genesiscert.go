package cli

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/demo"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/services/keyfile"
)

const day = 24 * time.Hour

// ---- cert ----

type genesisCertOptions struct {
	agentCertFlags
	help bool
}

func genesisCertFlags() (*flagSet, *genesisCertOptions) {
	o := &genesisCertOptions{agentCertFlags: agentCertFlags{cmd: &genesisCertSpec, days: uint64(agentcert.DefaultLifetime / day)}}
	f := newFlagSet("agtp genesis cert", io.Discard)
	o.define(f)
	f.boolean(&o.help, []string{"h", "help"}, "show this help")
	return f, o
}

var genesisCertSpec = agentCertCmd{
	name:           "cert",
	certOutUsage:   "write the certificate here, PEM (required)",
	daysUsage:      fmt.Sprintf("validity in days, 1 to %d (default 1)", agentcert.MaxLifetime/day),
	minDays:        1,
	certIsKeyOut:   "--cert-out and --key-out name the same file",
	certIsAgentKey: "--cert-out names the agent key --agent-key; give another file",
	issuerHint:     "only the key that signed the Genesis issues its Agent Certificates; a verifier checks the certificate against issuer_public_key",
	usageError:     func(env Env, msg string) int { return genesisUsageError(env, "cert", msg) },
}

func runGenesisCert(args []string, env Env) int {
	const name = "cert"
	f, o := genesisCertFlags()
	pos, code, done := parseGenesisFlags(env, name, f, &o.help, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return genesisUsageError(env, name, fmt.Sprintf("want one GENESIS file, got %d arguments", len(pos)))
	}
	in := pos[0]
	if code, done := o.check(env, in, o.daysProblem); done {
		return code
	}
	l, code, done := o.load(env, in)
	if done {
		return code
	}
	der, err := agentcert.IssueByIssuer(agentcert.Request{
		AgentID: l.g.AgentID, PublicKey: l.agentKey.Public(), Lifetime: time.Duration(o.days) * day,
	}, l.issuer)
	if err != nil {
		return genesisFail(env, name, err)
	}
	cert, err := agentcert.Parse(der)
	if err != nil {
		return genesisFail(env, name, err)
	}
	if err := writeCertAndKey(o.certOut, o.keyOutFile(), [][]byte{der}, l.agentKey); err != nil {
		return genesisFail(env, name, err)
	}
	fmt.Fprintf(env.Stderr, "issued Agent Certificate %s for %s: not_after %s, sha256 %s; key %s (%s)\n",
		o.certOut, l.g.AgentID, cert.NotAfter.UTC().Format(time.RFC3339), agentcert.Fingerprint(der), cmpOr(o.keyOut, o.agentKey), l.agentKeyKind)
	fmt.Fprintln(env.Stdout, l.g.AgentID)
	return ExitOK
}

// ---- shared by cert and request-cert ----

// agentCertCmd is what `genesis cert` and `genesis request-cert` say or
// check differently in the flags, checks and loading they share.
type agentCertCmd struct {
	name                    string // the subcommand, for messages
	certOutUsage, daysUsage string // help of --cert-out and --days
	// minDays is the least --days; 0 where 0 leaves the lifetime to
	// the service.
	minDays uint64
	// certIsKeyOut and certIsAgentKey refuse a --cert-out that names
	// the --key-out or the --agent-key file.
	certIsKeyOut, certIsAgentKey string
	// issuerHint follows the refusal of a --key that is not the
	// Genesis issuer.
	issuerHint string
	usageError func(env Env, msg string) int
}

// agentCertFlags are the flags of the Genesis, the issuer key and the
// agent's key and certificate that both commands take.
type agentCertFlags struct {
	cmd                            *agentCertCmd
	key, certOut, keyOut, agentKey string
	days                           uint64
}

func (o *agentCertFlags) define(f *flagSet) {
	f.str(&o.key, []string{"key"}, "FILE", "the Genesis issuer's Ed25519 key (PKCS#8 PEM) (required)")
	f.str(&o.certOut, []string{"cert-out"}, "FILE", o.cmd.certOutUsage)
	f.str(&o.keyOut, []string{"key-out"}, "FILE", "write the agent key here, PKCS#8 PEM, mode 0600 (required unless --agent-key)")
	f.str(&o.agentKey, []string{"agent-key"}, "FILE", "certify this agent key (PKCS#8 PEM, Ed25519 or ECDSA) instead of a new Ed25519 key")
	f.uint(&o.days, []string{"days"}, "N", o.cmd.daysUsage)
}

// check reports the first problem with the flags, for the GENESIS
// argument in, as the command's usage error: a missing flag, then what
// the command's own checks find (each returns a problem or ""; the
// --days bound, daysProblem, is one), then an output file that names an
// input. It returns done when the command ends here.
func (o *agentCertFlags) check(env Env, in string, own ...func() string) (code int, done bool) {
	problems := append(append([]func() string{o.missingProblem}, own...), func() string { return o.outputProblem(in) })
	for _, problem := range problems {
		if msg := problem(); msg != "" {
			return o.cmd.usageError(env, msg), true
		}
	}
	return 0, false
}

func (o *agentCertFlags) missingProblem() string {
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
		return "missing " + strings.Join(missing, ", ")
	}
	return ""
}

func (o *agentCertFlags) daysProblem() string {
	maxDays := uint64(agentcert.MaxLifetime / day)
	if o.days >= o.cmd.minDays && o.days <= maxDays {
		return ""
	}
	bound := fmt.Sprintf("at most %d", maxDays)
	if o.cmd.minDays > 0 {
		bound = fmt.Sprintf("%d to %d", o.cmd.minDays, maxDays)
	}
	return "--days must be " + bound + ": an Agent Certificate is short-lived, renewed rather than kept"
}

func (o *agentCertFlags) outputProblem(in string) string {
	// The issuer key and the Genesis are what the certificate stands on;
	// writing over either would lose the agent.
	for _, out := range []struct{ flag, path string }{{"--cert-out", o.certOut}, {"--key-out", o.keyOut}} {
		if sameFile(out.path, o.key) {
			return out.flag + " names the issuer key --key; give another file"
		}
		if in != "-" && sameFile(out.path, in) {
			return out.flag + " names the Genesis; give another file"
		}
	}
	if sameFile(o.certOut, o.keyOut) {
		return o.cmd.certIsKeyOut
	}
	if sameFile(o.certOut, o.agentKey) {
		return o.cmd.certIsAgentKey
	}
	return ""
}

// agentCertInputs are what an Agent Certificate is made from.
type agentCertInputs struct {
	g        *genesis.Genesis
	issuer   ed25519.PrivateKey
	agentKey crypto.Signer
	// agentKeyKind says where the agent key came from: "new Ed25519
	// key" or "key FILE".
	agentKeyKind string
}

// load reads the Genesis in, the issuer key, which must be the
// Genesis's issuer, and the agent key, --agent-key or a new Ed25519 key.
// It reports a failure as the command and returns done.
func (o *agentCertFlags) load(env Env, in string) (l agentCertInputs, code int, done bool) {
	name := o.cmd.name
	data, err := readGenesisFile(in, env.Stdin)
	if err != nil {
		return l, genesisFail(env, name, err), true
	}
	if l.g, err = genesis.Load(data); err != nil {
		return l, invalidGenesis(env, name, displayName(in), err), true
	}
	if l.issuer, err = keyfile.ReadEd25519(o.key); err != nil {
		return l, genesisFail(env, name, fmt.Errorf("--key: %w", err)), true
	}
	if pub, _ := l.issuer.Public().(ed25519.PublicKey); !l.g.IssuerPublicKey.Equal(pub) {
		fmt.Fprintf(env.Stderr, "agtp genesis %s: --key %s is not the issuer of %s: issuer_public_key has fingerprint %s, the key %s\n",
			name, o.key, displayName(in), l.g.IssuerFingerprint(), genesis.Fingerprint(pub))
		fmt.Fprintf(env.Stderr, "  hint: %s\n", o.cmd.issuerHint)
		return l, ExitError, true
	}
	if o.agentKey == "" {
		if _, l.agentKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return l, genesisFail(env, name, fmt.Errorf("generate the agent key: %w", err)), true
		}
		l.agentKeyKind = "new Ed25519 key"
		return l, 0, false
	}
	if l.agentKey, err = readAgentKey(o.agentKey); err != nil {
		return l, genesisFail(env, name, fmt.Errorf("--agent-key: %w", err)), true
	}
	if pub, _ := l.agentKey.Public().(ed25519.PublicKey); pub.Equal(l.g.IssuerPublicKey) {
		// The issuer key stays with the issuer: an agent that presented
		// it would spread the key that can mint its identity to every
		// host it runs on.
		return l, o.cmd.usageError(env, "--agent-key is the Genesis issuer key; give the agent a key of its own (or omit --agent-key for a new one)"), true
	}
	l.agentKeyKind = "key " + o.agentKey
	return l, 0, false
}

// keyOutFile is where the agent key is to be written: --key-out, unless
// it names the --agent-key file the key was read from; "" for nowhere.
func (o *agentCertFlags) keyOutFile() string {
	if sameFile(o.keyOut, o.agentKey) {
		return ""
	}
	return o.keyOut
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

// readAgentKey reads a PKCS#8 PEM private key of a kind an Agent
// Certificate certifies. (A Genesis issuer key is Ed25519 only:
// keyfile.ReadEd25519.)
func readAgentKey(path string) (crypto.Signer, error) {
	k, err := keyfile.ReadPrivate(path)
	if err != nil {
		return nil, err
	}
	switch k := k.(type) {
	case ed25519.PrivateKey:
		return k, nil
	case *ecdsa.PrivateKey:
		return k, nil
	}
	return nil, fmt.Errorf("%s holds a %T; an agent key is Ed25519 or ECDSA", path, k)
}

// sameFile reports whether a and b name one file: the same file on disk
// when both exist (through links too), else the same cleaned path.
func sameFile(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(fa, fb)
	}
	if errors.Is(errA, os.ErrNotExist) != errors.Is(errB, os.ErrNotExist) {
		return false
	}
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}
