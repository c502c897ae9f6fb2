package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/keyfile"
)

// maxAdminBody bounds a REST gateway answer.
const maxAdminBody = 1 << 20

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
	pool, err := keyfile.CertPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("--cacert: %w", err)
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
	//lint:ignore SA1019 the first release's identitysvc sends the Genesis only as bytes
	return jsondoc.PreferString(resp.GetGenesis(), resp.GetGenesisJson()), err
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
	//lint:ignore SA1019 the first release's identitysvc sends the Genesis only as bytes
	return jsondoc.PreferString(resp.GetGenesis(), resp.GetGenesisJson()), err
}

func (a *restAdmin) close() { a.hc.CloseIdleConnections() }
