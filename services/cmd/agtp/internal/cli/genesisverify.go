package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
)

func runGenesisVerify(args []string, env Env) int {
	const name = "verify"
	f, help := plainFlags(name)
	pos, code, done := parseGenesisFlags(env, name, f, help, args)
	if done {
		return code
	}
	if len(pos) == 0 {
		return genesisUsageError(env, name, "name a GENESIS file (or - for stdin)")
	}
	code = ExitOK
	for _, path := range pos {
		data, err := readGenesisFile(path, env.Stdin)
		if err != nil {
			code = max(code, genesisFail(env, name, err))
			continue
		}
		g, err := genesis.Load(data)
		if err != nil {
			fmt.Fprintf(env.Stdout, "%s: INVALID: %s\n", displayName(path), describeGenesisError(err))
			if h := genesisHint(err); h != "" {
				fmt.Fprintf(env.Stdout, "  hint: %s\n", h)
			}
			code = ExitVerify
			continue
		}
		printGenesis(env.Stdout, displayName(path)+": verified", g)
	}
	return code
}

// printGenesis summarises a verified Genesis.
func printGenesis(w io.Writer, title string, g *genesis.Genesis) {
	trust := fmt.Sprintf("tier %d, %s", g.TrustTier, cmpOr(string(g.EffectivePath()), "no verification path"))
	if tw := g.TrustWarning(); tw != "" {
		trust += ", Trust-Warning " + tw
	}
	fmt.Fprintf(w, "%s\n", title)
	fmt.Fprintf(w, "  agent-id:   %s\n", g.AgentID)
	fmt.Fprintf(w, "  owner:      %s\n", g.Owner)
	fmt.Fprintf(w, "  archetype:  %s\n", g.Archetype)
	fmt.Fprintf(w, "  zone:       %s\n", g.GovernanceZone)
	fmt.Fprintf(w, "  scope:      %s\n", strings.Join(g.Scope, ", "))
	fmt.Fprintf(w, "  trust:      %s\n", trust)
	if g.OrgLabel != "" {
		fmt.Fprintf(w, "  org-label:  %s\n", g.OrgLabel)
	}
	if g.OrgDomain != "" {
		fmt.Fprintf(w, "  org-domain: %s\n", g.OrgDomain)
	}
	fmt.Fprintf(w, "  issued-at:  %s\n", g.IssuedAt.Format(time.RFC3339))
	fmt.Fprintf(w, "  issuer:     %s (SHA-256 of issuer_public_key)\n", g.IssuerFingerprint())
}

func runGenesisID(args []string, env Env) int {
	const name = "id"
	f, help := plainFlags(name)
	pos, code, done := parseGenesisFlags(env, name, f, help, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return genesisUsageError(env, name, fmt.Sprintf("want one GENESIS file, got %d arguments", len(pos)))
	}
	data, err := readGenesisFile(pos[0], env.Stdin)
	if err != nil {
		return genesisFail(env, name, err)
	}
	id, err := genesis.ComputeAgentID(data)
	if err != nil {
		return invalidGenesis(env, name, displayName(pos[0]), err)
	}
	var doc struct {
		AgentID *string `json:"agent_id"`
	}
	_ = json.Unmarshal(data, &doc)
	switch {
	case doc.AgentID == nil:
		fmt.Fprintln(env.Stderr, "note: the document has no agent_id member; agtp genesis sign adds it")
	case *doc.AgentID != id:
		fmt.Fprintf(env.Stderr, "note: the agent_id member says %q, which is stale: the document changed after it was made; "+
			"sign it again (agtp genesis sign --key FILE GENESIS)\n", *doc.AgentID)
	}
	fmt.Fprintln(env.Stdout, id)
	return ExitOK
}
