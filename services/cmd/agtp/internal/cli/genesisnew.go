package cli

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/demo"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/services/keyfile"
)

type genesisNewOptions struct {
	owner, archetype, zone        string
	scopes                        list
	tier                          uint64
	path, orgDomain, label        string
	packageRef, issuedAt, logProf string
	delegationPermitted           bool
	delegationDepth               string
	key, out                      string
	help                          bool
}

func genesisNewFlags() (*flagSet, *genesisNewOptions) {
	o := &genesisNewOptions{tier: genesis.TierOrgAsserted, key: DefaultIssuerKey}
	f := newFlagSet("agtp genesis new", io.Discard)
	f.str(&o.owner, []string{"owner"}, "OWNER", "owner: the accountable person or organisation (required)")
	f.str(&o.archetype, []string{"archetype"}, "KIND", "assistant, analyst, executor, orchestrator or monitor (required)")
	f.str(&o.zone, []string{"zone"}, "ZONE", "governance_zone, e.g. development or production (required)")
	f.list(&o.scopes, []string{"scope"}, "SCOPES", "declared scopes, comma-separated, e.g. documents:read,orders:* (required; repeatable)")
	f.uint(&o.tier, []string{"tier"}, "N", "trust_tier: 1 verified, 2 org-asserted, 3 experimental (default 2)")
	f.str(&o.path, []string{"path"}, "PATH", "verification_path: dns-anchored, log-anchored, hybrid or org-asserted (default org-asserted for tier 2)")
	f.str(&o.orgDomain, []string{"org-domain"}, "DOMAIN", "org_domain (required for dns-anchored and hybrid)")
	f.str(&o.label, []string{"label"}, "LABEL", "org_label: the agent's name under the organisation, e.g. helper")
	f.str(&o.packageRef, []string{"package-ref"}, "REF", "package_ref: the agent package this Genesis is for")
	f.str(&o.issuedAt, []string{"issued-at"}, "TIME", "issued_at as RFC 3339 (default now, to the second)")
	f.str(&o.logProf, []string{"log-proof"}, "JSON", "log_inclusion_proof: a JSON value or @FILE (required for log-anchored)")
	f.boolean(&o.delegationPermitted, []string{"delegation-permitted"},
		"delegation_permitted: the agent consents to run work a DELEGATE hands it (absent: it takes none; =false writes false)")
	f.str(&o.delegationDepth, []string{"max-delegation-depth"}, "N",
		fmt.Sprintf("max_delegation_depth: delegation hops the agent takes work through, 0 to %d (absent: no limit; a hop here is 1)", genesis.MaxDelegationDepthLimit))
	f.str(&o.key, []string{"key"}, "FILE", "issuer key, Ed25519 PKCS#8 PEM; created (mode 0600) when missing (default "+DefaultIssuerKey+")")
	f.str(&o.out, []string{"o", "out"}, "FILE", "write the Genesis here instead of stdout")
	f.boolean(&o.help, []string{"h", "help"}, "show this help")
	return f, o
}

// newFlagFor names the flag of `genesis new` that sets a member, so a
// refused value is reported as the flag the user typed.
var newFlagFor = map[string]string{
	genesis.FieldOwner: "--owner", genesis.FieldArchetype: "--archetype", genesis.FieldGovernanceZone: "--zone",
	genesis.FieldScope: "--scope", genesis.FieldTrustTier: "--tier", genesis.FieldVerificationPath: "--path",
	genesis.FieldOrgDomain: "--org-domain", genesis.FieldOrgLabel: "--label", genesis.FieldPackageRef: "--package-ref",
	genesis.FieldIssuedAt: "--issued-at", genesis.FieldLogInclusionProof: "--log-proof",
	genesis.FieldDelegationPermitted: "--delegation-permitted", genesis.FieldMaxDelegationDepth: "--max-delegation-depth",
}

func runGenesisNew(args []string, env Env) int {
	const name = "new"
	f, o := genesisNewFlags()
	pos, code, done := parseGenesisFlags(env, name, f, &o.help, args)
	if done {
		return code
	}
	if len(pos) != 0 {
		return genesisUsageError(env, name, fmt.Sprintf("unexpected argument %q (values go in flags)", pos[0]))
	}
	var scopes []string
	for _, s := range o.scopes {
		for tok := range strings.SplitSeq(s, ",") {
			if tok = strings.TrimSpace(tok); tok != "" {
				scopes = append(scopes, tok)
			}
		}
	}
	var missing []string
	for _, m := range []struct{ flag, v string }{{"--owner", o.owner}, {"--archetype", o.archetype}, {"--zone", o.zone}, {"--scope", strings.Join(scopes, "")}} {
		if m.v == "" {
			missing = append(missing, m.flag)
		}
	}
	if len(missing) > 0 {
		return genesisUsageError(env, name, "missing "+strings.Join(missing, ", "))
	}
	if o.key == "" {
		return genesisUsageError(env, name, "--key names the issuer key file")
	}
	if o.out != "" && o.out != "-" && sameFile(o.out, o.key) {
		// The key alone can sign this Genesis again; written over, it is
		// gone for good.
		return genesisUsageError(env, name, "--out names the issuer key --key; give another file")
	}
	t := genesis.Template{
		Owner: o.owner, Archetype: genesis.Archetype(o.archetype), GovernanceZone: o.zone, Scope: scopes,
		TrustTier: int(min(o.tier, 1<<16)), VerificationPath: genesis.VerificationPath(o.path),
		OrgDomain: o.orgDomain, OrgLabel: o.label, PackageRef: o.packageRef,
	}
	if t.VerificationPath == "" && t.TrustTier == genesis.TierOrgAsserted {
		t.VerificationPath = genesis.PathOrgAsserted
	}
	if o.issuedAt != "" {
		at, err := time.Parse(time.RFC3339, o.issuedAt)
		if err != nil {
			return genesisUsageError(env, name, fmt.Sprintf("--issued-at %q is not an RFC 3339 time (2026-01-15T09:00:00Z)", o.issuedAt))
		}
		t.IssuedAt = at
	}
	if o.logProf != "" {
		proof := []byte(o.logProf)
		if file, ok := strings.CutPrefix(o.logProf, "@"); ok {
			b, err := readGenesisFile(file, env.Stdin)
			if err != nil {
				return genesisFail(env, name, fmt.Errorf("--log-proof: %w", err))
			}
			proof = b
		}
		if !json.Valid(proof) {
			return genesisUsageError(env, name, "--log-proof is not JSON")
		}
		t.LogInclusionProof = proof
	}
	note, err := delegationMembers(f, o, &t)
	if err != nil {
		return genesisUsageError(env, name, err.Error())
	}

	priv, created, err := ensureIssuerKey(o.key)
	if err != nil {
		return genesisFail(env, name, err)
	}
	g, err := genesis.Create(t, priv)
	if err != nil {
		var ge *genesis.Error
		if errors.As(err, &ge) && newFlagFor[ge.Field] != "" {
			err = fmt.Errorf("%s: %s (%s)", newFlagFor[ge.Field], ge.Msg, ge.Reason)
		}
		if created {
			// A key nobody has used yet is not worth keeping next to a
			// refused Genesis.
			_ = os.Remove(o.key)
		}
		return genesisFail(env, name, err)
	}
	if note != "" {
		fmt.Fprintf(env.Stderr, "note: %s\n", note)
	}
	if created {
		fmt.Fprintf(env.Stderr, "created issuer key %s (Ed25519, PKCS#8 PEM, mode 0600); keep it to sign this Genesis again\n", o.key)
	}
	out := o.out
	if out == "" {
		out = "-"
	}
	if err := writeGenesis(env, out, g); err != nil {
		return genesisFail(env, name, err)
	}
	if out == "-" {
		fmt.Fprintf(env.Stderr, "Agent-ID: %s\n", g.AgentID)
	} else {
		fmt.Fprintf(env.Stderr, "wrote %s; issuer fingerprint %s\n", out, g.IssuerFingerprint())
		fmt.Fprintln(env.Stdout, g.AgentID)
	}
	return ExitOK
}

// delegationMembers puts the delegation consent the flags state into the
// Template: delegation_permitted when --delegation-permitted was given
// (true, or false when spelled =false), max_delegation_depth when
// --max-delegation-depth was. The Template has no typed fields for them,
// so they go in Extra, covered by the Agent-ID and the signature like
// the others; genesis.New validates them again. Without the flags the
// members are absent, and the agent takes no delegated work
// (docs/decisions.md#D-delegation-consent). The note, when not empty,
// says that the depth given leaves the agent without that consent.
func delegationMembers(f *flagSet, o *genesisNewOptions, t *genesis.Template) (string, error) {
	permittedSet, depthSet := f.isSet("delegation-permitted"), f.isSet("max-delegation-depth")
	if !permittedSet && !depthSet {
		return "", nil
	}
	if t.Extra == nil {
		t.Extra = map[string]any{}
	}
	if permittedSet {
		t.Extra[genesis.FieldDelegationPermitted] = o.delegationPermitted
	}
	if !depthSet {
		return "", nil
	}
	depth, err := strconv.Atoi(strings.TrimSpace(o.delegationDepth))
	if err != nil || depth < 0 || depth > genesis.MaxDelegationDepthLimit {
		return "", fmt.Errorf("--max-delegation-depth %q is not an integer from 0 to %d", o.delegationDepth, genesis.MaxDelegationDepthLimit)
	}
	// A JSON number, as genesis.Parse reads it back.
	t.Extra[genesis.FieldMaxDelegationDepth] = float64(depth)
	switch {
	case !o.delegationPermitted:
		return "max_delegation_depth alone gives no consent: without --delegation-permitted the agent takes no delegated work", nil
	case depth == 0:
		return "max_delegation_depth 0: the agent takes no delegated work (a hop here is depth 1)", nil
	}
	return "", nil
}

// ensureIssuerKey reads the issuer key at path, creating it when there is
// no file.
func ensureIssuerKey(path string) (ed25519.PrivateKey, bool, error) {
	k, err := keyfile.ReadEd25519(path)
	if err == nil {
		return k, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("issuer key: %w", err)
	}
	if k, err = demo.WriteNewKey(path); err != nil {
		return nil, false, fmt.Errorf("issuer key: %w", err)
	}
	return k, true, nil
}
