package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
)

// maxDataBytes bounds a -d body read from a file or stdin; servers
// refuse far less (1 MiB by default).
const maxDataBytes = 64 << 20

// DefaultJWKSPort is where the suite's front door serves HTTPS
// (/.well-known/jwks.json among others).
const DefaultJWKSPort = 4443

type requestOptions struct {
	conn                                  connFlags
	headers                               list
	data                                  string
	scope, taskID, sessionID, idempotency string
	allowRCNS                             bool
	verbose, include, verify, pretty, raw bool
	jsonOut                               bool
	jwks                                  string
	help                                  bool
}

func requestFlags(out io.Writer) (*flagSet, *requestOptions) {
	o := &requestOptions{}
	f := newFlagSet("agtp", out)
	f.list(&o.headers, []string{"H", "header"}, "'NAME: VALUE'", "add a header field (repeatable); it replaces one a flag would set")
	f.str(&o.data, []string{"d", "data"}, "DATA", "request body: DATA, @FILE, or - (or @-) for stdin; JSON gets Content-Type "+agtp.MediaTypeJSON)
	o.conn.register(f)
	f.str(&o.scope, []string{"scope"}, "SCOPES", "Authority-Scope, e.g. 'documents:read, booking:*'")
	f.str(&o.taskID, []string{"task-id"}, "ID", "Task-ID")
	f.str(&o.sessionID, []string{"session-id"}, "ID", "Session-ID")
	f.str(&o.idempotency, []string{"idempotency-key"}, "KEY", "Idempotency-Key: a repeat of the request is answered from the first")
	f.boolean(&o.allowRCNS, []string{"allow-rcns"}, "send Allow-RCNS: true (accept runtime contract negotiation)")
	f.boolean(&o.verbose, []string{"v", "verbose"}, "print the raw wire on stderr: '> ' sent, '< ' received, '* ' notes")
	f.boolean(&o.include, []string{"i", "include"}, "print the response status line and header fields before the body")
	f.boolean(&o.verify, []string{"verify-attribution"}, "verify the response's Attribution-Record and Audit-ID (exit 2 if they fail)")
	f.str(&o.jwks, []string{"jwks"}, "FILE", "keys for --verify-attribution: a JWKS, JWK or PEM public key file")
	f.boolean(&o.pretty, []string{"pretty"}, "indent JSON bodies even when stdout is not a terminal")
	f.boolean(&o.raw, []string{"raw"}, "print bodies exactly as received, even on a terminal")
	f.boolean(&o.jsonOut, []string{"json"}, "print each response as one JSON object per line: status, header fields in order, body")
	f.boolean(&o.help, []string{"h", "help"}, "show this help")
	return f, o
}

func runRequest(ctx context.Context, args []string, env Env) int {
	f, o := requestFlags(env.Stderr)
	pos, err := f.parse(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(env.Stdout, usage())
			return ExitOK
		}
		return usageError(env, err.Error())
	}
	if o.help {
		fmt.Fprint(env.Stdout, usage())
		return ExitOK
	}
	if len(pos) != 2 {
		return usageError(env, fmt.Sprintf("want METHOD URI, got %d arguments", len(pos)))
	}
	if err := o.conn.check(env.Getenv); err != nil {
		return usageError(env, err.Error())
	}
	if o.pretty && o.raw {
		return usageError(env, "--pretty and --raw contradict each other")
	}
	if o.jsonOut && (o.pretty || o.raw || o.include) {
		return usageError(env, "--json prints status, fields and body itself; drop --pretty, --raw and -i")
	}
	method, uri := pos[0], pos[1]
	if strings.HasPrefix(strings.ToLower(method), "agtp://") && !strings.HasPrefix(strings.ToLower(uri), "agtp://") {
		return usageError(env, "the method comes first: agtp METHOD URI")
	}
	if !agtp.ValidMethodToken(method) {
		fmt.Fprintf(env.Stderr, "agtp: warning: %q is not an AGTP method token (3-32 upper-case letters); the server will answer 459\n", method)
	}

	hdr, err := buildHeader(o)
	if err != nil {
		return usageError(env, err.Error())
	}
	var body []byte
	if f.isSet("d", "data") {
		if body, err = readData(o.data, env.Stdin); err != nil {
			return fail(env, err)
		}
		if len(body) > 0 && !hdr.Has(agtp.HeaderContentType) {
			if !json.Valid(body) {
				return usageError(env, "the body is not JSON; say what it is with -H 'Content-Type: TYPE'")
			}
			hdr.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
		}
	}
	req, u, err := client.NewURIRequest(method, uri, body, hdr)
	if err != nil {
		return fail(env, uriError(uri, err))
	}

	c, err := client.New(o.conn.options())
	if err != nil {
		return fail(env, err)
	}
	defer c.Close()
	var keys attribution.KeyResolver
	if o.verify && o.jwks != "" {
		if keys, err = loadKeyFile(o.jwks); err != nil {
			return fail(env, err)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, o.conn.timeout)
	defer cancel()
	var wire *wirePrinter
	if o.verbose {
		wire = newWirePrinter(env.Stderr)
		ctx = client.WithTrace(ctx, wire.trace())
	}
	s, err := c.Stream(ctx, req, u.Address())
	if err != nil {
		wire.end()
		return fail(env, explain(err, u.Address(), &o.conn))
	}
	defer s.Close()

	out := &bodyPrinter{w: env.Stdout, tty: env.StdoutTTY, pretty: o.pretty || env.StdoutTTY && !o.raw, include: o.include}
	var last *agtp.Response
	verifyFailed := false
	for {
		resp, err := s.Next()
		if err == io.EOF {
			break
		}
		wire.end()
		if err != nil {
			return fail(env, explain(err, u.Address(), &o.conn))
		}
		last = resp
		if o.jsonOut {
			if err := printJSON(env.Stdout, resp); err != nil {
				return fail(env, err)
			}
		} else {
			out.print(resp, env.Stderr)
		}
		if err := client.CheckAddressedAgent(u, resp); err != nil {
			fmt.Fprintf(env.Stderr, "agtp: %v\n  hint: core §6.1.2 requires rejecting this answer; the server at %s does not speak for agent %s\n", err, u.Address(), u.AgentID)
			verifyFailed = true
		}
		if o.verify && (resp.Header.Has(agtp.HeaderAttributionRecord) || !resp.More()) {
			if keys == nil {
				if keys, err = fetchKeys(ctx, c, o.conn.jwksURL, u.Host); err != nil {
					return fail(env, err)
				}
			}
			if !reportAttribution(env.Stderr, resp, keys) {
				verifyFailed = true
			}
		}
	}
	if verifyFailed {
		return ExitVerify
	}
	return exitForStatus(last.Status)
}

// exitForStatus maps a status class to the exit code.
func exitForStatus(status int) int {
	switch status / 100 {
	case 2:
		return ExitOK
	case 3:
		return ExitRedirect
	case 4:
		return ExitClientError
	case 5:
		return ExitServerError
	}
	return ExitError
}

func usageError(env Env, msg string) int {
	fmt.Fprintf(env.Stderr, "agtp: %s\n", msg)
	fmt.Fprint(env.Stderr, shortUsage)
	return ExitError
}

func fail(env Env, err error) int {
	// The client library prefixes its errors for programs that log them;
	// here "agtp: " already says where the message comes from.
	// An error may carry what a server sent (an explanation, a status
	// text): escaped, it cannot drive the terminal.
	fmt.Fprintf(env.Stderr, "agtp: %s\n", sanitize([]byte(strings.ReplaceAll(err.Error(), "agtp client: ", ""))))
	return ExitError
}

// buildHeader assembles the request fields: the flags' fields first,
// then -H fields, each replacing a flag's field of the same name.
func buildHeader(o *requestOptions) (agtp.Header, error) {
	var h agtp.Header
	for _, d := range [...]struct{ name, value string }{
		{agtp.HeaderAgentID, o.conn.agentID},
		{agtp.HeaderAuthorityScope, o.scope},
		{agtp.HeaderTaskID, o.taskID},
		{agtp.HeaderSessionID, o.sessionID},
		{agtp.HeaderIdempotencyKey, o.idempotency},
	} {
		if d.value != "" {
			h.Set(d.name, d.value)
		}
	}
	if o.allowRCNS {
		h.Set(agtp.HeaderAllowRCNS, "true")
	}
	replaced := map[string]bool{}
	for _, line := range o.headers {
		name, value, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("-H %q: want 'Name: value'", line)
		}
		canon := strings.ToLower(name)
		if !replaced[canon] {
			h.Del(name)
			replaced[canon] = true
		}
		h.Add(name, value)
	}
	return h, nil
}

// readData resolves -d: literal DATA, @FILE, or - / @- for stdin.
func readData(arg string, stdin io.Reader) ([]byte, error) {
	var r io.Reader
	switch {
	case arg == "-" || arg == "@-":
		r = stdin
	case strings.HasPrefix(arg, "@"):
		f, err := os.Open(arg[1:])
		if err != nil {
			return nil, fmt.Errorf("-d %s: %w", arg, err)
		}
		defer f.Close()
		r = f
	default:
		return []byte(arg), nil
	}
	b, err := io.ReadAll(io.LimitReader(r, maxDataBytes+1))
	if err != nil {
		return nil, fmt.Errorf("-d %s: %w", arg, err)
	}
	if len(b) > maxDataBytes {
		return nil, fmt.Errorf("-d %s: the body is larger than %d MiB", arg, maxDataBytes>>20)
	}
	return b, nil
}

func uriError(uri string, err error) error {
	var pe *agtp.ProtocolError
	switch {
	case errors.Is(err, client.ErrNoAddress):
		return fmt.Errorf("%v\n  hint: agtp://AGENT-ID names an agent but no server to ask; add where: agtp://AGENT-ID@HOST:4480/PATH", err)
	case errors.As(err, &pe):
		return fmt.Errorf("invalid URI %q: %s\n  hint: URIs look like agtp://HOST[:PORT]/PATH, agtp://AGENT-ID@HOST[:PORT]/PATH or agtp://DOMAIN/agents/NAME", uri, pe.Explanation)
	}
	return err
}

// bodyPrinter writes responses to stdout.
type bodyPrinter struct {
	w                    io.Writer
	tty, pretty, include bool
}

func (p *bodyPrinter) print(resp *agtp.Response, stderr io.Writer) {
	if p.include {
		var b bytes.Buffer
		text := resp.StatusText
		if text == "" {
			text = agtp.StatusText(resp.Status)
		}
		fmt.Fprintf(&b, "%s %d %s\n", agtp.Version, resp.Status, text)
		for _, f := range resp.Header {
			fmt.Fprintf(&b, "%s: %s\n", f.Name, f.Value)
		}
		b.WriteString("\n")
		p.w.Write(sanitize(b.Bytes()))
	}
	body := resp.Body
	if len(body) == 0 {
		return
	}
	if p.pretty && isJSONType(resp.Header.Get(agtp.HeaderContentType)) {
		var out bytes.Buffer
		if json.Indent(&out, body, "", "  ") == nil {
			out.WriteByte('\n')
			p.w.Write(out.Bytes())
			return
		}
	}
	if p.tty && binary(body) {
		fmt.Fprintf(stderr, "agtp: not printing %d bytes of binary data (%s) to the terminal; redirect stdout to a file to keep them\n",
			len(body), resp.Header.Get(agtp.HeaderContentType))
		return
	}
	p.w.Write(body)
	if p.tty && body[len(body)-1] != '\n' {
		p.w.Write([]byte{'\n'})
	}
}

// jsonResponse is a response as --json prints it. Fields stay a list, in
// wire order, because AGTP allows a name to repeat. The body is a JSON
// value when the content type says JSON and it parses, text when it is
// UTF-8 without controls, and base64 otherwise, so every answer prints
// as valid JSON a script can take apart without guessing.
type jsonResponse struct {
	Status     int             `json:"status"`
	StatusText string          `json:"status_text,omitempty"`
	Header     []jsonField     `json:"header"`
	Body       json.RawMessage `json:"body,omitempty"`
	BodyText   *string         `json:"body_text,omitempty"`
	BodyBase64 []byte          `json:"body_base64,omitempty"`
}

type jsonField struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

func printJSON(w io.Writer, resp *agtp.Response) error {
	out := jsonResponse{Status: resp.Status, StatusText: resp.StatusText, Header: make([]jsonField, 0, len(resp.Header))}
	if out.StatusText == "" {
		out.StatusText = agtp.StatusText(resp.Status)
	}
	for _, f := range resp.Header {
		out.Header = append(out.Header, jsonField{f.Name, f.Value})
	}
	switch body := resp.Body; {
	case len(body) == 0:
	case isJSONType(resp.Header.Get(agtp.HeaderContentType)) && json.Valid(body):
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			return err
		}
		out.Body = compact.Bytes()
	case utf8.Valid(body) && !binary(body):
		text := string(body)
		out.BodyText = &text
	default:
		out.BodyBase64 = body
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// binary reports bytes a terminal would interpret (escape sequences and
// other controls besides tab and line endings).
func binary(b []byte) bool {
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return true
		}
	}
	return false
}

// fetchKeys fetches the JWKS for --verify-attribution.
func fetchKeys(ctx context.Context, c *client.Client, rawURL, host string) (attribution.KeyResolver, error) {
	if rawURL == "" {
		rawURL = "https://" + net.JoinHostPort(host, strconv.Itoa(DefaultJWKSPort)) + "/.well-known/jwks.json"
	}
	keys, err := c.FetchJWKS(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w\n  hint: give the keys with --jwks FILE, or their location with --jwks-url URL or $"+EnvJWKSURL, err)
	}
	return keys, nil
}

// loadKeyFile reads --jwks: a JWKS, a JWK or a PEM key, any of which
// attribution.LoadKeyFile understands.
func loadKeyFile(path string) (attribution.KeyResolver, error) {
	pubs, err := attribution.LoadKeyFile(path)
	if err != nil {
		return nil, fmt.Errorf("--jwks %s: %w", path, err)
	}
	keys := attribution.PublicKeys{}
	for _, k := range pubs {
		pub, ok := publicHalf(k)
		if !ok {
			continue
		}
		kid, err := attribution.KeyID(pub)
		if err != nil {
			return nil, fmt.Errorf("--jwks %s: %w", path, err)
		}
		keys[kid] = pub
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--jwks %s holds no Ed25519 key", path)
	}
	return keys, nil
}

// reportAttribution verifies resp's record and says so on w.
func reportAttribution(w io.Writer, resp *agtp.Response, keys attribution.KeyResolver) bool {
	rec, err := client.VerifyAttribution(resp, keys)
	if err != nil {
		fmt.Fprintf(w, "agtp: attribution check FAILED: %v\n", err)
		return false
	}
	fmt.Fprintf(w, "* attribution verified: Audit-ID %s, %s key %s, server %q, %s\n",
		rec.AuditID, rec.Alg, rec.KID, rec.Payload.ServerID, rec.Payload.Timestamp)
	return true
}
