package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
)

// DefaultMaxRecords bounds an online chain walk (--max).
const DefaultMaxRecords = 1_000_000

func runAudit(ctx context.Context, args []string, env Env) int {
	if len(args) > 0 && args[0] == "verify" {
		return runAuditVerify(ctx, args[1:], env)
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(env.Stdout, auditUsage())
		return ExitOK
	}
	if len(args) > 0 {
		fmt.Fprintf(env.Stderr, "agtp audit: unknown command %q\n", args[0])
	}
	fmt.Fprint(env.Stderr, auditUsage())
	return ExitError
}

type auditOptions struct {
	conn          connFlags
	agent         string
	exports       list
	jwks          string
	allowUnsigned bool
	max           uint64
	verbose       bool
	// The audit service's gRPC API (runAuditVerifyGRPC).
	grpcAddr, serverName string
	from                 uint64
	reconnects           int
	help                 bool
}

func auditFlags(out io.Writer) (*flagSet, *auditOptions) {
	o := &auditOptions{max: DefaultMaxRecords, reconnects: DefaultReconnects}
	f := newFlagSet("agtp audit verify", out)
	f.list(&o.exports, []string{"export"}, "FILE", "check an export or archive file (JSON Lines) instead of asking a server (repeatable)")
	f.str(&o.agent, []string{"agent"}, "ID", "the agent whose chain to walk, when the URI does not name it")
	o.conn.register(f)
	f.str(&o.jwks, []string{"jwks"}, "FILE", "signing keys: a JWKS, JWK or PEM public key file")
	f.boolean(&o.allowUnsigned, []string{"allow-unsigned"}, "accept alg none records (a server without a signing key; never authoritative)")
	f.uint(&o.max, []string{"max"}, "N", fmt.Sprintf("give up after N records, walking over INSPECT (default %d)", DefaultMaxRecords))
	f.str(&o.grpcAddr, []string{"grpc"}, "HOST:PORT", "stream the chain from the audit service's gRPC API (ExportChain) instead of walking it over INSPECT; --cacert, --cert and --key name an operator certificate")
	f.str(&o.serverName, []string{"server-name"}, "NAME", "name to check the audit service's certificate for, with --grpc (default: the host)")
	f.uint(&o.from, []string{"from"}, "SEQ", "with --grpc, start at sequence SEQ, anchored on record SEQ-1 (resume an interrupted verification)")
	f.integer(&o.reconnects, []string{"reconnects"}, "N", fmt.Sprintf("with --grpc, resume a broken stream up to N times in a row without progress (default %d)", DefaultReconnects))
	f.boolean(&o.verbose, []string{"v", "verbose"}, "print every record checked (INSPECT), progress lines even when stderr is not a terminal (--grpc)")
	f.boolean(&o.help, []string{"h", "help"}, "show this help")
	return f, o
}

func auditUsage() string {
	f, _ := auditFlags(io.Discard)
	return `usage: agtp audit verify [flags] agtp://AGENT-ID@HOST[:PORT]
       agtp audit verify [flags] --agent AGENT-ID agtp://HOST[:PORT]
       agtp audit verify [flags] --grpc HOST:PORT --agent AGENT-ID
       agtp audit verify [flags] --export FILE [--export FILE ...]

Checks a per-agent Attribution-Record chain: every record's Audit-ID is the
SHA-256 of its JWS, every JWS verifies against the server's keys (EdDSA), and
every previous_audit_id names the record before it, back to the first record
(64 zeros). Online, it reads the chain head with INSPECT target=chain_head and
walks back record by record with INSPECT target=audit. With --grpc, it
streams the chain from the audit service oldest first (ExportChain) and
checks each record as it arrives, sequence numbers too: a chain whose older
records were moved to the archive is checked from its signed checkpoint.
--timeout then bounds each stream, and a broken stream resumes after the
last record verified. From an export or archive, it checks every chain in
the files, including sequence numbers.
The first broken record is reported, and the exit status is 2.

Flags:
` + flagHelp(f) + `
Examples:
  agtp audit verify --cacert .state/ca.pem --cert agent.pem --key agent-key.pem \
       --agent-id $AGENT_ID agtp://$AGENT_ID@127.0.0.1:4480
  agtp audit verify --grpc 127.0.0.1:7105 --cacert .state/ca.pem \
       --cert .state/admin.pem --key .state/admin-key.pem --agent $AGENT_ID
  agtp audit verify --jwks jwks.json --export audit-export.jsonl

Exit status: 0 every chain verified, 2 a chain is broken, 1 anything else.
`
}

func runAuditVerify(ctx context.Context, args []string, env Env) int {
	f, o := auditFlags(env.Stderr)
	pos, err := f.parse(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(env.Stdout, auditUsage())
			return ExitOK
		}
		return auditUsageError(env, err.Error())
	}
	if o.help {
		fmt.Fprint(env.Stdout, auditUsage())
		return ExitOK
	}
	if err := o.conn.check(env.Getenv); err != nil {
		return auditUsageError(env, err.Error())
	}
	vopts := attribution.VerifyOptions{Algorithms: []string{attribution.AlgEdDSA}}
	if o.allowUnsigned {
		vopts.Algorithms = append(vopts.Algorithms, attribution.AlgNone)
	}
	if len(o.exports) > 0 {
		if len(pos) != 0 {
			return auditUsageError(env, "--export checks files; give no URI with it")
		}
		if o.jwks == "" {
			return auditUsageError(env, "--export needs the signing keys: --jwks FILE")
		}
		if vopts.Keys, err = loadKeyFile(o.jwks); err != nil {
			return fail(env, err)
		}
		return verifyExports(env, o, vopts)
	}
	if o.grpcAddr != "" {
		switch {
		case len(pos) != 0:
			return auditUsageError(env, "--grpc reads the audit service; name the agent with --agent, not a URI")
		case !agtp.IsCanonicalID(o.agent):
			return auditUsageError(env, "--grpc needs --agent AGENT-ID (64 hex digits)")
		case o.conn.cacert == "" || o.conn.cert == "":
			return auditUsageError(env, "--grpc needs an operator certificate: --cacert, --cert and --key")
		case o.reconnects < 0 || o.reconnects > 100:
			return auditUsageError(env, "--reconnects must be between 0 and 100")
		}
		return runAuditVerifyGRPC(ctx, env, o, vopts)
	}
	if o.from != 0 {
		return auditUsageError(env, "--from needs --grpc")
	}
	if len(pos) != 1 {
		return auditUsageError(env, fmt.Sprintf("want one agtp:// URI, got %d arguments", len(pos)))
	}
	u, err := agtp.ParseURI(pos[0])
	if err != nil {
		return fail(env, uriError(pos[0], err))
	}
	agent := o.agent
	if agent == "" {
		agent = u.AgentID
	}
	if u.Address() == "" || !agtp.IsCanonicalID(agent) {
		return auditUsageError(env, "name the agent and the server: agtp://AGENT-ID@HOST[:PORT], or --agent AGENT-ID with agtp://HOST[:PORT]")
	}

	c, err := client.New(o.conn.options())
	if err != nil {
		return fail(env, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, o.conn.timeout)
	defer cancel()
	if o.jwks != "" {
		vopts.Keys, err = loadKeyFile(o.jwks)
	} else {
		vopts.Keys, err = fetchKeys(ctx, c, o.conn.jwksURL, u.Host)
	}
	if err != nil {
		return fail(env, err)
	}
	in := &inspector{c: c, addr: u.Address(), conn: &o.conn}
	head, length, err := in.chainHead(ctx, agent)
	if err != nil {
		return fail(env, err)
	}
	if head == "" || head == attribution.ZeroAuditID {
		fmt.Fprintf(env.Stdout, "chain %s: empty (no records yet)\n", agent)
		return ExitOK
	}
	fetch := in.record
	if o.verbose {
		fetch = func(ctx context.Context, id string) (string, error) {
			jws, err := in.record(ctx, id)
			if err == nil {
				fmt.Fprintf(env.Stderr, "* record %s\n", id)
			}
			return jws, err
		}
	}
	res := attribution.WalkBack(ctx, head, fetch, attribution.ChainOptions{VerifyOptions: vopts, AgentID: agent}, o.max)
	if res.Valid && length > 0 && res.Checked != length {
		res.Valid = false
		res.Break = &attribution.Break{Index: res.Checked, Problem: attribution.ProblemSequenceGap,
			Err: fmt.Errorf("the chain links %d records back to the first, the server counts %d", res.Checked, length)}
	}
	return report(env, "chain "+agent, res, "from the head")
}

func auditUsageError(env Env, msg string) int {
	fmt.Fprintf(env.Stderr, "agtp audit verify: %s\n", msg)
	fmt.Fprint(env.Stderr, "usage: agtp audit verify [flags] agtp://AGENT-ID@HOST[:PORT] | --export FILE\nRun 'agtp audit verify --help' for more.\n")
	return ExitError
}

// report prints one chain's result and returns its exit code.
func report(env Env, what string, res attribution.ChainResult, counted string) int {
	unsigned := ""
	if res.Unsigned > 0 {
		unsigned = fmt.Sprintf(" (%d unsigned, not authoritative)", res.Unsigned)
	}
	if res.Valid {
		fmt.Fprintf(env.Stdout, "%s: %d records verified%s, head %s\n", what, res.Checked, unsigned, res.Head)
		return ExitOK
	}
	b := res.Break
	fmt.Fprintf(env.Stdout, "%s: BROKEN at record %d %s: %s\n", what, b.Index, counted, b.Problem)
	if b.AuditID != "" {
		fmt.Fprintf(env.Stdout, "  record:   %s\n", b.AuditID)
	}
	if b.Expected != "" {
		fmt.Fprintf(env.Stdout, "  expected: %s\n", b.Expected)
	}
	if b.Err != nil {
		fmt.Fprintf(env.Stdout, "  detail:   %s\n", sanitize([]byte(b.Err.Error())))
	}
	fmt.Fprintf(env.Stdout, "  %d records verified before the break%s\n", res.Checked, unsigned)
	return ExitVerify
}

func verifyExports(env Env, o *auditOptions, vopts attribution.VerifyOptions) int {
	var entries []attribution.Entry
	for _, path := range o.exports {
		f, err := os.Open(path)
		if err != nil {
			return fail(env, err)
		}
		err = attribution.ReadEntries(f, func(e attribution.Entry) error {
			entries = append(entries, e)
			return nil
		})
		f.Close()
		if err != nil {
			return fail(env, fmt.Errorf("%s: %w", path, err))
		}
	}
	if len(entries) == 0 {
		return fail(env, errors.New("the export holds no records"))
	}
	results := attribution.VerifyEntries(entries, attribution.ChainOptions{VerifyOptions: vopts}, true)
	keys := make([]attribution.ChainKey, 0, len(results))
	for k := range results {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b attribution.ChainKey) int {
		return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Chain, b.Chain))
	})
	code := ExitOK
	for _, k := range keys {
		if c := report(env, k.Stream+" chain "+k.Chain, results[k], "by sequence"); c != ExitOK {
			code = c
		}
	}
	return code
}

// inspector reads the audit store through INSPECT (core §7.2.4).
type inspector struct {
	c    *client.Client
	addr string
	conn *connFlags
}

// maxINSPECTErrorBody bounds what an error answer may say in a message.
const maxINSPECTErrorBody = 512

func (in *inspector) inspect(ctx context.Context, params map[string]string, out any) error {
	body, _ := json.Marshal(params)
	req, err := agtp.NewRequest(agtp.MethodInspect, "/")
	if err != nil {
		return err
	}
	req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	req.Body = body
	resp, err := in.c.Do(ctx, req, in.addr)
	if err != nil {
		return explain(err, in.addr, in.conn)
	}
	if !agtp.IsSuccess(resp.Status) {
		var eb agtp.ErrorBody
		if json.Unmarshal(resp.Body, &eb) == nil && eb.Reason != "" {
			hint := ""
			if resp.Status == agtp.StatusUnauthorized || resp.Status == agtp.StatusForbidden {
				hint = "\n  hint: this server limits INSPECT; authenticate as the agent (--cert, --key, --agent-id) or as an operator"
			}
			return fmt.Errorf("INSPECT target=%s: %d %s: %s%s", params["target"], resp.Status, eb.Reason, eb.Explanation, hint)
		}
		b := resp.Body
		if len(b) > maxINSPECTErrorBody {
			b = b[:maxINSPECTErrorBody]
		}
		return fmt.Errorf("INSPECT target=%s: %d: %s", params["target"], resp.Status, sanitize(b))
	}
	// The built-in answers with the object itself; accept the core §5.7
	// envelope ({"status":200,"result":{...}}) too.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(resp.Body, &members); err != nil {
		return fmt.Errorf("INSPECT target=%s: the answer does not parse: %w", params["target"], err)
	}
	data := resp.Body
	if _, direct := members["audit_id"]; !direct {
		if r, ok := members["result"]; ok {
			data = r
		}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("INSPECT target=%s: the answer does not parse: %w", params["target"], err)
	}
	return nil
}

func (in *inspector) chainHead(ctx context.Context, agent string) (head string, length uint64, err error) {
	var out struct {
		AuditID string          `json:"audit_id"`
		Length  json.RawMessage `json:"length"`
	}
	if err := in.inspect(ctx, map[string]string{"target": "chain_head", "agent_id": agent}, &out); err != nil {
		return "", 0, err
	}
	// length is a uint64, which protojson-style encoders may quote.
	var n json.Number
	if len(out.Length) > 0 {
		s := strings.Trim(string(out.Length), `"`)
		n = json.Number(s)
		if v, err := n.Int64(); err == nil && v > 0 {
			length = uint64(v)
		}
	}
	return out.AuditID, length, nil
}

func (in *inspector) record(ctx context.Context, auditID string) (string, error) {
	var out struct {
		JWS string `json:"jws"`
	}
	if err := in.inspect(ctx, map[string]string{"target": "audit", "audit_id": auditID}, &out); err != nil {
		return "", err
	}
	if out.JWS == "" {
		return "", errors.New("INSPECT target=audit: the answer has no jws")
	}
	return out.JWS, nil
}
