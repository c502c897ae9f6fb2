package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/testkit"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testkit.Cleaned(m))
}

// server is the front door's real AGTP transport with a test handler.
type server struct {
	*transport.Server
	ca string
}

func (s *server) uri(path string) string { return "agtp://" + s.TCPAddr().String() + path }

func startServer(t *testing.T, h transport.HandlerFunc) *server {
	t.Helper()
	return startServerAt(t, "127.0.0.1:0", h)
}

func startServerAt(t *testing.T, addr string, h transport.HandlerFunc) *server {
	t.Helper()
	pki := testkit.PKI(t)
	return startServerWith(t, addr, pki.Cert("agtp-server"), pki.Key("agtp-server"), pki.CA(), h)
}

// startServerWith serves h on addr with the certificate in certFile and
// keyFile; ca is the file a client trusts it by.
func startServerWith(t *testing.T, addr, certFile, keyFile, ca string, h transport.HandlerFunc) *server {
	t.Helper()
	s, err := transport.New(transport.Options{
		Addr: addr, CertFile: certFile, KeyFile: keyFile,
		Logger: slog.New(slog.DiscardHandler),
	}, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Serve(context.Background()); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
	})
	return &server{Server: s, ca: ca}
}

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, stdin string, tty bool, args ...string) result {
	t.Helper()
	return runEnv(t, nil, stdin, tty, args...)
}

// runEnv runs the command with environ as its whole environment, so
// that variables set where the tests run (AGTP_CACERT, ...) never reach
// it.
func runEnv(t *testing.T, environ map[string]string, stdin string, tty bool, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := Run(ctx, args, Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut, StdoutTTY: tty,
		Getenv: func(k string) string { return environ[k] }})
	return result{code, out.String(), errOut.String()}
}

// echo answers with the request as JSON: method, path, query, fields and
// body, so tests can see what the CLI sent.
func echo(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
	fields := map[string]string{}
	for _, f := range req.Header {
		fields[f.Name] = f.Value
	}
	b, _ := json.Marshal(map[string]any{"method": req.Method, "path": req.Path, "query": req.RawQuery, "fields": fields, "body": string(req.Body)})
	return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, b)
}

type echoed struct {
	Method, Path, Query, Body string
	Fields                    map[string]string
}

func decodeEcho(t *testing.T, s string) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		t.Fatalf("stdout is not the echoed request: %v\n%s", err, s)
	}
	return e
}

func TestVerboseShowsTheRawWireBothWays(t *testing.T) {
	srv := startServer(t, func(context.Context, *transport.ConnInfo, *agtp.Request) *agtp.Response {
		r := agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeManifestJSON, []byte(`{"server_id":"s1"}`))
		r.Header.Set(agtp.HeaderServerID, "s1")
		return r
	})
	r := run(t, "", false, "--cacert", srv.ca, "-v", "--task-id", "t-7", "DISCOVER", srv.uri("/"))
	if r.code != ExitOK {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var wire []string
	for _, line := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(line, "> ") || strings.HasPrefix(line, "< ") {
			wire = append(wire, line)
		}
	}
	want := []string{
		"> AGTP/1.0 DISCOVER /",
		"> Task-ID: t-7",
		"> Content-Length: 0",
		"> ",
		"< AGTP/1.0 200 OK",
		"< Content-Type: application/vnd.agtp.manifest+json",
		"< Server-ID: s1",
		"< Content-Length: 18",
		"< ",
		`< {"server_id":"s1"}`,
	}
	if strings.Join(wire, "\n") != strings.Join(want, "\n") {
		t.Fatalf("wire transcript:\n%s\nwant:\n%s\nfull stderr:\n%s", strings.Join(wire, "\n"), strings.Join(want, "\n"), r.stderr)
	}
	for _, note := range []string{"* new TCP connection to " + srv.TCPAddr().String(), "* TLS 1.3", "ALPN agtp", "* server certificate: "} {
		if !strings.Contains(r.stderr, note) {
			t.Errorf("stderr lacks %q:\n%s", note, r.stderr)
		}
	}
	if r.stdout != `{"server_id":"s1"}` {
		t.Errorf("stdout %q: the body, as received, when stdout is not a terminal", r.stdout)
	}
}

func TestExitCodeFollowsTheStatusClass(t *testing.T) {
	srv := startServer(t, func(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		code, _ := strconv.Atoi(strings.TrimPrefix(req.Path, "/s/"))
		return agtp.NewErrorResponse(code, "test", "status by path")
	})
	for status, want := range map[int]int{200: 0, 202: 0, 262: 0, 301: 3, 404: 4, 459: 4, 500: 5, 503: 5, 551: 5} {
		r := run(t, "", false, "--cacert", srv.ca, "QUERY", srv.uri("/s/"+strconv.Itoa(status)))
		if r.code != want {
			t.Errorf("status %d: exit %d, want %d (stderr %s)", status, r.code, want, r.stderr)
		}
	}
}

func TestRequestFlagsBecomeFields(t *testing.T) {
	srv := startServer(t, echo)
	agent := strings.Repeat("ab", 32)
	r := run(t, "", false, "--cacert", srv.ca, "--agent-id", agent, "--scope", "documents:read", "--task-id", "t-1",
		"--session-id", "s-1", "--idempotency-key", "k-1", "--allow-rcns", "-H", "X-Trace: 42",
		"EXECUTE", srv.uri("/orders?x=1"))
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	e := decodeEcho(t, r.stdout)
	want := map[string]string{"Agent-ID": agent, "Authority-Scope": "documents:read", "Task-ID": "t-1", "Session-ID": "s-1",
		"Idempotency-Key": "k-1", "Allow-RCNS": "true", "X-Trace": "42", "Content-Length": "0"}
	for k, v := range want {
		if e.Fields[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, e.Fields[k], v, e.Fields)
		}
	}
	if e.Method != "EXECUTE" || e.Path != "/orders" || e.Query != "x=1" {
		t.Errorf("request line: %+v", e)
	}
}

func TestHeaderFlagReplacesTheFlagsField(t *testing.T) {
	srv := startServer(t, echo)
	r := run(t, "", false, "--cacert", srv.ca, "--task-id", "from-flag", "-H", "task-id: from-H",
		"-H", "Content-Type: application/json", "-d", `{"a":1}`, "QUERY", srv.uri("/"))
	e := decodeEcho(t, r.stdout)
	if e.Fields["Task-ID"] != "from-H" || e.Fields["Content-Type"] != "application/json" {
		t.Fatalf("fields %v", e.Fields)
	}
}

func TestDataSources(t *testing.T) {
	srv := startServer(t, echo)
	file := filepath.Join(t.TempDir(), "order.json")
	if err := os.WriteFile(file, []byte(`{"parameters":{"id":7}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"literal", "", []string{"-d", `{"n":1}`}, `{"n":1}`},
		{"@file", "", []string{"-d", "@" + file}, `{"parameters":{"id":7}}`},
		{"- is stdin", `{"from":"stdin"}`, []string{"-d", "-"}, `{"from":"stdin"}`},
		{"@- is stdin", `{"from":"stdin"}`, []string{"--data", "@-"}, `{"from":"stdin"}`},
		{"typed non-JSON", "", []string{"-H", "Content-Type: text/plain", "-d", "hello"}, "hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--cacert", srv.ca}, tc.args...)
			r := run(t, tc.stdin, false, append(args, "QUERY", srv.uri("/"))...)
			if r.code != ExitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			e := decodeEcho(t, r.stdout)
			if e.Body != tc.want {
				t.Fatalf("body %q, want %q", e.Body, tc.want)
			}
			if strings.HasPrefix(tc.want, "{") && e.Fields["Content-Type"] != agtp.MediaTypeJSON {
				t.Errorf("Content-Type %q, want %s for a JSON body", e.Fields["Content-Type"], agtp.MediaTypeJSON)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		say  string
	}{
		{"no arguments", nil, "usage: agtp"},
		{"one argument", []string{"QUERY"}, "want METHOD URI"},
		{"lower-case command word", []string{"query", "agtp://h/"}, "methods are upper-case: agtp QUERY URI"},
		{"URI first", []string{"-v", "agtp://h/", "QUERY"}, "the method comes first"},
		{"non-JSON body without a type", []string{"-d", "hello", "QUERY", "agtp://127.0.0.1:1/"}, "-H 'Content-Type: TYPE'"},
		{"bad -H", []string{"-H", "NoColon", "QUERY", "agtp://127.0.0.1:1/"}, "want 'Name: value'"},
		{"cert without key", []string{"--cert", "c.pem", "QUERY", "agtp://h/"}, "--cert and --key go together"},
		{"invalid URI", []string{"QUERY", "http://h/"}, "hint: URIs look like"},
		{"form 1", []string{"QUERY", "agtp://" + strings.Repeat("ab", 32)}, "add where"},
		{"missing file", []string{"-d", "@/nonexistent/x.json", "QUERY", "agtp://h/"}, "no such file"},
		{"unknown flag", []string{"--frobnicate", "QUERY", "agtp://h/"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", false, tc.args...)
			if r.code != ExitError {
				t.Fatalf("exit %d, want %d", r.code, ExitError)
			}
			if !strings.Contains(r.stderr, tc.say) {
				t.Fatalf("stderr does not say %q:\n%s", tc.say, r.stderr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := run(t, "", false, args...)
		if r.code != ExitOK || !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "Exit status:") {
			t.Errorf("%v: exit %d, stdout %q", args, r.code, r.stdout)
		}
	}
	r := run(t, "", false, "audit", "verify", "--help")
	if r.code != ExitOK || !strings.Contains(r.stdout, "INSPECT target=chain_head") {
		t.Errorf("audit verify --help: %d %q", r.code, r.stdout)
	}
}

func TestConnectionErrorsSayWhatToDo(t *testing.T) {
	srv := startServer(t, echo)
	// Listening on every address, so that 127.0.0.2 (not in the
	// certificate) reaches it.
	any := startServerAt(t, "0.0.0.0:0", echo)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		name string
		args []string
		hint string
	}{
		{"unknown CA", []string{"QUERY", srv.uri("/")}, "--cacert .state/ca.pem"},
		{"nothing listening", []string{"--cacert", srv.ca, "QUERY", "agtp://" + closed + "/"}, "make run"},
		{"wrong name in certificate", []string{"--cacert", srv.ca, "QUERY", "agtp://127.0.0.2:" + port(any) + "/"}, "connect by one of those names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", false, tc.args...)
			if r.code != ExitError || !strings.Contains(r.stderr, "hint: ") || !strings.Contains(r.stderr, tc.hint) {
				t.Fatalf("exit %d, stderr:\n%s\nwant a hint with %q", r.code, r.stderr, tc.hint)
			}
		})
	}
	r := run(t, "", false, "--insecure", "QUERY", srv.uri("/"))
	if r.code != ExitOK {
		t.Fatalf("--insecure: %d %s", r.code, r.stderr)
	}
}

func port(s *server) string {
	_, p, _ := net.SplitHostPort(s.TCPAddr().String())
	return p
}

func TestTimeout(t *testing.T) {
	srv := startServer(t, func(ctx context.Context, ci *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		time.Sleep(600 * time.Millisecond)
		return echo(ctx, ci, req)
	})
	r := run(t, "", false, "--cacert", srv.ca, "--timeout", "100ms", "QUERY", srv.uri("/"))
	if r.code != ExitError || !strings.Contains(r.stderr, "raise it") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

func TestQUIC(t *testing.T) {
	srv := startServer(t, echo)
	r := run(t, "", false, "--cacert", srv.ca, "--quic", "-v", "DISCOVER", srv.uri("/"))
	if r.code != ExitOK || !strings.Contains(r.stderr, "* new QUIC connection") || decodeEcho(t, r.stdout).Method != "DISCOVER" {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stderr, r.stdout)
	}
	if srv.Stats().AcceptedQUIC != 1 {
		t.Errorf("the request did not go over QUIC")
	}
}

func TestOutputFormatting(t *testing.T) {
	srv := startServer(t, func(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		switch req.Path {
		case "/binary":
			return agtp.NewResponse(200, "application/octet-stream", []byte("\x1b]0;pwned\x07"))
		case "/text":
			return agtp.NewResponse(200, "text/plain", []byte("plain"))
		}
		r := agtp.NewResponse(200, agtp.MediaTypeJSON, []byte(`{"a":[1,2]}`))
		r.Header.Set(agtp.HeaderTaskID, "t-1")
		return r
	})
	pretty := "{\n  \"a\": [\n    1,\n    2\n  ]\n}\n"
	for _, tc := range []struct {
		name string
		tty  bool
		args []string
		path string
		want string
	}{
		{"pipe: raw", false, nil, "/", `{"a":[1,2]}`},
		{"terminal: pretty", true, nil, "/", pretty},
		{"--pretty on a pipe", false, []string{"--pretty"}, "/", pretty},
		{"--raw on a terminal", true, []string{"--raw"}, "/", "{\"a\":[1,2]}\n"},
		{"-i includes the head", false, []string{"-i"}, "/", "AGTP/1.0 200 OK\nContent-Type: application/vnd.agtp+json\nTask-ID: t-1\nContent-Length: 11\n\n{\"a\":[1,2]}"},
		{"text on a terminal gets a newline", true, nil, "/text", "plain\n"},
		{"binary not sent to a terminal", true, nil, "/binary", ""},
		{"binary to a pipe as is", false, nil, "/binary", "\x1b]0;pwned\x07"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"--cacert", srv.ca}, tc.args...), "QUERY", srv.uri(tc.path))
			r := run(t, "", tc.tty, args...)
			if r.code != ExitOK || r.stdout != tc.want {
				t.Fatalf("exit %d, stdout %q, want %q\nstderr %s", r.code, r.stdout, tc.want, r.stderr)
			}
		})
	}
}

func TestVerboseEscapesControlBytes(t *testing.T) {
	srv := startServer(t, func(context.Context, *transport.ConnInfo, *agtp.Request) *agtp.Response {
		return agtp.NewResponse(200, "application/octet-stream", []byte("\x1b[2Jgone"))
	})
	r := run(t, "", false, "--cacert", srv.ca, "-v", "QUERY", srv.uri("/"))
	if strings.Contains(r.stderr, "\x1b") || !strings.Contains(r.stderr, `< \x1b[2Jgone`) {
		t.Fatalf("stderr %q", r.stderr)
	}
}

// signing is a server key, its JWKS file, and a handler that signs
// responses the way the front door does.
type signing struct {
	signer   *attribution.Signer
	jwksFile string
	jwks     []byte
}

func newSigning(t *testing.T) signing {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := attribution.NewKeySet(priv)
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := ks.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	return signing{signer: ks.Signer(), jwksFile: file, jwks: jwks}
}

func (s signing) handler(tamper bool) transport.HandlerFunc {
	return func(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		body := []byte(`{"status":200}`)
		resp := agtp.NewResponse(200, agtp.MediaTypeJSON, body)
		resp.Header.Set(agtp.HeaderResponseID, "r-1")
		sum := sha256.Sum256(body)
		jws, id, _ := s.signer.SignPayload(&attribution.Payload{ServerID: "s1", Timestamp: "2026-01-01T00:00:00Z", Status: 200,
			Method: req.Method, ResponseID: "r-1", ResultHash: hex.EncodeToString(sum[:]), PreviousAuditID: attribution.ZeroAuditID, AuditRecordVersion: "1"})
		if tamper {
			resp.Body = []byte(`{"status":201}`)
		}
		resp.Header.Set(agtp.HeaderAttributionRecord, jws)
		resp.Header.Set(agtp.HeaderAuditID, id)
		return resp
	}
}

func TestVerifyAttribution(t *testing.T) {
	sg := newSigning(t)
	good := startServer(t, sg.handler(false))
	bad := startServer(t, sg.handler(true))

	r := run(t, "", false, "--cacert", good.ca, "--verify-attribution", "--jwks", sg.jwksFile, "QUERY", good.uri("/"))
	if r.code != ExitOK || !strings.Contains(r.stderr, "* attribution verified: Audit-ID ") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	r = run(t, "", false, "--cacert", bad.ca, "--verify-attribution", "--jwks", sg.jwksFile, "QUERY", bad.uri("/"))
	if r.code != ExitVerify || !strings.Contains(r.stderr, "attribution check FAILED") || !strings.Contains(r.stderr, "result_hash") {
		t.Fatalf("tampered body: exit %d: %s", r.code, r.stderr)
	}

	// The JWKS fetched over HTTPS with the same CA.
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(sg.jwks) }))
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	hs.StartTLS()
	defer hs.Close()
	r = run(t, "", false, "--cacert", good.ca, "--verify-attribution", "--jwks-url", hs.URL+"/.well-known/jwks.json", "QUERY", good.uri("/"))
	if r.code != ExitOK {
		t.Fatalf("--jwks-url: exit %d: %s", r.code, r.stderr)
	}
	// The same location from the environment, and the flag winning over it.
	jwksURL := hs.URL + "/.well-known/jwks.json"
	nowhere := "https://127.0.0.1:1/.well-known/jwks.json"
	for _, tc := range []struct {
		name string
		env  string
		args []string
		code int
	}{
		{"from " + EnvJWKSURL, jwksURL, nil, ExitOK},
		{EnvJWKSURL + " unreachable", nowhere, nil, ExitError},
		{"--jwks-url wins over " + EnvJWKSURL, nowhere, []string{"--jwks-url", jwksURL}, ExitOK},
	} {
		args := append(append([]string{"--cacert", good.ca, "--verify-attribution"}, tc.args...), "QUERY", good.uri("/"))
		r := runEnv(t, map[string]string{EnvJWKSURL: tc.env}, "", false, args...)
		if r.code != tc.code {
			t.Errorf("%s: exit %d, want %d: %s", tc.name, r.code, tc.code, r.stderr)
		}
	}
}

func TestForm1aIdentityMismatchExitsWithVerifyFailure(t *testing.T) {
	asked, other := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	srv := startServer(t, func(context.Context, *transport.ConnInfo, *agtp.Request) *agtp.Response {
		return agtp.NewResponse(200, agtp.MediaTypeIdentityJSON, []byte(`{"agent_id":"`+other+`"}`))
	})
	r := run(t, "", false, "--cacert", srv.ca, "DESCRIBE", "agtp://"+asked+"@"+srv.TCPAddr().String()+"/agents/x")
	if r.code != ExitVerify || !strings.Contains(r.stderr, "another agent") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

func TestStreamedResponsesPrintInOrder(t *testing.T) {
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", agtp.ServerTLSConfig(cert))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		br, bw := bufio.NewReader(conn), bufio.NewWriter(conn)
		if _, err := agtp.ReadRequest(br, agtp.Limits{}); err != nil {
			return
		}
		for i, status := range []int{200, 200, 503} {
			r := agtp.NewResponse(status, "text/plain", []byte("part "+strconv.Itoa(i+1)+"\n"))
			if i < 2 {
				r.Header.Set(agtp.HeaderStream, agtp.StreamContinue)
			}
			r.Write(bw)
			bw.Flush()
		}
		io.Copy(io.Discard, br)
	}()
	defer func() { ln.Close(); <-done }()
	r := run(t, "", false, "--cacert", pki.CA(), "SUMMARIZE", "agtp://"+ln.Addr().String()+"/")
	if r.stdout != "part 1\npart 2\npart 3\n" || r.code != ExitServerError {
		t.Fatalf("exit %d, stdout %q; want the parts in order and the last part's status class", r.code, r.stdout)
	}
}
