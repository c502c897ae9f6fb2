package suite

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/agtpsuite/agtp/deploy/accessref"
	identitydemo "github.com/agtpsuite/agtp/identitysvc/demo"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/agtpsuite/agtp/services/testkit"
)

// internalAPIs are the suite's internal gRPC services, the member of the
// suite that serves each and the access table it registers, as the
// generated access reference lists them (deploy/accessref). The methods
// come from the generated descriptors, never from a list here.
func internalAPIs() []internalAPI {
	var out []internalAPI
	for _, a := range accessref.APIs() {
		out = append(out, internalAPI{a.Service, &a.Desc, a.Table})
	}
	return out
}

type internalAPI struct {
	owner string
	desc  *grpc.ServiceDesc
	table access.Table
}

// rpc is one method of an internal API.
type rpc struct {
	owner   string
	service string // agtp.audit.v1.AuditService
	name    string // GetRecord
	full    string // /agtp.audit.v1.AuditService/GetRecord
	stream  *grpc.StreamDesc
	in, out protoreflect.MessageType
	rule    access.Rule
	hasRule bool
	route   *route
}

func (r rpc) short() string { return r.service[strings.LastIndex(r.service, ".")+1:] + "." + r.name }

// route is an RPC's REST route from proto/gateway.yaml.
type route struct{ verb, path string }

var pathParam = regexp.MustCompile(`\{([a-z_0-9.]+)(=[^}]*)?\}`)

// fill replaces the path parameters with value(name).
func (r *route) fill(value func(name string) string) string {
	return pathParam.ReplaceAllStringFunc(r.path, func(m string) string {
		return url.PathEscape(value(pathParam.FindStringSubmatch(m)[1]))
	})
}

// loadRoutes reads the gateway rules: selector -> route.
func loadRoutes(t *testing.T) map[string]*route {
	t.Helper()
	rules, err := accessref.ReadRoutes(filepath.Join("..", "..", "proto", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	routes := make(map[string]*route, len(rules))
	for sel, r := range rules {
		routes[sel] = &route{verb: r.Verb, path: r.Path}
	}
	return routes
}

// enumerate lists every RPC of every internal API with its rule and REST
// route, failing for a rule or a route that names no method.
func enumerate(t *testing.T) []rpc {
	t.Helper()
	routes := loadRoutes(t)
	used := map[string]bool{}
	var rpcs []rpc
	for _, api := range internalAPIs() {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(api.desc.ServiceName))
		if err != nil {
			t.Fatalf("%s: %v", api.desc.ServiceName, err)
		}
		sd := d.(protoreflect.ServiceDescriptor)
		named := map[string]bool{}
		add := func(name string, stream *grpc.StreamDesc) {
			md := sd.Methods().ByName(protoreflect.Name(name))
			if md == nil {
				t.Fatalf("%s.%s is in the ServiceDesc but not in the descriptor", api.desc.ServiceName, name)
			}
			in, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
			if err != nil {
				t.Fatal(err)
			}
			out, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
			if err != nil {
				t.Fatal(err)
			}
			full := "/" + api.desc.ServiceName + "/" + name
			rule, ok := api.table[full]
			sel := api.desc.ServiceName + "." + name
			used[sel] = true
			named[full] = true
			rpcs = append(rpcs, rpc{owner: api.owner, service: api.desc.ServiceName, name: name, full: full, stream: stream,
				in: in, out: out, rule: rule, hasRule: ok, route: routes[sel]})
		}
		for _, m := range api.desc.Methods {
			add(m.MethodName, nil)
		}
		for j := range api.desc.Streams {
			add(api.desc.Streams[j].StreamName, &api.desc.Streams[j])
		}
		if n := sd.Methods().Len(); n != len(named) {
			t.Errorf("%s: the descriptor has %d methods, the ServiceDesc %d", api.desc.ServiceName, n, len(named))
		}
		for m := range api.table {
			if !named[m] {
				t.Errorf("%s's table has a rule for %s, which is not one of its methods", api.owner, m)
			}
		}
	}
	for sel := range routes {
		if !used[sel] {
			t.Errorf("gateway.yaml routes %s, which is no method of an internal API", sel)
		}
	}
	return rpcs
}

// caller is one client identity of the matrix.
type caller struct {
	label string
	cert  *tls.Certificate // nil: no certificate
	// verified: the suite CA vouches for the certificate, so the
	// handshake succeeds and the guard decides.
	verified bool
	// id is the identity the guard reads from the certificate.
	id access.Identity
}

// allows is what the rule says of c, read here rather than through
// access.Rule.Allows, the code under test.
func (c *caller) allows(r access.Rule) bool {
	if !c.verified {
		return false
	}
	if r.AnyPeer {
		return true
	}
	switch c.id.Kind {
	case access.Service:
		return slices.Contains(r.Services, c.id.Name)
	case access.Operator:
		return r.Operators
	case access.System:
		return r.Systems
	}
	return false
}

func (c *caller) tlsConfig(roots *x509.CertPool) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots}
	// GetClientCertificate presents the certificate whatever CAs the
	// server says it accepts (Certificates would send nothing for the
	// foreign and agent CAs' certificates).
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if c.cert == nil {
			return &tls.Certificate{}, nil
		}
		return c.cert, nil
	}
	return cfg
}

// issueLeaf issues a client certificate naming uris from ca.
func issueLeaf(t *testing.T, ca *x509.Certificate, caKey crypto.Signer, cn string, uris ...string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func loadPair(t *testing.T, certFile, keyFile string) *tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if c.Leaf == nil {
		c.Leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	return &c
}

// callers builds the identity set.
func callers(t *testing.T, l devpki.Layout) []*caller {
	t.Helper()
	var cs []*caller
	ids := map[string]access.Identity{
		devpki.Admin:          {Kind: access.Operator, Name: "admin"},
		devpki.Console:        access.Console,
		devpki.InternalSystem: {Kind: access.System, Name: "reporting"},
	}
	for _, n := range append(append([]string{}, devpki.ServiceNames...), devpki.Admin, devpki.Console, devpki.InternalSystem, "intruder") {
		id, ok := ids[n]
		if !ok {
			id = access.Identity{Kind: access.Service, Name: n}
		}
		cert := loadPair(t, l.Cert(n), l.Key(n))
		if want := "spiffe://agtp.internal/" + id.String(); len(cert.Leaf.URIs) != 1 || cert.Leaf.URIs[0].String() != want {
			t.Fatalf("%s's certificate names %v, want %s", n, cert.Leaf.URIs, want)
		}
		cs = append(cs, &caller{label: strings.ReplaceAll(id.String(), "/", "-"), cert: cert, verified: true, id: id})
	}
	suiteCA := loadPair(t, l.CA(), l.CAKey())
	caKey := suiteCA.PrivateKey.(crypto.Signer)
	agentID := strings.Repeat("ab", 32)
	cs = append(cs,
		&caller{label: "suite-ca-no-spiffe-id", cert: issueLeaf(t, suiteCA.Leaf, caKey, "no identity"), verified: true},
		// An Agent-ID voids any other name, even a service's.
		&caller{label: "suite-ca-agent-id", cert: issueLeaf(t, suiteCA.Leaf, caKey, "agent", "agtp://"+agentID, "spiffe://agtp.internal/service/frontdoor"), verified: true},
		&caller{label: "suite-ca-other-trust-domain", cert: issueLeaf(t, suiteCA.Leaf, caKey, "elsewhere", "spiffe://elsewhere.example/operator/admin"), verified: true},
		&caller{label: "suite-ca-two-identities", cert: issueLeaf(t, suiteCA.Leaf, caKey, "two", "spiffe://agtp.internal/system/reporting", "spiffe://agtp.internal/operator/admin"), verified: true},
	)
	// The demo agent's Agent Certificate, from the agent CA.
	demoDir := filepath.Join(l.Dir, "demo-agent")
	cs = append(cs, &caller{label: "agent-certificate", cert: loadPair(t, filepath.Join(demoDir, identitydemo.CertFile), filepath.Join(demoDir, identitydemo.AgentKeyFile))})
	// A foreign CA's certificate claiming to be the operator.
	fkey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ftmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "AGTP suite development CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	fder, err := x509.CreateCertificate(rand.Reader, ftmpl, ftmpl, fkey.Public(), fkey)
	if err != nil {
		t.Fatal(err)
	}
	fca, _ := x509.ParseCertificate(fder)
	cs = append(cs,
		&caller{label: "foreign-ca", cert: issueLeaf(t, fca, fkey, "admin", "spiffe://agtp.internal/operator/admin")},
		&caller{label: "no-certificate"},
	)
	return cs
}

// Forged gateway metadata rides on every call: the guard must ignore it
// (gRPC: the token is not the gateway's; REST: the gateway drops it).
const forgedCaller = "operator/admin"

var forgedToken = strings.Repeat("0", 64)

// outcome is how a call ended.
type outcome int

const (
	reached   outcome = iota // the guard let it through (any answer of the handler)
	refused                  // PermissionDenied, not-permitted, from the guard
	handshake                // no connection: the TLS handshake refused the client certificate
	unclear                  // anything else (a refusal naming the wrong method or identity)
)

func (o outcome) String() string {
	return [...]string{"reached the handler", "refused by the access table", "no connection (TLS handshake refused)", "unclear"}[o]
}

// classifyGRPC reads an RPC's error. A guard refusal must name the method
// and the identity the certificate carries.
func classifyGRPC(err error, method string, c *caller) (outcome, string) {
	if err == nil || errors.Is(err, io.EOF) {
		return reached, "ok"
	}
	st, _ := status.FromError(err)
	code, reason, _, md := grpcerr.Reason(err)
	switch {
	case code == codes.PermissionDenied && reason == access.ReasonNotPermitted:
		if md["method"] != method || md["identity"] != c.id.String() {
			return unclear, fmt.Sprintf("refused naming method %q identity %q (want %q, %q): %v", md["method"], md["identity"], method, c.id, err)
		}
		return refused, err.Error()
	case code == codes.Unavailable && len(st.Details()) == 0:
		// No connection: the server's alert, or the broken pipe or reset
		// a client sees when it writes before reading the alert. The
		// tls-handshake subtest checks that the alert is the cause.
		return handshake, err.Error()
	}
	return reached, err.Error()
}

// isTLSRefusal recognises the alerts a server sends for a client
// certificate it does not accept.
func isTLSRefusal(msg string) bool {
	for _, s := range []string{"certificate required", "bad certificate", "unknown certificate authority", "certificate unknown"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// probeTLS completes a handshake as c and reads the server's first
// bytes: its HTTP/2 SETTINGS frame (both servers send it first) when it
// accepted the client certificate, the alert when it did not (TLS 1.3
// sends it after the client's Finished).
func probeTLS(c *caller, roots *x509.CertPool, addr string) error {
	cfg := c.tlsConfig(roots)
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err
}

// matrix holds the running suite and the clients of every identity.
type matrix struct {
	s        *Suite
	gateways map[string]string
	roots    *x509.CertPool
	rdb      *redis.Client

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	https map[string]*http.Client
}

func (m *matrix) conn(t *testing.T, c *caller, owner string) *grpc.ClientConn {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := c.label + "|" + owner
	if cc := m.conns[k]; cc != nil {
		return cc
	}
	cc, err := grpc.NewClient(m.s.Addrs[owner],
		grpc.WithTransportCredentials(credentials.NewTLS(c.tlsConfig(m.roots))),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.2, MaxDelay: 200 * time.Millisecond}, MinConnectTimeout: 2 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	m.conns[k] = cc
	return cc
}

func (m *matrix) http(c *caller) *http.Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.https[c.label]; h != nil {
		return h
	}
	h := &http.Client{Transport: &http.Transport{TLSClientConfig: c.tlsConfig(m.roots), ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4}}
	m.https[c.label] = h
	return h
}

func (m *matrix) close() {
	for _, cc := range m.conns {
		_ = cc.Close()
	}
	for _, h := range m.https {
		h.CloseIdleConnections()
	}
}

// unaryWait bounds a unary call or REST request: long enough for a
// machine under load, since it bounds the test, not the guard.
const unaryWait = 30 * time.Second

// streamWait bounds a streaming call that was let through and waits for
// its first message; a refusal comes at once.
const streamWait = 1500 * time.Millisecond

// callGRPC calls r with in as c; a streaming call sends in, closes its
// side and waits for one message.
func (m *matrix) callGRPC(t *testing.T, ctx context.Context, c *caller, r rpc, in proto.Message) (outcome, string, proto.Message) {
	ctx = metadata.AppendToOutgoingContext(ctx, "agtp-gateway-caller", forgedCaller, "agtp-gateway-token", forgedToken)
	conn := m.conn(t, c, r.owner)
	out := r.out.New().Interface()
	if r.stream == nil {
		ctx, cancel := context.WithTimeout(ctx, unaryWait)
		defer cancel()
		err := conn.Invoke(ctx, r.full, in, out)
		o, why := classifyGRPC(err, r.full, c)
		return o, why, out
	}
	ctx, cancel := context.WithTimeout(ctx, streamWait)
	defer cancel()
	st, err := conn.NewStream(ctx, r.stream, r.full)
	if err == nil {
		if err = st.SendMsg(in); err == nil || errors.Is(err, io.EOF) {
			if err = st.CloseSend(); err == nil {
				err = st.RecvMsg(out)
			}
		}
	}
	if status.Code(err) == codes.DeadlineExceeded {
		// Open and quiet: the guard let it through.
		return reached, "stream open, no message within " + streamWait.String(), out
	}
	o, why := classifyGRPC(err, r.full, c)
	return o, why, out
}

// callREST calls r's REST route as c on its service's gateway.
func (m *matrix) callREST(ctx context.Context, c *caller, r rpc, path string, body []byte) (outcome, string, int, []byte) {
	gw := m.gateways[r.owner]
	wait := unaryWait
	if r.stream != nil {
		wait = streamWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var rd io.Reader
	if r.route.verb != http.MethodGet {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.route.verb, "https://"+gw+path, rd)
	if err != nil {
		return unclear, err.Error(), 0, nil
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// Forged forwarding headers: the gateway must drop them.
	req.Header.Set("Grpc-Metadata-Agtp-Gateway-Caller", forgedCaller)
	req.Header.Set("Grpc-Metadata-Agtp-Gateway-Token", forgedToken)
	res, err := m.http(c).Do(req)
	if err != nil {
		if r.stream != nil && errors.Is(err, context.DeadlineExceeded) {
			return reached, "stream open, no message within " + streamWait.String(), 0, nil
		}
		// As for gRPC: the connection failed (tls-handshake checks why).
		return handshake, err.Error(), 0, nil
	}
	defer res.Body.Close()
	var b []byte
	if r.stream != nil && res.StatusCode == http.StatusOK {
		// Streamed data: read the first chunk only.
		buf := make([]byte, 4096)
		n, _ := res.Body.Read(buf)
		b = buf[:n]
	} else {
		b, _ = io.ReadAll(io.LimitReader(res.Body, 1<<20))
	}
	if res.StatusCode == http.StatusForbidden {
		info, ok := errorInfo(b)
		if ok && info.Reason == access.ReasonNotPermitted {
			if info.Metadata["method"] != r.full || info.Metadata["identity"] != c.id.String() {
				return unclear, fmt.Sprintf("refused naming method %q identity %q (want %q, %q): %s", info.Metadata["method"], info.Metadata["identity"], r.full, c.id, b), res.StatusCode, b
			}
			return refused, fmt.Sprintf("403 %s", b), res.StatusCode, b
		}
	}
	return reached, fmt.Sprintf("%d %.200s", res.StatusCode, b), res.StatusCode, b
}

type errInfo struct {
	Type     string            `json:"@type"`
	Reason   string            `json:"reason"`
	Metadata map[string]string `json:"metadata"`
}

// errorInfo finds the ErrorInfo in a gateway error body: a google.rpc
// Status, or {"error": Status} for a streaming route.
func errorInfo(b []byte) (errInfo, bool) {
	var body struct {
		Details []errInfo `json:"details"`
		Error   *struct {
			Details []errInfo `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &body); err != nil {
		return errInfo{}, false
	}
	ds := body.Details
	if body.Error != nil {
		ds = body.Error.Details
	}
	for _, d := range ds {
		if strings.HasSuffix(d.Type, "google.rpc.ErrorInfo") {
			return d, true
		}
	}
	return errInfo{}, false
}

// want is the outcome the table and the PKI call for.
func want(c *caller, r rpc) outcome {
	switch {
	case !c.verified:
		return handshake
	case r.hasRule && c.allows(r.rule):
		return reached
	}
	return refused
}

func startMatrixSuite(t *testing.T) *matrix {
	t.Helper()
	rds := testkit.StartRedis(t)
	state := t.TempDir()
	// The intruder: a service identity no table names, from the suite CA.
	if _, err := devpki.Ensure(state, append(append([]string{}, devpki.ServiceNames...), "intruder")...); err != nil {
		t.Fatal(err)
	}
	// The banner comes once the demo agent and its AGP key are in.
	s := startTestSuite(t, Config{StateDir: state, RedisURL: rds.URL()})
	roots, err := keyfile.CertPool(s.Layout().CA())
	if err != nil {
		t.Fatal(err)
	}
	m := &matrix{s: s, gateways: s.Gateways, roots: roots, rdb: rds.Client(t), conns: map[string]*grpc.ClientConn{}, https: map[string]*http.Client{}}
	t.Cleanup(m.close)
	return m
}

// TestAccessMatrix calls every RPC of every internal API, over gRPC and
// through its REST route, as every kind of client identity, and checks
// the outcome against the access tables: allowed callers reach the
// handler, everyone else is refused by the guard or, without a
// certificate the suite CA vouches for, at the handshake. Refused calls
// of state-changing RPCs leave Redis as it was.
func TestAccessMatrix(t *testing.T) {
	begin := time.Now()
	rpcs := enumerate(t)
	for _, r := range rpcs {
		if !r.hasRule {
			t.Errorf("%s has no rule in %s's access table", r.full, r.owner)
		}
		if r.rule.AnyPeer {
			t.Errorf("%s is open to every verified peer", r.full)
		}
	}
	// A method without a rule stays in the matrix: it must be refused to
	// everyone (deny by default).
	checkAllAPIsListed(t)

	m := startMatrixSuite(t)
	for _, owner := range []string{"auditsvc", "catalogsvc", "identitysvc", "policysvc", "rcnssvc"} {
		if m.gateways[owner] == "" {
			t.Fatalf("%s has no REST gateway address", owner)
		}
	}
	cs := callers(t, m.s.Layout())
	ctx := testkit.Context(t)
	var grpcCases, restCases, healthCases, handshakes atomic.Int64

	t.Run("health", func(t *testing.T) {
		for _, owner := range []string{"frontdoor", "auditsvc", "catalogsvc", "identitysvc", "policysvc", "rcnssvc"} {
			for _, c := range cs {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := healthpb.NewHealthClient(m.conn(t, c, owner)).Check(rctx, &healthpb.HealthCheckRequest{})
				cancel()
				healthCases.Add(1)
				got, why := classifyGRPC(err, healthpb.Health_Check_FullMethodName, c)
				w := reached
				if !c.verified {
					w = handshake
				}
				if got != w {
					t.Errorf("%s Health.Check as %s: %s (%s), want %s", owner, c.label, got, why, w)
				}
			}
		}
	})

	// Every listener refuses, at the handshake, exactly the certificates
	// the suite CA does not vouch for, with the alert that says so.
	t.Run("tls-handshake", func(t *testing.T) {
		listeners := map[string]string{}
		for name, addr := range m.s.Addrs {
			listeners[name+" gRPC"] = addr
		}
		for name, addr := range m.gateways {
			listeners[name+" REST gateway"] = addr
		}
		for name, addr := range listeners {
			for _, c := range cs {
				handshakes.Add(1)
				err := probeTLS(c, m.roots, addr)
				switch {
				case c.verified && err != nil:
					t.Errorf("%s (%s) refused %s: %v", name, addr, c.label, err)
				case !c.verified && (err == nil || !isTLSRefusal(err.Error())):
					t.Errorf("%s (%s) did not refuse %s's certificate at the handshake: %v", name, addr, c.label, err)
				}
			}
		}
	})

	t.Run("grpc", func(t *testing.T) {
		for _, r := range rpcs {
			t.Run(r.short(), func(t *testing.T) {
				for _, c := range cs {
					t.Run(c.label, func(t *testing.T) {
						t.Parallel()
						grpcCases.Add(1)
						got, why, _ := m.callGRPC(t, ctx, c, r, r.in.New().Interface())
						if w := want(c, r); got != w {
							t.Errorf("%s as %s over gRPC: %s (%s), want %s", r.full, c.label, got, why, w)
						}
					})
				}
			})
		}
	})

	t.Run("rest", func(t *testing.T) {
		var missing []string
		for _, r := range rpcs {
			if r.route == nil {
				missing = append(missing, r.short())
				continue
			}
			path := r.route.fill(func(string) string { return "dummy" })
			t.Run(r.short(), func(t *testing.T) {
				for _, c := range cs {
					t.Run(c.label, func(t *testing.T) {
						t.Parallel()
						restCases.Add(1)
						got, why, _, _ := m.callREST(ctx, c, r, path, []byte("{}"))
						if w := want(c, r); got != w {
							t.Errorf("%s %s (%s) as %s: %s (%s), want %s", r.route.verb, path, r.full, c.label, got, why, w)
						}
					})
				}
			})
		}
		t.Logf("RPCs without a REST route: %s", strings.Join(missing, ", "))
	})

	t.Run("refused-calls-change-nothing", func(t *testing.T) {
		refusedChangeNothing(t, ctx, m, rpcs, cs)
	})

	t.Logf("%d RPCs × %d identities: %d gRPC cases, %d REST cases; %d health checks, %d handshakes; in %v",
		len(rpcs), len(cs), grpcCases.Load(), restCases.Load(), healthCases.Load(), handshakes.Load(), time.Since(begin).Round(time.Millisecond))
}

// checkAllAPIsListed fails when a gRPC service of the agtp.* packages is
// missing from internalAPIs (a new API would otherwise go untested).
func checkAllAPIsListed(t *testing.T) {
	t.Helper()
	listed := map[string]bool{}
	for _, api := range internalAPIs() {
		listed[api.desc.ServiceName] = true
	}
	protoregistry.GlobalFiles.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(f.Package()), "agtp.") {
			return true
		}
		for i := 0; i < f.Services().Len(); i++ {
			if name := string(f.Services().Get(i).FullName()); !listed[name] {
				t.Errorf("gRPC service %s is not in the access matrix", name)
			}
		}
		return true
	})
}

// mutation is a state-changing RPC with valid requests: req(0) is sent as
// every refused identity and then as the allowed one over gRPC, req(1) as
// the allowed one over REST.
type mutation struct {
	method  string
	allowed string // caller label
	req     func(t *testing.T, i int) proto.Message
	check   func(t *testing.T, out proto.Message)
}

func refusedChangeNothing(t *testing.T, ctx context.Context, m *matrix, rpcs []rpc, cs []*caller) {
	byLabel := map[string]*caller{}
	for _, c := range cs {
		byLabel[c.label] = c
	}
	byMethod := map[string]rpc{}
	for _, r := range rpcs {
		byMethod[r.full] = r
	}
	demo, err := identitydemo.Ensure(filepath.Join(m.s.StateDir(), "demo-agent"))
	if err != nil {
		t.Fatal(err)
	}
	// Two fresh agents: one registered over gRPC, one over REST.
	agents := make([]*genesis.Genesis, 2)
	for i := range agents {
		_, key, _ := ed25519.GenerateKey(rand.Reader)
		tmpl := identitydemo.Template()
		tmpl.OrgLabel = "matrix-agent-" + strconv.Itoa(i)
		if agents[i], err = genesis.Create(tmpl, key); err != nil {
			t.Fatal(err)
		}
	}
	operator := "operator-admin"
	mutations := []mutation{
		{
			method: identityv1.IdentityService_RegisterGenesis_FullMethodName, allowed: operator,
			req: func(_ *testing.T, i int) proto.Message {
				return &identityv1.RegisterGenesisRequest{Genesis: string(agents[i].Bytes()), Activate: true}
			},
		},
		{
			// Suspend the first fresh agent over gRPC, reinstate it over REST.
			method: identityv1.IdentityService_TransitionLifecycle_FullMethodName, allowed: operator,
			req: func(_ *testing.T, i int) proto.Message {
				tr := identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEACTIVATE
				if i == 1 {
					tr = identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REINSTATE
				}
				return &identityv1.TransitionLifecycleRequest{AgentId: agents[0].AgentID, Transition: tr, Reason: "access matrix"}
			},
			check: func(t *testing.T, out proto.Message) {
				if res := out.(*identityv1.TransitionLifecycleResponse); res.GetNoop() || res.GetAuditId() == "" {
					t.Errorf("the transition changed nothing: %v", res)
				}
			},
		},
		{
			method: agpv1.AgpService_CreateApiKey_FullMethodName, allowed: operator,
			req: func(_ *testing.T, i int) proto.Message {
				return &agpv1.CreateApiKeyRequest{Label: "access matrix " + strconv.Itoa(i), AgentId: demo.AgentID, Scopes: []string{"discover"}}
			},
			check: func(t *testing.T, out proto.Message) {
				if out.(*agpv1.CreateApiKeyResponse).GetSecret() == "" {
					t.Error("no secret")
				}
			},
		},
		{
			method: auditv1.AuditService_AppendSignedRecord_FullMethodName, allowed: "service-frontdoor",
			req: func(_ *testing.T, i int) proto.Message {
				return &auditv1.AppendSignedRecordRequest{AgentId: demo.AgentID, Stream: "confirm", Claims: `{}`, RequestId: "matrix-" + strconv.Itoa(i)}
			},
			check: func(t *testing.T, out proto.Message) {
				if res := out.(*auditv1.AppendSignedRecordResponse); res.GetReplayed() || res.GetAuditId() == "" {
					t.Errorf("nothing appended: %v", res)
				}
			},
		},
		{
			method: catalogv1.CatalogService_PutEndpoint_FullMethodName, allowed: operator,
			req: func(t *testing.T, i int) proto.Message {
				noun := []string{"note", "memo"}[i]
				def := map[string]any{
					"method": "SUMMARIZE", "path": "/" + noun + "s/{" + noun + "_id}", "description": "Summarizes one " + noun + ".",
					"semantic": map[string]any{"intent": "Summarize the " + noun + ".", "actor": "agent", "outcome": "The caller holds a summary.",
						"capability": "analysis", "confidence": 0.8, "impact": "informational", "is_idempotent": true},
					"input_schema": map[string]any{"type": "object", "properties": map[string]any{noun + "_id": map[string]any{"type": "string"}},
						"required": []any{noun + "_id"}, "additionalProperties": false},
					"output_schema": map[string]any{"type": "object", "additionalProperties": true},
					"errors":        []any{noun + "_not_found"},
					"handler":       map[string]any{"type": "registered_function", "function": "demo.notes.summarize"},
				}
				b, err := json.Marshal(def)
				if err != nil {
					t.Fatal(err)
				}
				d, err := jsondoc.Struct(b)
				if err != nil {
					t.Fatal(err)
				}
				return &catalogv1.PutEndpointRequest{Definition: d}
			},
		},
	}
	for _, mu := range mutations {
		r, ok := byMethod[mu.method]
		if !ok {
			t.Fatalf("%s is not an internal RPC", mu.method)
		}
		t.Run(r.short(), func(t *testing.T) {
			allowed := byLabel[mu.allowed]
			if !allowed.allows(r.rule) {
				t.Fatalf("the table does not let %s call %s", allowed.label, r.full)
			}
			before := m.stableSnapshot(t, ctx)
			var refusedCalls int
			for _, c := range cs {
				if c.allows(r.rule) {
					continue
				}
				w := want(c, r)
				got, why, _ := m.callGRPC(t, ctx, c, r, mu.req(t, 0))
				if got != w {
					t.Errorf("valid %s as %s over gRPC: %s (%s), want %s", r.short(), c.label, got, why, w)
				}
				refusedCalls++
				if r.route != nil {
					path, body := restRequest(t, r, mu.req(t, 0))
					got, why, _, _ := m.callREST(ctx, c, r, path, body)
					if got != w {
						t.Errorf("valid %s %s as %s: %s (%s), want %s", r.route.verb, path, c.label, got, why, w)
					}
					refusedCalls++
				}
			}
			if d := diffSnapshots(before, m.snapshot(t, ctx)); d != "" {
				t.Fatalf("%d refused %s calls changed Redis:\n%s", refusedCalls, r.short(), d)
			}

			// The same request as the allowed identity does change it.
			got, why, out := m.callGRPC(t, ctx, allowed, r, mu.req(t, 0))
			if got != reached || why != "ok" {
				t.Fatalf("valid %s as %s over gRPC: %s (%s), want success", r.short(), allowed.label, got, why)
			}
			if mu.check != nil {
				mu.check(t, out)
			}
			afterGRPC := m.stableSnapshot(t, ctx)
			if diffSnapshots(before, afterGRPC) == "" {
				t.Fatalf("%s as %s succeeded but changed nothing in Redis", r.short(), allowed.label)
			}
			if r.route != nil {
				path, body := restRequest(t, r, mu.req(t, 1))
				got, why, code, b := m.callREST(ctx, allowed, r, path, body)
				if got != reached || code != http.StatusOK {
					t.Fatalf("valid %s %s as %s: %s (%s), want 200", r.route.verb, path, allowed.label, got, why)
				}
				if mu.check != nil {
					out := r.out.New().Interface()
					if err := protojson.Unmarshal(b, out); err != nil {
						t.Fatalf("REST response: %v: %s", err, b)
					}
					mu.check(t, out)
				}
				if diffSnapshots(afterGRPC, m.stableSnapshot(t, ctx)) == "" {
					t.Fatalf("%s over REST as %s succeeded but changed nothing in Redis", r.short(), allowed.label)
				}
			}
			t.Logf("%d refused calls changed nothing; the allowed calls did", refusedCalls)
		})
	}
}

// restRequest is the URL path and JSON body of req on r's route, the
// path parameters taken from req.
func restRequest(t *testing.T, r rpc, req proto.Message) (string, []byte) {
	t.Helper()
	pm := req.ProtoReflect()
	path := r.route.fill(func(name string) string {
		fd := pm.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			t.Fatalf("%s: no field %s", r.full, name)
		}
		return pm.Get(fd).String()
	})
	b, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return path, b
}

// snapshot is every key of Redis with its type and a digest of its DUMP
// (TTLs left out: they tick).
func (m *matrix) snapshot(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	snap := map[string]string{}
	iter := m.rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		typ, err := m.rdb.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		dump, err := m.rdb.Dump(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired between SCAN and DUMP
		}
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(dump))
		snap[k] = typ + " " + hex.EncodeToString(sum[:8])
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return snap
}

// stableSnapshot waits until the suite's own background writes (the
// effects of the previous step) have settled.
func (m *matrix) stableSnapshot(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	prev := m.snapshot(t, ctx)
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		next := m.snapshot(t, ctx)
		if diffSnapshots(prev, next) == "" {
			return next
		}
		prev = next
	}
	t.Fatal("Redis never settled")
	return nil
}

func diffSnapshots(a, b map[string]string) string {
	var d []string
	for k, v := range a {
		switch w, ok := b[k]; {
		case !ok:
			d = append(d, "  deleted "+k)
		case w != v:
			d = append(d, "  changed "+k+" ("+v+" -> "+w+")")
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, "  added   "+k)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}
