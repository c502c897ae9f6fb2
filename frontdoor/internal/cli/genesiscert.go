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
)

// maxAgentKeyFile bounds what is read of an --agent-key file; a PEM
// private key is a few hundred bytes.
const maxAgentKeyFile = 64 << 10

const day = 24 * time.Hour

// ---- cert ----

type genesisCertOptions struct {
	key, certOut, keyOut, agentKey string
	days                           uint64
	help                           bool
}

func genesisCertFlags() (*flagSet, *genesisCertOptions) {
	o := &genesisCertOptions{days: uint64(agentcert.DefaultLifetime / day)}
	f := newFlagSet("agtp genesis cert", io.Discard)
	f.str(&o.key, []string{"key"}, "FILE", "the Genesis issuer's Ed25519 key (PKCS#8 PEM) (required)")
	f.str(&o.certOut, []string{"cert-out"}, "FILE", "write the certificate here, PEM (required)")
	f.str(&o.keyOut, []string{"key-out"}, "FILE", "write the agent key here, PKCS#8 PEM, mode 0600 (required unless --agent-key)")
	f.str(&o.agentKey, []string{"agent-key"}, "FILE", "certify this agent key (PKCS#8 PEM, Ed25519 or ECDSA) instead of a new Ed25519 key")
	f.uint(&o.days, []string{"days"}, "N", fmt.Sprintf("validity in days, 1 to %d (default 1)", agentcert.MaxLifetime/day))
	f.boolean(&o.help, []string{"h", "help"}, "show this help")
	return f, o
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
		return genesisUsageError(env, name, "missing "+strings.Join(missing, ", "))
	}
	if o.days < 1 || o.days > uint64(agentcert.MaxLifetime/day) {
		return genesisUsageError(env, name, fmt.Sprintf("--days must be 1 to %d: an Agent Certificate is short-lived, renewed rather than kept",
			agentcert.MaxLifetime/day))
	}
	in := pos[0]
	// The issuer key and the Genesis are what the certificate stands on;
	// writing over either would lose the agent.
	for _, out := range []struct{ flag, path string }{{"--cert-out", o.certOut}, {"--key-out", o.keyOut}} {
		if out.path == "" {
			continue
		}
		if sameFile(out.path, o.key) {
			return genesisUsageError(env, name, out.flag+" names the issuer key --key; give another file")
		}
		if in != "-" && sameFile(out.path, in) {
			return genesisUsageError(env, name, out.flag+" names the Genesis; give another file")
		}
	}
	if o.keyOut != "" && sameFile(o.certOut, o.keyOut) {
		return genesisUsageError(env, name, "--cert-out and --key-out name the same file")
	}
	if o.agentKey != "" && sameFile(o.certOut, o.agentKey) {
		return genesisUsageError(env, name, "--cert-out names the agent key --agent-key; give another file")
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
		fmt.Fprintf(env.Stderr, "agtp genesis cert: --key %s is not the issuer of %s: issuer_public_key has fingerprint %s, the key %s\n",
			o.key, displayName(in), g.IssuerFingerprint(), genesis.Fingerprint(pub))
		fmt.Fprint(env.Stderr, "  hint: only the key that signed the Genesis issues its Agent Certificates; a verifier checks the certificate against issuer_public_key\n")
		return ExitError
	}

	var agentKey crypto.Signer
	kind := "new Ed25519 key"
	if o.agentKey != "" {
		if agentKey, err = readAgentKey(o.agentKey); err != nil {
			return genesisFail(env, name, fmt.Errorf("--agent-key: %w", err))
		}
		if pub, _ := agentKey.Public().(ed25519.PublicKey); pub.Equal(g.IssuerPublicKey) {
			// The issuer key stays with the issuer: an agent that
			// presented it would spread the key that can mint its
			// identity to every host it runs on.
			return genesisUsageError(env, name, "--agent-key is the Genesis issuer key; give the agent a key of its own (or omit --agent-key for a new one)")
		}
		kind = "key " + o.agentKey
	} else {
		if _, agentKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return genesisFail(env, name, fmt.Errorf("generate the agent key: %w", err))
		}
	}
	der, err := agentcert.IssueByIssuer(agentcert.Request{
		AgentID: g.AgentID, PublicKey: agentKey.Public(), Lifetime: time.Duration(o.days) * day,
	}, issuer)
	if err != nil {
		return genesisFail(env, name, err)
	}
	cert, err := agentcert.Parse(der)
	if err != nil {
		return genesisFail(env, name, err)
	}

	if o.keyOut != "" && (o.agentKey == "" || !sameFile(o.keyOut, o.agentKey)) {
		keyDER, err := x509.MarshalPKCS8PrivateKey(agentKey)
		if err != nil {
			return genesisFail(env, name, fmt.Errorf("encode the agent key: %w", err))
		}
		if err := demo.WriteFileAtomic(o.keyOut, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
			return genesisFail(env, name, err)
		}
	}
	if err := demo.WriteFileAtomic(o.certOut, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return genesisFail(env, name, err)
	}
	keyFile := o.keyOut
	if keyFile == "" {
		keyFile = o.agentKey
	}
	fmt.Fprintf(env.Stderr, "issued Agent Certificate %s for %s: not_after %s, sha256 %s; key %s (%s)\n",
		o.certOut, g.AgentID, cert.NotAfter.UTC().Format(time.RFC3339), agentcert.Fingerprint(der), keyFile, kind)
	fmt.Fprintln(env.Stdout, g.AgentID)
	return ExitOK
}

// readAgentKey reads a PKCS#8 PEM private key of a kind an Agent
// Certificate certifies. (demo.ReadKey reads Genesis issuer keys, which
// are Ed25519 only.)
func readAgentKey(path string) (crypto.Signer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAgentKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxAgentKeyFile {
		return nil, fmt.Errorf("%s is larger than %d KiB, too large for a private key", path, maxAgentKeyFile>>10)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s is not a PEM PRIVATE KEY (PKCS#8)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
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
