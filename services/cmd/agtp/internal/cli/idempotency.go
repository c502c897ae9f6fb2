package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/idempotency"
)

// Defaults of the idempotency subcommands.
const (
	// DefaultPolicyGRPC is policysvc's gRPC address in `make run`.
	DefaultPolicyGRPC = "127.0.0.1:7102"
	// DefaultPolicyREST is policysvc's REST gateway in `make run`.
	DefaultPolicyREST = "https://127.0.0.1:8102"
)

// agpKeyPrefix is the namespace the front door keeps AGP clients'
// Idempotency-Keys in (docs/agp.md).
const agpKeyPrefix = "agp:"

func runIdempotency(ctx context.Context, args []string, env Env) int {
	if len(args) > 0 && args[0] == "resolve" {
		return runIdempotencyResolve(ctx, args[1:], env)
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(env.Stdout, idempotencyUsage())
		return ExitOK
	}
	if len(args) > 0 {
		fmt.Fprintf(env.Stderr, "agtp idempotency: unknown command %q\n", args[0])
	}
	fmt.Fprint(env.Stderr, idempotencyShortUsage)
	return ExitError
}

const idempotencySynopsis = "agtp idempotency resolve --agent-id ID --idempotency-key KEY --release|--applied --cacert FILE --cert FILE --key-tls FILE [flags]"

const idempotencyShortUsage = "usage: " + idempotencySynopsis + "\nRun 'agtp idempotency --help' for flags and examples.\n"

type resolveOptions struct {
	agentID, key, note string
	agp                bool
	release, applied   bool
	grpcAddr, admin    string
	adminFlags
	help bool
}

func resolveFlags() (*flagSet, *resolveOptions) {
	o := &resolveOptions{adminFlags: adminFlags{timeout: 30 * time.Second}}
	f := newFlagSet("agtp idempotency resolve", io.Discard)
	f.str(&o.agentID, []string{"agent-id"}, "ID", "the Agent-ID that sent the request (required)")
	f.str(&o.key, []string{"idempotency-key"}, "KEY", "the Idempotency-Key it sent (required)")
	f.boolean(&o.agp, []string{"agp"}, "the request came through the AGP binding (its key is kept as agp:KEY)")
	f.boolean(&o.release, []string{"release"}, "the request had no effect, or a second run is wanted: free the key so a retry runs it")
	f.boolean(&o.applied, []string{"applied"}, "the request took effect: keep refusing retries, as applied")
	f.str(&o.note, []string{"note"}, "TEXT", "why, for policysvc's log (at most 1024 bytes)")
	f.str(&o.grpcAddr, []string{"grpc"}, "HOST:PORT", "policysvc's gRPC address (default "+DefaultPolicyGRPC+")")
	f.str(&o.admin, []string{"admin"}, "URL", "use policysvc's REST gateway instead, e.g. "+DefaultPolicyREST)
	// The operator's mutual TLS flags, as for agtp genesis register, with
	// policysvc as the peer.
	f.str(&o.cacert, []string{"cacert"}, "FILE", "the suite CA (PEM), e.g. .state/ca.pem (required)")
	f.str(&o.cert, []string{"cert"}, "FILE", "operator client certificate (PEM), e.g. .state/admin.pem (required)")
	f.str(&o.keyTLS, []string{"key-tls"}, "FILE", "private key of --cert, e.g. .state/admin-key.pem (required)")
	f.str(&o.serverName, []string{"server-name"}, "NAME", "name to check policysvc's certificate for (default: the host)")
	f.duration(&o.timeout, []string{"timeout"}, "give up after this long (default 30s)")
	f.boolean(&o.help, []string{"h", "help"}, "show this help")
	return f, o
}

func idempotencyUsage() string {
	f, _ := resolveFlags()
	return `usage: ` + idempotencySynopsis + `

Resolves a request whose outcome is unknown. When a non-idempotent request ran, or
may have run, and its outcome could not be recorded (its Attribution-Record could not
be stored, its handler timed out or failed after it was called), the front door does
not run it again: a retry with the same Idempotency-Key is answered 409
idempotency-outcome-unknown. Find out whether it took effect, then tell policysvc:

  --release   it had no effect (or a second run is wanted): the next retry runs it
  --applied   it took effect: retries keep being refused (409 idempotency-outcome-applied)

The front door logs each unknown outcome with the agent_id and idempotency_key to give
here. The call goes to policysvc's admin API over mutual TLS: gRPC
(ResolveIdempotencyOutcome, default ` + DefaultPolicyGRPC + `), or the REST gateway with --admin
(POST /v1/policy/agents/{agent_id}/idempotency:resolve).

Flags:
` + flagHelp(f) + `
Examples:
  # The order was not created: let the agent's retry run.
  agtp idempotency resolve --cacert .state/ca.pem --cert .state/admin.pem \
       --key-tls .state/admin-key.pem --agent-id "$AGENT_ID" --idempotency-key order-42 \
       --release --note "no order in the ledger"

  # The payment went through: keep refusing the retry.
  agtp idempotency resolve --cacert .state/ca.pem --cert .state/admin.pem \
       --key-tls .state/admin-key.pem --agent-id "$AGENT_ID" --idempotency-key pay-7 --applied

Exit status: 0 resolved; 1 usage, file or connection error; 4 when policysvc refuses
(404 no such key, 409 the key's outcome is not unknown: still running, or stored).
`
}

func resolveUsageError(env Env, msg string) int {
	fmt.Fprintf(env.Stderr, "agtp idempotency resolve: %s\n", msg)
	fmt.Fprintf(env.Stderr, "usage: %s\nRun 'agtp idempotency --help' for more.\n", idempotencySynopsis)
	return ExitError
}

func runIdempotencyResolve(ctx context.Context, args []string, env Env) int {
	f, o := resolveFlags()
	pos, err := f.parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp) || err == nil && o.help:
		fmt.Fprint(env.Stdout, idempotencyUsage())
		return ExitOK
	case err != nil:
		return resolveUsageError(env, err.Error())
	case len(pos) > 0:
		return resolveUsageError(env, fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	key := o.key
	if o.agp {
		key = agpKeyPrefix + key
	}
	var resolution policyv1.IdempotencyResolution
	switch {
	case o.release == o.applied:
		return resolveUsageError(env, "say what became of the request: --release (no effect) or --applied (it took effect)")
	case o.release:
		resolution = policyv1.IdempotencyResolution_IDEMPOTENCY_RESOLUTION_RELEASE
	default:
		resolution = policyv1.IdempotencyResolution_IDEMPOTENCY_RESOLUTION_APPLIED
	}
	switch {
	case o.agentID == "":
		return resolveUsageError(env, "--agent-id is required: the agent that sent the request")
	case o.key == "":
		return resolveUsageError(env, "--idempotency-key is required: the key the request was sent with")
	case !idempotency.ValidKey(key):
		return resolveUsageError(env, "--idempotency-key must be 1-255 printable ASCII characters")
	case o.grpcAddr != "" && o.admin != "":
		return resolveUsageError(env, "--grpc and --admin are two ways to the same API; give one")
	case o.cacert == "" || o.cert == "" || o.keyTLS == "":
		return resolveUsageError(env, "policysvc takes mutual TLS only: give --cacert, --cert and --key-tls "+
			"(for make run: --cacert .state/ca.pem --cert .state/admin.pem --key-tls .state/admin-key.pem)")
	}
	if msg := o.timeoutProblem(); msg != "" {
		return resolveUsageError(env, msg)
	}
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		fmt.Fprintf(env.Stderr, "agtp idempotency resolve: %v\n", err)
		return ExitError
	}
	req := &policyv1.ResolveIdempotencyOutcomeRequest{AgentId: o.agentID, IdempotencyKey: key, Resolution: resolution, Note: o.note}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var out *policyv1.ResolveIdempotencyOutcomeResponse
	where := cmpOr(o.grpcAddr, DefaultPolicyGRPC)
	if o.admin != "" {
		where = o.admin
		if u, perr := url.Parse(o.admin); perr != nil || u.Scheme != "https" || u.Host == "" {
			return resolveUsageError(env, fmt.Sprintf("--admin %q: want the gateway's https:// URL, e.g. %s", o.admin, DefaultPolicyREST))
		}
		admin, aerr := newRESTAdmin(o.admin, tlsCfg)
		if aerr != nil {
			return resolveUsageError(env, aerr.Error())
		}
		defer admin.close()
		out = &policyv1.ResolveIdempotencyOutcomeResponse{}
		err = admin.call(ctx, http.MethodPost, "/v1/policy/agents/"+url.PathEscape(o.agentID)+"/idempotency:resolve", req, out)
	} else {
		cfg := tlsCfg.Clone()
		cfg.NextProtos = []string{"h2"}
		conn, cerr := grpc.NewClient(where, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if cerr != nil {
			return resolveUsageError(env, fmt.Sprintf("--grpc %s: %v", where, cerr))
		}
		defer conn.Close()
		out, err = policyv1.NewPolicyServiceClient(conn).ResolveIdempotencyOutcome(ctx, req)
	}
	if err != nil {
		return resolveFailed(env, where, o, err)
	}
	fmt.Fprintf(env.Stdout, "resolved: agent %s, Idempotency-Key %q\n", o.agentID, key)
	fmt.Fprintf(env.Stdout, "  was:  %s\n", slotStateWord(out.GetPreviousState()))
	if resolution == policyv1.IdempotencyResolution_IDEMPOTENCY_RESOLUTION_RELEASE {
		fmt.Fprintln(env.Stdout, "  now:  free; the agent's next request with this key runs")
	} else {
		fmt.Fprintln(env.Stdout, "  now:  applied; retries with this key are refused (409 idempotency-outcome-applied)")
	}
	return ExitOK
}

// resolveFailed explains a refused or failed resolution: an answer from
// policysvc exits with its AGTP status class, no answer exits 1.
func resolveFailed(env Env, where string, o *resolveOptions, err error) int {
	st, isStatus := status.FromError(err)
	if !isStatus || !fromService(st) {
		msg := err.Error()
		if isStatus {
			msg = st.Message()
		}
		fmt.Fprintf(env.Stderr, "agtp idempotency resolve: policysvc at %s: %s\n", where, msg)
		switch {
		case strings.Contains(msg, "connection refused"):
			fmt.Fprintf(env.Stderr, "  hint: nothing is listening at %s. Is the suite running (`make run`)? policysvc listens on %s (gRPC) and %s (REST)\n",
				where, DefaultPolicyGRPC, DefaultPolicyREST)
		case strings.Contains(msg, "deadline"):
			fmt.Fprintln(env.Stderr, "  hint: no answer within --timeout; raise it, or look at policysvc's logs")
		case strings.Contains(msg, "certificate"), strings.Contains(msg, "connection reset"), strings.Contains(msg, "broken pipe"):
			fmt.Fprintln(env.Stderr, "  hint: policysvc takes only client certificates issued by the suite CA, and its own is signed by it "+
				"(make run: --cacert .state/ca.pem --cert .state/admin.pem --key-tls .state/admin-key.pem)")
		}
		return ExitError
	}
	code, reason, explanation, _ := grpcerr.Reason(err)
	agtpStatus := grpcerr.StatusFor(code)
	fmt.Fprintf(env.Stderr, "agtp idempotency resolve: %d %s: %s\n", agtpStatus, reason, explanation)
	if agtpStatus == http.StatusNotFound {
		hint := "check --agent-id and --idempotency-key against the front door's log line \"request outcome unknown\""
		if !o.agp {
			hint += "; a key an AGP client sent needs --agp"
		}
		fmt.Fprintf(env.Stderr, "  hint: %s\n", hint)
	}
	return exitForStatus(agtpStatus)
}

// slotStateWord is the lowercase state of a slot.
func slotStateWord(s policyv1.IdempotencySlotState) string {
	if s == policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_UNSPECIFIED {
		return "none"
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "IDEMPOTENCY_SLOT_STATE_"))
}
