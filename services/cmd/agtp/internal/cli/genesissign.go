package cli

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/services/keyfile"
)

type genesisSignOptions struct {
	key, out string
	help     bool
}

func genesisSignFlags() (*flagSet, *genesisSignOptions) {
	o := &genesisSignOptions{}
	f := newFlagSet("agtp genesis sign", io.Discard)
	f.str(&o.key, []string{"key"}, "FILE", "the issuer's Ed25519 key (PKCS#8 PEM) (required)")
	f.str(&o.out, []string{"o", "out"}, "FILE", "write the signed Genesis here, - for stdout (default: rewrite GENESIS; stdout when GENESIS is -)")
	f.boolean(&o.help, []string{"h", "help"}, "show this help")
	return f, o
}

func runGenesisSign(args []string, env Env) int {
	const name = "sign"
	f, o := genesisSignFlags()
	pos, code, done := parseGenesisFlags(env, name, f, &o.help, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return genesisUsageError(env, name, fmt.Sprintf("want one GENESIS file, got %d arguments", len(pos)))
	}
	if o.key == "" {
		return genesisUsageError(env, name, "--key FILE is required: the issuer's key")
	}
	if o.out != "" && o.out != "-" && sameFile(o.out, o.key) {
		return genesisUsageError(env, name, "--out names the issuer key --key; give another file")
	}
	in := pos[0]
	data, err := readGenesisFile(in, env.Stdin)
	if err != nil {
		return genesisFail(env, name, err)
	}
	priv, err := keyfile.ReadEd25519(o.key)
	if err != nil {
		return genesisFail(env, name, fmt.Errorf("--key: %w", err))
	}
	pub, _ := priv.Public().(ed25519.PublicKey)
	var before struct {
		AgentID string `json:"agent_id"`
	}
	_ = json.Unmarshal(data, &before)

	g, err := genesis.ParseForSigning(data, pub)
	if err != nil {
		return invalidGenesis(env, name, displayName(in), err)
	}
	if !g.IssuerPublicKey.Equal(pub) {
		fmt.Fprintf(env.Stderr, "agtp genesis sign: --key %s is not the issuer of %s: issuer_public_key has fingerprint %s, the key %s\n",
			o.key, displayName(in), g.IssuerFingerprint(), genesis.Fingerprint(pub))
		fmt.Fprint(env.Stderr, "  hint: sign with the issuer's key, or delete issuer_public_key from the document to make --key its issuer (a new issuer is a new Agent-ID)\n")
		return ExitError
	}
	if err := g.Sign(priv); err != nil {
		return genesisFail(env, name, err)
	}
	out := o.out
	if out == "" {
		out = in
	}
	if err := writeGenesis(env, out, g); err != nil {
		return genesisFail(env, name, err)
	}
	if before.AgentID != "" && before.AgentID != g.AgentID {
		fmt.Fprintf(env.Stderr, "the Agent-ID changed: %s was %s\n", g.AgentID, before.AgentID)
	}
	if out == "-" {
		fmt.Fprintf(env.Stderr, "Agent-ID: %s\n", g.AgentID)
	} else {
		fmt.Fprintf(env.Stderr, "signed %s\n", out)
		fmt.Fprintln(env.Stdout, g.AgentID)
	}
	return ExitOK
}
