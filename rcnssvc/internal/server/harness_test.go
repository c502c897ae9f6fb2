package server

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/catalogsvc/demo"
	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	rcnsdemo "github.com/agtpsuite/agtp/rcnssvc/demo"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/testkit"
)

// Agents of the tests: canonical Agent-IDs.
var (
	agentX = strings.Repeat("a1", 32)
	agentY = strings.Repeat("b2", 32)
)

func agentN(i int) string {
	const hexdigits = "0123456789abcdef"
	b := []byte(strings.Repeat("c", 64))
	for j := 0; j < 8; j++ {
		b[63-j] = hexdigits[(i>>(4*j))&0xf]
	}
	return string(b)
}

// fakeCatalog is a tiny catalog service: a snapshot it watches out, and
// function fields for the writes.
type fakeCatalog struct {
	mu     sync.Mutex
	snap   *catalogv1.Snapshot
	subs   []chan *catalogv1.Snapshot
	put    func(*catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error)
	del    func(*catalogv1.DeleteEndpointRequest) (*catalogv1.DeleteEndpointResponse, error)
	puts   []*catalogv1.PutEndpointRequest
	delete []*catalogv1.DeleteEndpointRequest
}

// answerPuts makes put answer every PutEndpoint from now on (nil: the
// default success).
func (f *fakeCatalog) answerPuts(put func(*catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.put = put
}

func (f *fakeCatalog) GetSnapshot(context.Context, *catalogv1.GetSnapshotRequest) (*catalogv1.GetSnapshotResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &catalogv1.GetSnapshotResponse{Snapshot: f.snap}, nil
}

func (f *fakeCatalog) WatchSnapshot(_ *catalogv1.WatchSnapshotRequest, stream grpc.ServerStreamingServer[catalogv1.WatchSnapshotResponse]) error {
	ch := make(chan *catalogv1.Snapshot, 8)
	f.mu.Lock()
	f.subs = append(f.subs, ch)
	cur := f.snap
	f.mu.Unlock()
	if err := stream.Send(&catalogv1.WatchSnapshotResponse{Snapshot: cur}); err != nil {
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case s := <-ch:
			if err := stream.Send(&catalogv1.WatchSnapshotResponse{Snapshot: s}); err != nil {
				return err
			}
		}
	}
}

func (f *fakeCatalog) setSnapshot(s *catalogv1.Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snap = s
	for _, ch := range f.subs {
		select {
		case ch <- s:
		default:
		}
	}
}

func (f *fakeCatalog) PutEndpoint(_ context.Context, r *catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error) {
	f.mu.Lock()
	f.puts = append(f.puts, r)
	put := f.put
	f.mu.Unlock()
	if put != nil {
		return put(r)
	}
	return &catalogv1.PutEndpointResponse{Revision: 2, ApiVersion: "1.0.2"}, nil
}

func (f *fakeCatalog) DeleteEndpoint(_ context.Context, r *catalogv1.DeleteEndpointRequest) (*catalogv1.DeleteEndpointResponse, error) {
	f.mu.Lock()
	f.delete = append(f.delete, r)
	del := f.del
	f.mu.Unlock()
	if del != nil {
		return del(r)
	}
	return &catalogv1.DeleteEndpointResponse{Revision: 3, ApiVersion: "1.0.3"}, nil
}

// serve puts f behind the test kit's catalogsvc stub.
func (f *fakeCatalog) serve(t testing.TB) catalogv1.CatalogServiceClient {
	return (&testkit.CatalogStub{GetSnapshotF: f.GetSnapshot, WatchSnapshotF: f.WatchSnapshot,
		PutEndpointF: f.PutEndpoint, DeleteEndpointF: f.DeleteEndpoint}).Serve(t)
}

// fakePolicy answers CheckRateLimit through a function field.
type fakePolicy struct {
	check func(*policyv1.CheckRateLimitRequest) (*policyv1.CheckRateLimitResponse, error)
}

func (f *fakePolicy) CheckRateLimit(_ context.Context, r *policyv1.CheckRateLimitRequest) (*policyv1.CheckRateLimitResponse, error) {
	if f.check != nil {
		return f.check(r)
	}
	return &policyv1.CheckRateLimitResponse{Allowed: true, Remaining: 100}, nil
}

// serve puts f behind the test kit's policysvc stub.
func (f *fakePolicy) serve(t testing.TB) policyv1.PolicyServiceClient {
	return (&testkit.PolicyStub{CheckRateLimitF: f.CheckRateLimit}).Serve(t)
}

// countingLimit allows n units per (scope, key), then refuses.
func countingLimit(n int) func(*policyv1.CheckRateLimitRequest) (*policyv1.CheckRateLimitResponse, error) {
	var mu sync.Mutex
	used := map[string]int{}
	return func(r *policyv1.CheckRateLimitRequest) (*policyv1.CheckRateLimitResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		k := r.GetScope() + "|" + r.GetKey()
		if used[k] >= n {
			return &policyv1.CheckRateLimitResponse{RetryAfterSeconds: 42}, nil
		}
		used[k]++
		return &policyv1.CheckRateLimitResponse{Allowed: true, Remaining: int64(n - used[k])}, nil
	}
}

// fakeAudit records lifecycle events per agent.
type fakeAudit struct {
	mu     sync.Mutex
	events map[string][]auditEvent
	fail   func(*auditv1.AppendLifecycleEventRequest) error
}

type auditEvent struct {
	Type   string
	Claims map[string]any
}

func (f *fakeAudit) AppendLifecycleEvent(_ context.Context, r *auditv1.AppendLifecycleEventRequest) (*auditv1.AppendLifecycleEventResponse, error) {
	if !agtp.IsCanonicalID(r.GetAgentId()) {
		return nil, grpcerr.InvalidArgument("agent-id-invalid", "bad agent")
	}
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail != nil {
		if err := fail(r); err != nil {
			return nil, err
		}
	}
	var claims map[string]any
	if err := json.Unmarshal([]byte(r.GetClaims()), &claims); err != nil {
		return nil, grpcerr.InvalidArgument("audit-claims-invalid", err.Error())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.events == nil {
		f.events = map[string][]auditEvent{}
	}
	f.events[r.GetAgentId()] = append(f.events[r.GetAgentId()], auditEvent{Type: r.GetEventType(), Claims: claims})
	return &auditv1.AppendLifecycleEventResponse{AuditId: strings.Repeat("0", 64)}, nil
}

// serve puts f behind the test kit's auditsvc stub.
func (f *fakeAudit) serve(t testing.TB) auditv1.AuditServiceClient {
	return (&testkit.AuditStub{AppendLifecycleEventF: f.AppendLifecycleEvent}).Serve(t)
}

func (f *fakeAudit) of(agent string) []auditEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]auditEvent(nil), f.events[agent]...)
}

func (f *fakeAudit) count(agent, typ, synthesisID string) int {
	n := 0
	for _, e := range f.of(agent) {
		if e.Type == typ && e.Claims["synthesis_id"] == synthesisID {
			n++
		}
	}
	return n
}

// demoSnapshot is a catalog snapshot holding catalogsvc's demo endpoints
// (Tier B), a few catalog verbs beside the floor, and the given policies
// and data_manifest.
func demoSnapshot(t testing.TB, policies *catalogv1.ManifestPolicies, dataManifest any) *catalogv1.Snapshot {
	t.Helper()
	snap := &catalogv1.Snapshot{Revision: 1, CatalogVersion: "1.0.0", ApiVersion: "1.0.1", Policies: policies}
	for _, m := range agtp.FloorMethods() {
		snap.Methods = append(snap.Methods, &catalogv1.Method{Name: m, Floor: true, Categories: []string{"mechanics"}})
	}
	for _, m := range []string{"CREATE", "CANCEL", "FETCH", "BOOK", "RESERVE", "SEARCH", "RECORD", "PURCHASE", "AUTHORIZE", "TRANSFER", "REGISTER"} {
		snap.Methods = append(snap.Methods, &catalogv1.Method{Name: m, Categories: []string{"transaction"}})
	}
	err := fs.WalkDir(demo.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := fs.ReadFile(demo.FS, p)
		if err != nil {
			return err
		}
		eps, err := endpoint.ParseAndCompile(p, data, endpoint.FormatYAML, endpoint.Context{InheritCapability: true})
		if err != nil {
			return err
		}
		for _, e := range eps {
			snap.Endpoints = append(snap.Endpoints, e.Proto(catalogv1.EndpointTier_ENDPOINT_TIER_B))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	manifest := map[string]any{"agtp_version": "1.0"}
	if dataManifest != nil {
		manifest["data_manifest"] = dataManifest
	}
	b, _ := json.Marshal(manifest)
	snap.Manifest = string(b)
	return snap
}

func defaultPolicies() *catalogv1.ManifestPolicies {
	return &catalogv1.ManifestPolicies{SynthesisEnabled: true, MaxSynthesisDepth: 10, AnonymousDiscovery: true, ScopeRequiredForInvocation: true}
}

// env is one rcnssvc under test with its peers.
type env struct {
	t       testing.TB
	redis   *testkit.Redis
	rdb     *redis.Client
	catalog *fakeCatalog
	policy  *fakePolicy
	audit   *fakeAudit
	srv     *Server
	client  rcnsv1.RcnsServiceClient
	opts    Options
	cancel  context.CancelFunc
	done    chan struct{}
}

type envConfig struct {
	opts         func(*Options)
	policies     *catalogv1.ManifestPolicies
	dataManifest any
	redisArgs    []string
}

func newEnv(t testing.TB, cfg envConfig) *env {
	t.Helper()
	e := &env{t: t, catalog: &fakeCatalog{}, policy: &fakePolicy{}, audit: &fakeAudit{}}
	e.redis = testkit.StartRedis(t, cfg.redisArgs...)
	e.rdb = e.redis.Client(t)
	pol := cfg.policies
	if pol == nil {
		pol = defaultPolicies()
	}
	e.catalog.snap = demoSnapshot(t, pol, cfg.dataManifest)
	pats, err := rcnsdemo.Patterns()
	if err != nil {
		t.Fatal(err)
	}
	e.opts = DefaultOptions()
	e.opts.Patterns = pats
	e.opts.Propose.AsyncAfter = 0
	e.opts.Contracts.JanitorInterval = 0
	if cfg.opts != nil {
		cfg.opts(&e.opts)
	}
	e.start()
	return e
}

// start builds a Server over the env's Redis and peers, runs it, and
// serves it over gRPC; a second call is a restart of rcnssvc.
func (e *env) start() {
	t := e.t
	t.Helper()
	srv, err := New(e.rdb, slog.New(slog.DiscardHandler), e.catalog.serve(t), e.policy.serve(t), e.audit.serve(t), e.opts)
	if err != nil {
		t.Fatal(err)
	}
	e.stop()
	e.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	go func() { _ = srv.Run(ctx); close(e.done) }()
	t.Cleanup(e.stop)
	conn := testkit.ServeGRPC(t, func(s grpc.ServiceRegistrar) { rcnsv1.RegisterRcnsServiceServer(s, srv) })
	e.client = rcnsv1.NewRcnsServiceClient(conn)
	testkit.WaitFor(t, 5*time.Second, "catalog snapshot", func() bool { return srv.cat.Load() != nil })
}

func (e *env) stop() {
	if e.cancel != nil {
		e.cancel()
		<-e.done
		e.cancel = nil
	}
}

func caller(agent, session string, tier int32, scopes ...string) *rcnsv1.Caller {
	return &rcnsv1.Caller{AgentId: agent, SessionId: session, TrustTier: tier, Scopes: scopes}
}

// sessionA and sessionB are Session-IDs of at least 128 bits.
const (
	sessionA = "sessAAAAAAAAAAAAAAAAAAAAAAAAAA"
	sessionB = "sessBBBBBBBBBBBBBBBBBBBBBBBBBB"
)

func (e *env) propose(c *rcnsv1.Caller, params any, negID string) (*rcnsv1.ProposeResponse, map[string]any) {
	e.t.Helper()
	var raw []byte
	switch p := params.(type) {
	case string:
		raw = []byte(p)
	default:
		var err error
		if raw, err = json.Marshal(p); err != nil {
			e.t.Fatal(err)
		}
	}
	resp, err := e.client.Propose(context.Background(), &rcnsv1.ProposeRequest{Caller: c, Parameters: string(raw), NegotiationId: negID})
	if err != nil {
		e.t.Fatalf("Propose: %v", err)
	}
	return resp, body(e.t, []byte(resp.GetBody()))
}

func body(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	return m
}

func (e *env) gate(c *rcnsv1.Caller, method, path string) *rcnsv1.GateResponse {
	e.t.Helper()
	r, err := e.client.Gate(context.Background(), &rcnsv1.GateRequest{Caller: c, Method: method, Path: path})
	if err != nil {
		e.t.Fatalf("Gate: %v", err)
	}
	return r
}

// present presents the contract id without naming the request's pair;
// presentOn names it.
func (e *env) present(c *rcnsv1.Caller, id string) *rcnsv1.GetContractResponse {
	e.t.Helper()
	return e.presentOn(c, id, "", "")
}

func (e *env) presentOn(c *rcnsv1.Caller, id, method, path string) *rcnsv1.GetContractResponse {
	e.t.Helper()
	r, err := e.client.GetContract(context.Background(), &rcnsv1.GetContractRequest{Caller: c, SynthesisId: id, Method: method, Path: path})
	if err != nil {
		e.t.Fatalf("GetContract: %v", err)
	}
	return r
}

func (e *env) resolve(c *rcnsv1.Caller, method, path string) *rcnsv1.GetContractResponse {
	e.t.Helper()
	r, err := e.client.GetContract(context.Background(), &rcnsv1.GetContractRequest{Caller: c, Method: method, Path: path})
	if err != nil {
		e.t.Fatalf("GetContract: %v", err)
	}
	return r
}

// orderSummary is a wrapped PROPOSE of SUMMARIZE /orders/{order_id}, the
// demo's order-summary composition.
func orderSummary() map[string]any {
	return map[string]any{"endpoint": orderSummaryEndpoint()}
}

func orderSummaryEndpoint() map[string]any {
	return map[string]any{
		"method":      "SUMMARIZE",
		"path":        "/orders/{order_id}",
		"description": "Summarizes one order.",
		"semantic": map[string]any{
			"intent": "Summarize the order with the given identifier.", "actor": "agent",
			"outcome": "The caller holds a summary of the order.", "capability": "analysis",
			"confidence": 0.8, "impact": "informational", "is_idempotent": true,
		},
		"input_schema": map[string]any{
			"type":                 "object",
			"properties":           map[string]any{"order_id": map[string]any{"type": "string"}, "max_sentences": map[string]any{"type": "integer"}},
			"required":             []string{"order_id"},
			"additionalProperties": false,
		},
		"output_schema": map[string]any{"type": "object", "additionalProperties": true},
	}
}

// setPatternVersion replaces a demo pattern's version (a recipe edit).
func (e *env) setPatternVersion(name, version string) {
	e.t.Helper()
	var out []*recipe.Pattern
	for _, p := range e.srv.Patterns() {
		if p.RecipeName == name {
			cp := *p
			cp.RecipeVersion = version
			if err := cp.Compile(); err != nil {
				e.t.Fatal(err)
			}
			p = &cp
		}
		out = append(out, p)
	}
	e.srv.SetPatterns(out)
}

type auditv1AppendReq = auditv1.AppendLifecycleEventRequest

func mustPattern(t testing.TB, js string) *recipe.Pattern {
	t.Helper()
	ps, err := recipe.Load("test.json", []byte(`{"patterns":[`+js+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

// state names a contract's state from the enum the server fills
// (rcnsv1.Contract.contract_state).
func state(c *rcnsv1.Contract) string { return enumname.Of(c.GetContractState()) }
