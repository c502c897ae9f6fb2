package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agtpsuite/agtp/identitysvc/demo"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
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

  # One that takes work other agents DELEGATE to it, through one hop:
  agtp genesis new --owner "Acme Corp" --archetype assistant --zone development \
       --scope orders:read --label reviewer --delegation-permitted --max-delegation-depth 1 \
       --key issuer.key --out reviewer.json

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

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
