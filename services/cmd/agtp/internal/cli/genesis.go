package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/demo"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/identitysvc/reasons"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jcs"
	"github.com/agtpsuite/agtp/services/keyfile"
)

// Defaults of the genesis subcommands.
const (
	// DefaultIssuerKey is where `genesis new` keeps the issuer key when
	// --key is not given.
	DefaultIssuerKey = "issuer.key"
	// DefaultIdentityGRPC is identitysvc's gRPC address in `make run`.
	DefaultIdentityGRPC = "127.0.0.1:7104"
)

// maxGenesisFile bounds what is read of a Genesis file: twice the
// document bound, so a pretty-printed file still reaches genesis.Parse,
// which names the real limit.
const maxGenesisFile = 2 * genesis.MaxSize

// maxAdminBody bounds a REST gateway answer.
const maxAdminBody = 1 << 20

func runGenesis(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, genesisShortUsage)
		return ExitError
	}
	switch args[0] {
	case "new":
		return runGenesisNew(args[1:], env)
	case "sign":
		return runGenesisSign(args[1:], env)
	case "verify":
		return runGenesisVerify(args[1:], env)
	case "id":
		return runGenesisID(args[1:], env)
	case "register":
		return runGenesisRegister(ctx, args[1:], env)
	case "request-cert":
		return runGenesisRequestCert(ctx, args[1:], env)
	case "cert":
		return runGenesisCert(args[1:], env)
	case "-h", "--help", "help":
		fmt.Fprint(env.Stdout, genesisUsage())
		return ExitOK
	}
	fmt.Fprintf(env.Stderr, "agtp genesis: unknown command %q\n", args[0])
	fmt.Fprint(env.Stderr, genesisShortUsage)
	return ExitError
}

const genesisShortUsage = `usage: agtp genesis new --owner OWNER --archetype KIND --zone ZONE --scope SCOPES [flags]
       agtp genesis sign --key FILE [--out FILE] GENESIS
       agtp genesis verify GENESIS ...
       agtp genesis id GENESIS
       agtp genesis register --cacert FILE --cert FILE --key-tls FILE [flags] GENESIS
       agtp genesis cert --key FILE --cert-out FILE --key-out FILE [flags] GENESIS
       agtp genesis request-cert --key FILE --cert-out FILE --key-out FILE --cacert FILE --cert FILE --key-tls FILE [flags] GENESIS
Run 'agtp genesis --help' for flags and examples.
`

// genesisCmd is one subcommand's flags and text, so its --help and the
// combined help are made from the same definitions.
type genesisCmd struct {
	name, synopsis, about string
}

var genesisCmds = []genesisCmd{
	{"new", "agtp genesis new --owner OWNER --archetype KIND --zone ZONE --scope SCOPES [flags]",
		`Creates an Ed25519 issuer key when --key names no file (PKCS#8 PEM, mode 0600), and a
Genesis signed with it. The Genesis goes to --out, or to stdout. The Agent-ID goes to
stdout when the Genesis goes to a file, else to stderr.`},
	{"sign", "agtp genesis sign --key FILE [--out FILE] GENESIS",
		`Signs an edited Genesis again: any signature is dropped, issuer_public_key is filled in
from --key when the document has none, agent_id is recomputed (an edit changes the
Agent-ID) and the document is signed. The file is rewritten in place unless --out
names another (--out - for stdout).`},
	{"verify", "agtp genesis verify GENESIS ...",
		`Checks every member, recomputes the Agent-ID and compares it with agent_id, and checks
the signature with issuer_public_key. A failure names the reason token and the member;
the exit status is then 2.`},
	{"id", "agtp genesis id GENESIS",
		`Prints the canonical Agent-ID: the SHA-256 of the document's JCS form without agent_id
and signature, recomputed, never read from agent_id. A stale agent_id is noted on stderr.`},
	{"register", "agtp genesis register --cacert FILE --cert FILE --key-tls FILE [flags] GENESIS",
		`Verifies the Genesis, then registers it with identitysvc's admin API over mutual TLS:
gRPC (RegisterGenesis, default 127.0.0.1:7104), or the REST gateway with --admin
(POST /v1/identity/agents). Prints the Agent-ID, name and status.`},
	{"cert", "agtp genesis cert --key ISSUER_KEY --cert-out FILE --key-out FILE [--agent-key FILE] [--days N] GENESIS",
		`Issues an issuer-signed Agent Certificate for the agent of GENESIS: an X.509 certificate
for the agent's key, naming its Agent-ID in the SAN URI agtp://AGENT-ID, signed with the
Genesis issuer key (--key must be the document's issuer_public_key). Presented with
--cert/--key, it proves the Agent-ID at the TLS handshake. The agent key is a new Ed25519
key written to --key-out (mode 0600), or --agent-key. Prints the Agent-ID on stdout and
not_after and the certificate's SHA-256 fingerprint on stderr.`},
	requestCertCmd,
}

func genesisCmdUsage(c genesisCmd) string {
	f := genesisFlagsFor(c.name)
	return "usage: " + c.synopsis + "\n\n" + c.about + "\n\nFlags:\n" + flagHelp(f)
}

func genesisUsage() string {
	var b strings.Builder
	b.WriteString(`agtp genesis makes, checks and registers Agent Genesis documents (core §6.5.2), and
issues the Agent Certificates that prove an agent's Agent-ID at the TLS handshake.

GENESIS is a file, or - for stdin.

`)
	for _, c := range genesisCmds {
		b.WriteString(genesisCmdUsage(c))
		b.WriteString("\n")
	}
	b.WriteString(`Examples:
  # A Tier 2 agent; the issuer key is created in issuer.key if missing:
  agtp genesis new --owner "Acme Corp" --archetype assistant --zone development \
       --scope documents:read,orders:read --label helper --key issuer.key --out helper.json

  # After editing helper.json, sign it again (the Agent-ID changes):
  agtp genesis sign --key issuer.key helper.json
  agtp genesis verify helper.json
  agtp genesis id helper.json

  # Register it with the suite make run started, activated at once:
  agtp genesis register --cacert .state/ca.pem --cert .state/admin.pem \
       --key-tls .state/admin-key.pem --activate helper.json

  # An Agent Certificate for it (valid a day), then a request proven by it:
  agtp genesis cert --key issuer.key --cert-out helper.pem --key-out helper-key.pem helper.json
  agtp --cacert .state/ca.pem --cert helper.pem --key helper-key.pem QUERY agtp://127.0.0.1:4480/documents

  # Or one from identitysvc's agent CA (make run's is .state/agent-ca.pem):
  agtp genesis request-cert --key issuer.key --cert-out helper.pem --key-out helper-key.pem \
       --cacert .state/ca.pem --cert .state/admin.pem --key-tls .state/admin-key.pem helper.json

Exit status: 0 done; 1 usage, file, key or connection error; 2 the Genesis is malformed,
invalid or does not verify (nothing is sent); register: 4 or 5 when identitysvc refuses
(the AGTP status class of its answer: 409 already registered, 422, 503, ...).
`)
	return b.String()
}

// genesisFlagsFor returns a subcommand's flag set (for help texts).
func genesisFlagsFor(name string) *flagSet {
	switch name {
	case "new":
		f, _ := genesisNewFlags()
		return f
	case "sign":
		f, _ := genesisSignFlags()
		return f
	case "register":
		f, _ := genesisRegisterFlags()
		return f
	case "cert":
		f, _ := genesisCertFlags()
		return f
	case "request-cert":
		f, _ := genesisRequestFlags()
		return f
	}
	f, _ := plainFlags(name)
	return f
}

// plainFlags is the flag set of a subcommand that has only -h.
func plainFlags(name string) (*flagSet, *bool) {
	help := false
	f := newFlagSet("agtp genesis "+name, io.Discard)
	f.boolean(&help, []string{"h", "help"}, "show this help")
	return f, &help
}

// parseGenesisFlags parses a subcommand's arguments. It returns done
// with the exit code when the command ends here (help or usage error).
func parseGenesisFlags(env Env, name string, f *flagSet, help *bool, args []string) (pos []string, code int, done bool) {
	pos, err := f.parse(args)
	if err == nil && !*help {
		return pos, 0, false
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(env.Stdout, genesisCmdUsage(cmdNamed(name)))
		return nil, ExitOK, true
	}
	return nil, genesisUsageError(env, name, err.Error()), true
}

func cmdNamed(name string) genesisCmd {
	for _, c := range genesisCmds {
		if c.name == name {
			return c
		}
	}
	panic("cli: no genesis command " + name)
}

func genesisUsageError(env Env, name, msg string) int {
	fmt.Fprintf(env.Stderr, "agtp genesis %s: %s\n", name, msg)
	fmt.Fprintf(env.Stderr, "usage: %s\nRun 'agtp genesis %s --help' for more.\n", cmdNamed(name).synopsis, name)
	return ExitError
}

func genesisFail(env Env, name string, err error) int {
	fmt.Fprintf(env.Stderr, "agtp genesis %s: %v\n", name, err)
	return ExitError
}

// invalidGenesis reports a document that is at fault: exit 2.
func invalidGenesis(env Env, name, file string, err error) int {
	fmt.Fprintf(env.Stderr, "agtp genesis %s: %s: %s\n", name, file, describeGenesisError(err))
	if h := genesisHint(err); h != "" {
		fmt.Fprintf(env.Stderr, "  hint: %s\n", h)
	}
	return ExitVerify
}

// describeGenesisError renders a *genesis.Error as "reason: member: why".
func describeGenesisError(err error) string {
	var ge *genesis.Error
	if !errors.As(err, &ge) {
		return err.Error()
	}
	s := ge.Reason
	if ge.Field != "" {
		s += ": " + ge.Field
	}
	return s + ": " + ge.Msg
}

func genesisHint(err error) string {
	var ge *genesis.Error
	if !errors.As(err, &ge) {
		return ""
	}
	switch ge.Reason {
	case genesis.ReasonHashMismatch:
		return "the document changed after it was signed; sign it again with the issuer's key " +
			"(agtp genesis sign --key FILE GENESIS), which gives it a new Agent-ID"
	case genesis.ReasonSignatureInvalid:
		return "sign it with the issuer's key: agtp genesis sign --key FILE GENESIS"
	}
	return ""
}

// readGenesisFile reads a Genesis from a file or stdin ("-"), without
// the surrounding white space a file ends with.
func readGenesisFile(path string, stdin io.Reader) ([]byte, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxGenesisFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxGenesisFile {
		return nil, fmt.Errorf("%s is larger than %d KiB; a Genesis is at most %d KiB", path, maxGenesisFile>>10, genesis.MaxSize>>10)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	return b, nil
}

// writeGenesis writes a signed Genesis, with a final newline, to path
// ("-" for stdout).
func writeGenesis(env Env, path string, g *genesis.Genesis) error {
	data := append(append([]byte(nil), g.Bytes()...), '\n')
	if path == "-" {
		_, err := env.Stdout.Write(data)
		return err
	}
	return demo.WriteFileAtomic(path, data, 0o644)
}

func displayName(path string) string {
	if path == "-" {
		return "stdin"
	}
	return path
}

// ---- new ----

type genesisNewOptions struct {
	owner, archetype, zone        string
	scopes                        list
	tier                          uint64
	path, orgDomain, label        string
	packageRef, issuedAt, logProf string
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

// ---- sign ----

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

// ---- verify ----

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

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ---- id ----

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

// ---- register ----

type genesisRegisterOptions struct {
	name            string
	activate        bool
	grpcAddr, admin string
	adminFlags
	help bool
}

func genesisRegisterFlags() (*flagSet, *genesisRegisterOptions) {
	o := &genesisRegisterOptions{adminFlags: adminFlags{timeout: 30 * time.Second}}
	f := newFlagSet("agtp genesis register", io.Discard)
	f.str(&o.name, []string{"name"}, "LABEL", "the agent's name in the registry (default: org_label, else agent- and 12 hex digits)")
	f.boolean(&o.activate, []string{"activate"}, "activate at once (else the agent stays pending until ACTIVATE)")
	f.str(&o.grpcAddr, []string{"grpc"}, "HOST:PORT", "identitysvc's gRPC address (default "+DefaultIdentityGRPC+")")
	f.str(&o.admin, []string{"admin"}, "URL", "use identitysvc's REST gateway instead, e.g. https://127.0.0.1:8104")
	o.adminFlags.define(f)
	f.boolean(&o.help, []string{"h", "help"}, "show this help")
	return f, o
}

// adminFlags are the flags of the mutual TLS connection to identitysvc's
// admin API (register, request-cert).
type adminFlags struct {
	cacert, cert, keyTLS string
	serverName           string
	timeout              time.Duration
}

func (o *adminFlags) define(f *flagSet) {
	f.str(&o.cacert, []string{"cacert"}, "FILE", "the suite CA (PEM), e.g. .state/ca.pem (required)")
	f.str(&o.cert, []string{"cert"}, "FILE", "operator client certificate (PEM), e.g. .state/admin.pem (required)")
	f.str(&o.keyTLS, []string{"key-tls"}, "FILE", "private key of --cert, e.g. .state/admin-key.pem (required)")
	f.str(&o.serverName, []string{"server-name"}, "NAME", "name to check identitysvc's certificate for (default: the host)")
	f.duration(&o.timeout, []string{"timeout"}, "give up after this long (default 30s)")
}

// tlsProblem and timeoutProblem return what is wrong with the flags, or "".
func (o *adminFlags) tlsProblem() string {
	if o.cacert == "" || o.cert == "" || o.keyTLS == "" {
		return "identitysvc takes mutual TLS only: give --cacert, --cert and --key-tls " +
			"(for make run: --cacert .state/ca.pem --cert .state/admin.pem --key-tls .state/admin-key.pem)"
	}
	return ""
}

func (o *adminFlags) timeoutProblem() string {
	if o.timeout <= 0 {
		return "--timeout must be positive"
	}
	return ""
}

func (o *adminFlags) tlsConfig() (*tls.Config, error) {
	return adminTLS(o.cacert, o.cert, o.keyTLS, o.serverName)
}

// identityAdmin is identitysvc's admin API over gRPC or the REST gateway.
// Failures are gRPC status errors either way, so both are read the same.
type identityAdmin interface {
	register(ctx context.Context, req *identityv1.RegisterGenesisRequest) (*identityv1.AgentRecord, error)
	resolve(ctx context.Context, agentID string) (*identityv1.AgentRecord, error)
	genesis(ctx context.Context, agentID string) ([]byte, error)
	close()
}

func runGenesisRegister(ctx context.Context, args []string, env Env) int {
	const name = "register"
	f, o := genesisRegisterFlags()
	pos, code, done := parseGenesisFlags(env, name, f, &o.help, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return genesisUsageError(env, name, fmt.Sprintf("want one GENESIS file, got %d arguments", len(pos)))
	}
	if o.grpcAddr != "" && o.admin != "" {
		return genesisUsageError(env, name, "--grpc and --admin are two ways to the same API; give one")
	}
	if msg := cmpOr(o.tlsProblem(), o.timeoutProblem()); msg != "" {
		return genesisUsageError(env, name, msg)
	}
	data, err := readGenesisFile(pos[0], env.Stdin)
	if err != nil {
		return genesisFail(env, name, err)
	}
	// Checked here first, so a broken document gets the same precise
	// answer as verify and never reaches the registry.
	g, err := genesis.Load(data)
	if err != nil {
		code := invalidGenesis(env, name, displayName(pos[0]), err)
		fmt.Fprintln(env.Stderr, "  (nothing was sent)")
		return code
	}
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return genesisFail(env, name, err)
	}
	var admin identityAdmin
	where := ""
	if o.admin != "" {
		admin, err = newRESTAdmin(o.admin, tlsCfg)
		where = o.admin
	} else {
		addr := cmpOr(o.grpcAddr, DefaultIdentityGRPC)
		admin, err = newGRPCAdmin(addr, tlsCfg)
		where = addr
	}
	if err != nil {
		return genesisUsageError(env, name, err.Error())
	}
	defer admin.close()

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rec, err := admin.register(ctx, &identityv1.RegisterGenesisRequest{GenesisJson: data, Name: o.name, Activate: o.activate})
	if err != nil {
		return registerFailed(ctx, env, admin, where, g, data, err)
	}
	fmt.Fprintf(env.Stdout, "registered %s\n", rec.GetAgentId())
	printRecord(env.Stdout, rec)
	if rec.GetStatus() == identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED {
		fmt.Fprintln(env.Stderr, "note: the agent is pending: ACTIVATE it, or register with --activate next time")
	}
	return ExitOK
}

func printRecord(w io.Writer, rec *identityv1.AgentRecord) {
	fmt.Fprintf(w, "  agent-id:  %s\n", rec.GetAgentId())
	fmt.Fprintf(w, "  name:      %s\n", rec.GetName())
	fmt.Fprintf(w, "  status:    %s\n", callerpolicy.StateName(rec.GetStatus()))
	fmt.Fprintf(w, "  trust:     tier %d, %s\n", rec.GetTrustTier(), cmpOr(rec.GetVerificationPath(), "no verification path"))
	fmt.Fprintf(w, "  issuer:    %s\n", rec.GetIssuerFingerprint())
}

// registerFailed explains a refused or failed registration. An answer
// from identitysvc exits with its AGTP status class; no answer exits 1.
func registerFailed(ctx context.Context, env Env, admin identityAdmin, where string, g *genesis.Genesis, sent []byte, err error) int {
	agtpStatus, reason, explanation, _, answered := serviceAnswer(env, "register", where, err)
	if !answered {
		return ExitError
	}
	id := g.AgentID
	say := func(format string, args ...any) {
		fmt.Fprintf(env.Stderr, "agtp genesis register: %d %s: %s\n", agtpStatus, reason, fmt.Sprintf(format, args...))
	}
	switch reason {
	case reasons.AgentIDCollision:
		// One reason covers both cases; what the registry holds tells
		// them apart.
		rec, rerr := admin.resolve(ctx, id)
		stored, gerr := admin.genesis(ctx, id)
		switch {
		case rerr != nil || gerr != nil:
			say("agent %s is already registered", id)
		case sameDocument(stored, sent):
			say("agent %s is already registered, from this same Genesis: name %s, status %s; nothing changed", id, rec.GetName(), callerpolicy.StateName(rec.GetStatus()))
		default:
			say("collision: the registry holds a different document under Agent-ID %s (name %s, status %s); nothing was registered",
				id, rec.GetName(), callerpolicy.StateName(rec.GetStatus()))
		}
	case reasons.AgentIDRetired:
		say("agent %s was retired, and a retired Agent-ID is never registered again (core §6.5.9)", id)
		fmt.Fprintln(env.Stderr, "  hint: make a new Genesis for a new agent: agtp genesis new ...")
	case reasons.AgentNameTaken:
		say("%s", explanation)
		fmt.Fprintln(env.Stderr, "  hint: choose another name with --name LABEL")
	case reasons.ExperimentalLabelRequired:
		say("%s", explanation)
		fmt.Fprintln(env.Stderr, "  hint: --name X-"+cmpOr(g.OrgLabel, "agent"))
	default:
		say("%s", explanation)
	}
	return exitForStatus(agtpStatus)
}

// serviceAnswer reads err, from a call to identitysvc at where, as its
// answer: the AGTP status, reason token, explanation and metadata. When
// identitysvc did not answer at all (no connection, TLS, deadline), it
// says so as `agtp genesis cmd`, with a hint, and returns answered false:
// the command exits 1.
func serviceAnswer(env Env, cmd, where string, err error) (agtpStatus int, reason, explanation string, md map[string]string, answered bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || !fromService(st) {
		msg := err.Error()
		if isStatus {
			msg = st.Message()
		}
		fmt.Fprintf(env.Stderr, "agtp genesis %s: identitysvc at %s: %s\n", cmd, where, msg)
		if h := adminHint(msg, where); h != "" {
			fmt.Fprintf(env.Stderr, "  hint: %s\n", h)
		}
		return 0, "", "", nil, false
	}
	code, reason, explanation, md := grpcerr.Reason(err)
	return grpcerr.StatusFor(code), reason, explanation, md, true
}

// fromService reports whether a status came from identitysvc, which
// always attaches an AGTP ErrorInfo; gRPC's own failures (no connection,
// TLS, deadline) carry none.
func fromService(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == grpcerr.Domain {
			return true
		}
	}
	return false
}

// sameDocument compares two Genesis documents by their canonical forms.
func sameDocument(a, b []byte) bool {
	ca, err := jcs.Canonicalize(a)
	if err != nil {
		return false
	}
	cb, err := jcs.Canonicalize(b)
	return err == nil && bytes.Equal(ca, cb)
}

func adminHint(msg, where string) string {
	switch {
	case strings.Contains(msg, "connection refused"):
		return "nothing is listening at " + where + ". Is the suite running (`make run`)? identitysvc listens on " +
			DefaultIdentityGRPC + " (gRPC) and https://127.0.0.1:8104 (REST)"
	case strings.Contains(msg, "unknown authority"):
		return "identitysvc's certificate is not signed by --cacert; use the suite CA (make run: .state/ca.pem)"
	case strings.Contains(msg, "certificate is valid for"), strings.Contains(msg, "doesn't contain any IP SANs"):
		return "connect by a name the certificate carries (127.0.0.1, localhost, identitysvc), or set --server-name"
	case strings.Contains(msg, "bad certificate"), strings.Contains(msg, "certificate required"), strings.Contains(msg, "unknown certificate"),
		strings.Contains(msg, "broken pipe"), strings.Contains(msg, "connection reset"), strings.Contains(msg, "server preface"):
		// With TLS 1.3 the server checks the client certificate after the
		// client's side of the handshake ended, so a refusal can also
		// surface as a closed connection.
		return "identitysvc closed the connection: it takes only client certificates issued by the suite CA " +
			"(make run: --cert .state/admin.pem --key-tls .state/admin-key.pem)"
	case strings.Contains(msg, "deadline"):
		return "no answer within --timeout; raise it, or look at identitysvc's logs"
	}
	return ""
}

// adminTLS is the operator's mutual TLS configuration: the suite CA,
// the client certificate, TLS 1.3 as between the suite's services. (The
// service kit's MTLS also does this, with certificate reloading a
// one-shot command does not need, and its Redis and OpenTelemetry
// dependencies the CLI does without.)
func adminTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--cacert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("--cacert %s holds no PEM certificate", caFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--cert/--key-tls: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		RootCAs:      pool,
		Certificates: []tls.Certificate{pair},
		ServerName:   serverName,
	}, nil
}

// grpcAdmin calls identitysvc's gRPC API.
type grpcAdmin struct {
	conn *grpc.ClientConn
	c    identityv1.IdentityServiceClient
}

func newGRPCAdmin(addr string, cfg *tls.Config) (*grpcAdmin, error) {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return nil, fmt.Errorf("--grpc %s: %w", addr, err)
	}
	return &grpcAdmin{conn: conn, c: identityv1.NewIdentityServiceClient(conn)}, nil
}

func (a *grpcAdmin) register(ctx context.Context, req *identityv1.RegisterGenesisRequest) (*identityv1.AgentRecord, error) {
	resp, err := a.c.RegisterGenesis(ctx, req)
	return resp.GetAgent(), err
}

func (a *grpcAdmin) resolve(ctx context.Context, id string) (*identityv1.AgentRecord, error) {
	resp, err := a.c.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{AgentId: id})
	return resp.GetAgent(), err
}

func (a *grpcAdmin) genesis(ctx context.Context, id string) ([]byte, error) {
	resp, err := a.c.GetGenesis(ctx, &identityv1.GetGenesisRequest{AgentId: id})
	return resp.GetGenesisJson(), err
}

func (a *grpcAdmin) close() { _ = a.conn.Close() }

// restAdmin calls the same API through identitysvc's REST gateway
// (grpc-gateway, proto/gateway.yaml); its error bodies are
// google.rpc.Status in JSON, turned back into gRPC status errors.
type restAdmin struct {
	base string
	hc   *http.Client
}

func newRESTAdmin(base string, cfg *tls.Config) (*restAdmin, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--admin %q: want the gateway's https:// URL, e.g. https://127.0.0.1:8104", base)
	}
	return &restAdmin{
		base: strings.TrimRight(base, "/"),
		hc:   &http.Client{Transport: &http.Transport{TLSClientConfig: cfg.Clone(), ForceAttemptHTTP2: true}},
	}, nil
}

func (a *restAdmin) call(ctx context.Context, method, path string, in, out proto.Message) error {
	var body io.Reader
	if in != nil {
		b, err := protojson.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminBody+1))
	if err != nil {
		return err
	}
	if len(b) > maxAdminBody {
		return fmt.Errorf("%s %s: the answer is larger than %d KiB", method, path, maxAdminBody>>10)
	}
	unmarshal := protojson.UnmarshalOptions{DiscardUnknown: true}
	if resp.StatusCode/100 == 2 {
		if err := unmarshal.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: the answer does not parse: %w", method, path, err)
		}
		return nil
	}
	var st spb.Status
	if err := unmarshal.Unmarshal(b, &st); err != nil || st.GetCode() == 0 {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, sanitize(b[:min(len(b), 512)]))
	}
	return status.ErrorProto(&st)
}

func (a *restAdmin) register(ctx context.Context, req *identityv1.RegisterGenesisRequest) (*identityv1.AgentRecord, error) {
	var resp identityv1.RegisterGenesisResponse
	err := a.call(ctx, http.MethodPost, "/v1/identity/agents", req, &resp)
	return resp.GetAgent(), err
}

func (a *restAdmin) resolve(ctx context.Context, id string) (*identityv1.AgentRecord, error) {
	var resp identityv1.ResolveAgentResponse
	err := a.call(ctx, http.MethodGet, "/v1/identity/agents/"+url.PathEscape(id), nil, &resp)
	return resp.GetAgent(), err
}

func (a *restAdmin) genesis(ctx context.Context, id string) ([]byte, error) {
	var resp identityv1.GetGenesisResponse
	err := a.call(ctx, http.MethodGet, "/v1/identity/agents/"+url.PathEscape(id)+"/genesis", nil, &resp)
	return resp.GetGenesisJson(), err
}

func (a *restAdmin) close() { a.hc.CloseIdleConnections() }
