// Package cli is the `agtp` command, the curl of AGTP: it sends one
// request and prints the answer, and hosts subcommands (`agtp audit
// verify`, and later `agtp genesis ...`). The main package only wires
// the process to Run, so tests drive the command exactly as a shell
// does.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/agtpsuite/agtp/services/agtp"
)

// Exit codes. A response's status class decides the code of a request,
// so scripts can branch on it without parsing output.
const (
	ExitOK          = 0 // 2xx (including 261-263), or a subcommand that succeeded
	ExitError       = 1 // usage, connection, TLS, timeout, malformed answer: no status to report
	ExitVerify      = 2 // --verify-attribution failed, a Form 1a identity mismatch, a broken audit chain, or a Genesis that does not verify
	ExitRedirect    = 3 // 3xx
	ExitClientError = 4 // 4xx
	ExitServerError = 5 // 5xx
)

// Env is the process around the command.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// StdoutTTY reports whether Stdout is a terminal; JSON bodies are
	// then pretty-printed unless --raw.
	StdoutTTY bool
	// Getenv reads the environment, which the connection flags fall back
	// to (AGTP_CACERT, AGTP_CERT, AGTP_KEY, AGTP_AGENT_ID); os.Getenv
	// when nil.
	Getenv func(key string) string
}

// command is a subcommand: a lowercase first word.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, env Env) int
	// words are the command's second words, offered by shell completion.
	words []string
}

// commands lists the subcommands. Others (`genesis`) are added here by
// the issues that bring them.
var commands map[string]command

func init() {
	commands = map[string]command{
		"audit":       {"verify Attribution-Record chains (audit verify)", runAudit, []string{"verify"}},
		"genesis":     {"make, sign, verify and register Agent Genesis documents; issue Agent Certificates", runGenesis, []string{"new", "sign", "verify", "id", "register", "cert", "request-cert"}},
		"idempotency": {"resolve a request whose outcome is unknown (idempotency resolve)", runIdempotency, []string{"resolve"}},
		"completion":  {"print a shell completion script (bash, zsh or fish)", runCompletion, shells},
		"version":     {"print the version of agtp and of the protocol it speaks", runVersion, nil},
		"help":        {"show this help", func(_ context.Context, _ []string, env Env) int { fmt.Fprint(env.Stdout, usage()); return ExitOK }, nil},
	}
}

// commandOrder is the order commands are listed in help and completion.
var commandOrder = []string{"audit", "genesis", "idempotency", "completion", "version", "help"}

var subcommandWord = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// Run runs the agtp command with args (without the program name) and
// returns the process exit code.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, shortUsage)
		return ExitError
	}
	if args[0] == "--version" {
		return runVersion(ctx, args[1:], env)
	}
	if word := args[0]; subcommandWord.MatchString(word) {
		if cmd, ok := commands[word]; ok {
			return cmd.run(ctx, args[1:], env)
		}
		fmt.Fprintf(env.Stderr, "agtp: unknown command %q\n", word)
		if up := strings.ToUpper(word); agtp.ValidMethodToken(up) {
			fmt.Fprintf(env.Stderr, "  hint: methods are upper-case: agtp %s URI\n", up)
			fmt.Fprintf(env.Stderr, "  (to send a lower-case method on purpose, to see a server's 459, put a flag first: agtp -v %s URI)\n", word)
		}
		fmt.Fprint(env.Stderr, shortUsage)
		return ExitError
	}
	return runRequest(ctx, args, env)
}

const shortUsage = `usage: agtp [flags] METHOD URI
       agtp audit verify [flags] agtp://AGENT-ID@HOST[:PORT]
       agtp genesis new|sign|verify|id|register|cert [flags] ...
       agtp idempotency resolve [flags]
       agtp completion bash|zsh|fish
       agtp --version
Run 'agtp --help' for flags and examples.
`

func usage() string {
	var b strings.Builder
	b.WriteString(`agtp sends one AGTP request and prints the answer: the curl of AGTP.

usage: agtp [flags] METHOD URI
       agtp COMMAND [flags] ...

METHOD is an AGTP method (QUERY, DISCOVER, DESCRIBE, EXECUTE, ...).
URI is an agtp:// URI: agtp://HOST[:PORT]/PATH[?QUERY], agtp://AGENT-ID@HOST[:PORT]/PATH,
agtp://DOMAIN/agents/NAME, agtp://agtp.DOMAIN/agents/NAME. The port defaults to 4480.
In agtp://AGENT-ID@HOST the AGENT-ID names the agent addressed; the caller is --agent-id.

Flags (each given separately; they may come before or after METHOD URI):
`)
	fs, _ := requestFlags(io.Discard)
	b.WriteString(flagHelp(fs))
	b.WriteString(`
Commands:
`)
	for _, name := range commandOrder {
		if len(name) > 8 {
			// A long name goes on a line of its own, so the summaries
			// stay in one column.
			fmt.Fprintf(&b, "  %s\n  %-8s", name, "")
		} else {
			fmt.Fprintf(&b, "  %-8s", name)
		}
		fmt.Fprintf(&b, " %s\n", commands[name].summary)
	}
	b.WriteString(`
Examples:
  # The server manifest of the local suite (make run prints the CA path):
  agtp --cacert .state/ca.pem DISCOVER agtp://127.0.0.1:4480/

  # The same, showing the raw wire both ways:
  agtp --cacert .state/ca.pem -v DISCOVER agtp://127.0.0.1:4480/

  # A query as an agent, with a JSON body, over QUIC:
  agtp --cacert .state/ca.pem --quic --agent-id "$AGENT_ID" --scope documents:read \
       -d '{"parameters":{"intent":"find the Q3 report"}}' QUERY agtp://127.0.0.1:4480/documents

  # A body from a file, or from stdin:
  agtp --cacert .state/ca.pem -d @order.json --idempotency-key k-42 EXECUTE agtp://127.0.0.1:4480/orders
  jq -n '{parameters:{id:7}}' | agtp --cacert .state/ca.pem -d - QUERY agtp://127.0.0.1:4480/orders

  # An agent's identity document, checked against the agent the URI names:
  agtp --cacert .state/ca.pem DESCRIBE agtp://$AGENT_ID@127.0.0.1:4480/agents/$AGENT_ID

  # Verify the response's Attribution-Record against the server's JWKS:
  agtp --cacert .state/ca.pem --verify-attribution DISCOVER agtp://127.0.0.1:4480/

  # Walk and verify an agent's whole audit chain:
  agtp audit verify --cacert .state/ca.pem --cert agent.pem --key agent-key.pem \
       --agent-id "$AGENT_ID" agtp://$AGENT_ID@127.0.0.1:4480

  # As an agent proven by its Agent Certificate (agtp genesis cert): the server
  # takes the caller's Agent-ID from the certificate, so --agent-id is not needed:
  agtp genesis cert --key issuer.key --cert-out agent.pem --key-out agent-key.pem helper.json
  agtp --cacert .state/ca.pem --cert agent.pem --key agent-key.pem QUERY agtp://127.0.0.1:4480/documents

  # The same, with the connection set once in the environment:
  export AGTP_CACERT=.state/ca.pem AGTP_CERT=agent.pem AGTP_KEY=agent-key.pem
  agtp QUERY agtp://127.0.0.1:4480/documents

Environment (read when the flag is absent; a flag, even an empty one, wins):
  AGTP_CACERT     for --cacert
  AGTP_CERT       for --cert    (AGTP_CERT and AGTP_KEY are a pair: neither is
  AGTP_KEY        for --key      read when --cert or --key is given)
  AGTP_AGENT_ID   for --agent-id
  They apply to requests and to audit verify, not to the genesis commands, whose
  --key is the Genesis issuer key, nor to idempotency resolve (an operator's call).

Exit status:
  0  2xx answer (including 261-263)     3  3xx answer
  1  usage, connection or TLS error     4  4xx answer
  2  attribution, chain or Genesis      5  5xx answer
     check failed
`)
	return b.String()
}
