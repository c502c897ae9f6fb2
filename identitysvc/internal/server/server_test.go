package server

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/identitysvc/identitydoc"
	"github.com/agtpsuite/agtp/identitysvc/internal/registry"
	"github.com/agtpsuite/agtp/identitysvc/internal/testaudit"
	"github.com/agtpsuite/agtp/identitysvc/sessionbind"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/testkit"
)

const (
	tACTIVATE   = identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_ACTIVATE
	tREINSTATE  = identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REINSTATE
	tDEACTIVATE = identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEACTIVATE
	tREVOKE     = identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REVOKE
	tDEPRECATE  = identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEPRECATE
)

var suiteKey = func() ed25519.PrivateKey {
	_, k, _ := ed25519.GenerateKey(nil)
	return k
}()

// replica is one identitysvc instance served over real gRPC.
type replica struct {
	srv    *Server
	client identityv1.IdentityServiceClient
}

type env struct {
	rdb         *redis.Client
	audit       *testaudit.Server
	auditClient auditv1.AuditServiceClient
	a           *replica
}

// startReplica starts one more identitysvc on the env's Redis and
// auditsvc, as a second replica would run.
func startReplica(t testing.TB, e *env, opts Options) *replica {
	t.Helper()
	if opts.SigningKey == nil {
		opts.SigningKey = suiteKey
	}
	srv, err := New(e.rdb, slog.New(slog.NewTextHandler(io.Discard, nil)), e.auditClient, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	conn := testkit.ServeGRPCAs(t, testkit.FrontDoor, srv.Register)
	waitSubscribed(t, srv)
	return &replica{srv: srv, client: identityv1.NewIdentityServiceClient(conn)}
}

func waitSubscribed(t testing.TB, s *Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !s.hubSubscribed() {
		if time.Now().After(deadline) {
			t.Fatal("the replica never subscribed to agent events")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newEnv(t testing.TB, opts Options) *env {
	t.Helper()
	rdb := testkit.StartRedis(t).Client(t)
	audit, client := testaudit.Start(t)
	e := &env{rdb: rdb, audit: audit, auditClient: client}
	e.a = startReplica(t, e, opts)
	return e
}

func newGenesis(t testing.TB, tier int) *genesis.Genesis {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(nil)
	tpl := genesis.Template{
		Owner: "Acme Corp", Archetype: genesis.ArchetypeExecutor, GovernanceZone: "production",
		Scope: []string{"orders:query", "orders:create", "documents:summarize"}, TrustTier: tier,
	}
	if tier == 1 {
		tpl.VerificationPath, tpl.OrgDomain = genesis.PathDNSAnchored, "acme.tld"
	}
	g, err := genesis.Create(tpl, priv)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func register(t testing.TB, c identityv1.IdentityServiceClient, g *genesis.Genesis, name string) *identityv1.AgentRecord {
	t.Helper()
	res, err := c.RegisterGenesis(context.Background(), &identityv1.RegisterGenesisRequest{Genesis: string(g.Bytes()), Name: name, Activate: true})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetAgent()
}

func wantReason(t testing.TB, err error, code codes.Code, reason string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %v %s, got success", code, reason)
	}
	c, r, expl, _ := grpcerr.Reason(err)
	if c != code || r != reason {
		t.Fatalf("want %v %s, got %v %s (%s)", code, reason, c, r, expl)
	}
}

func document(t testing.TB, c identityv1.IdentityServiceClient, id, format string) (*identityv1.GetIdentityDocumentResponse, map[string]any) {
	t.Helper()
	res, err := c.GetIdentityDocument(context.Background(), &identityv1.GetIdentityDocumentRequest{AgentId: id, Format: format})
	if err != nil {
		t.Fatalf("format %q: %v", format, err)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(res.GetDocument()), &doc); err != nil {
		t.Fatal(err)
	}
	return res, doc
}

func TestGetGenesisReturnsBytesAsRegistered(t *testing.T) {
	e := newEnv(t, Options{})
	g := newGenesis(t, 2)
	// Whitespace and key order differ from the canonical form; the stored
	// document must still come back exactly as sent.
	pretty := strings.ReplaceAll(string(g.Bytes()), ",", ",\n   ")
	// A client of the first release sends only genesis_json.
	//lint:ignore SA1019 the first release's field must still be honoured
	if _, err := e.a.client.RegisterGenesis(context.Background(), &identityv1.RegisterGenesisRequest{GenesisJson: []byte(pretty)}); err != nil {
		t.Fatal(err)
	}
	res, err := e.a.client.GetGenesis(context.Background(), &identityv1.GetGenesisRequest{AgentId: g.AgentID})
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 the first release's field must still carry the Genesis
	if res.GetGenesis() != pretty || string(res.GetGenesisJson()) != pretty {
		t.Fatal("GetGenesis must return the Genesis byte for byte, in genesis and genesis_json")
	}
}

// core assertions 65–73 (core §6.3, §6.1.7, §6.5.2) at the service layer.
func TestIdentityDocumentAssertions(t *testing.T) {
	e := newEnv(t, Options{Methods: []string{"QUOTE", "QUERY"}, IssuerURL: "https://registrar.acme.tld"})
	g := newGenesis(t, 2)
	register(t, e.a.client, g, "orders-bot")

	res, doc := document(t, e.a.client, g.AgentID, "")
	// 71
	if res.GetContentType() != "application/vnd.agtp.identity+json" {
		t.Fatalf("71: content type %q", res.GetContentType())
	}
	// 65
	for _, f := range []string{"agtp_version", "document_type", "document_version", "agent_id", "name", "description",
		"principal", "principal_id", "issuer", "issued_at", "updated_at", "status", "methods", "capabilities",
		"scopes_accepted", "trust_score"} {
		if _, ok := doc[f]; !ok {
			t.Errorf("65: required member %s missing", f)
		}
	}
	if doc["document_type"] != "agtp-identity" || doc["agent_id"] != g.AgentID || doc["name"] != "orders-bot" {
		t.Fatalf("65: %v", doc)
	}
	// 66
	issued, err1 := time.Parse(time.RFC3339, doc["issued_at"].(string))
	updated, err2 := time.Parse(time.RFC3339, doc["updated_at"].(string))
	if err1 != nil || err2 != nil || updated.Before(issued) {
		t.Fatalf("66: issued_at %v updated_at %v", doc["issued_at"], doc["updated_at"])
	}
	if s := doc["trust_score"].(float64); s < 0 || s > 1 {
		t.Fatalf("66: trust_score %v", s)
	}
	// 67
	if doc["status"] != "active" {
		t.Fatalf("67: status %v", doc["status"])
	}
	// 68, and configured methods once each
	var methods []string
	for _, m := range doc["methods"].([]any) {
		methods = append(methods, m.(string))
	}
	for _, m := range agtp.FloorMethods() {
		if !slices.Contains(methods, m) {
			t.Errorf("68: %s missing from methods", m)
		}
	}
	if !slices.Contains(methods, "QUOTE") || len(methods) != 19 {
		t.Fatalf("68: methods %v", methods)
	}
	// 69
	if doc["trust_tier"] != 2.0 || doc["trust_warning"] != "verification-incomplete" || doc["trust_explanation"] == nil {
		t.Fatalf("69: tier 2 needs trust_warning and trust_explanation: %v", doc)
	}
	if doc["verification_path"] != "org-asserted" {
		t.Fatalf("verification_path %v", doc["verification_path"])
	}
	// 70
	if err := identitydoc.VerifyInline([]byte(res.GetDocument())); err != nil {
		t.Fatalf("70: %v", err)
	}
	if doc["manifest_issuer_public_key"] != genesis.EncodeKey(suiteKey.Public().(ed25519.PublicKey)) {
		t.Fatal("70: signed with another key")
	}
	if doc["issuer"] != "https://registrar.acme.tld" {
		t.Fatalf("issuer %v", doc["issuer"])
	}
	// Exposure (core §6.3.4): nothing from the Genesis signature or keys
	// beyond what the schema names.
	if _, ok := doc["signature"]; ok {
		t.Fatal("the identity document must not carry the Genesis signature")
	}

	// ?format=json is the same document, compact.
	jres, jdoc := document(t, e.a.client, g.AgentID, "json")
	if strings.Contains(string([]byte(jres.GetDocument())), "\n") || jdoc["agent_id"] != g.AgentID {
		t.Fatal("?format=json must be the compact document")
	}
	if err := identitydoc.VerifyInline([]byte(jres.GetDocument())); err != nil {
		t.Fatal(err)
	}

	// 72, 73: ?format=certificate is the Genesis, verifiable on its own.
	cres, _ := document(t, e.a.client, g.AgentID, "certificate")
	if string([]byte(cres.GetDocument())) != string(g.Bytes()) || cres.GetContentType() != "application/vnd.agtp+json" {
		t.Fatal("72: certificate format must be the Genesis as registered")
	}
	cg, err := genesis.Load([]byte(cres.GetDocument()))
	if err != nil || cg.ComputeAgentID() != g.AgentID {
		t.Fatalf("73: %v", err)
	}

	// 72, 76: ?format=status.
	sres, sdoc := document(t, e.a.client, g.AgentID, "status")
	if sdoc["document_type"] != "agtp-status" || sdoc["lifecycle_state"] != "active" || sdoc["canonical_id"] != g.AgentID ||
		sdoc["agent_label"] != "orders-bot" || sdoc["generated_at"] == nil {
		t.Fatalf("76: %v", sdoc)
	}
	if err := identitydoc.VerifyInline([]byte(sres.GetDocument())); err != nil {
		t.Fatal(err)
	}

	_, err = e.a.client.GetIdentityDocument(context.Background(), &identityv1.GetIdentityDocumentRequest{AgentId: g.AgentID, Format: "yaml"})
	wantReason(t, err, codes.InvalidArgument, ReasonFormatInvalid)
	// 75, 77
	_, err = e.a.client.GetIdentityDocument(context.Background(), &identityv1.GetIdentityDocumentRequest{AgentId: strings.Repeat("0", 64)})
	wantReason(t, err, codes.NotFound, registry.ReasonAgentNotFound)
	_, err = e.a.client.GetIdentityDocument(context.Background(), &identityv1.GetIdentityDocumentRequest{AgentId: "7f3a9c2d"})
	wantReason(t, err, codes.InvalidArgument, registry.ReasonInvalidCanonicalID)
}

func TestIdentityDocumentTier1AndLifecycleSignals(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: registry.AuthOpen})
	g := newGenesis(t, 1)
	register(t, e.a.client, g, "verified")
	_, doc := document(t, e.a.client, g.AgentID, "json")
	if doc["trust_tier"] != 1.0 || doc["verification_path"] != "dns-anchored" || doc["org_domain"] != "acme.tld" || doc["principal_id"] != "acme.tld" {
		t.Fatalf("tier 1 document %v", doc)
	}
	if _, ok := doc["trust_warning"]; ok {
		t.Fatal("tier 1 carries no trust_warning")
	}

	succ := strings.Repeat("ab", 32)
	deadline := time.Date(2027, 6, 1, 0, 0, 0, 0, time.UTC)
	if _, err := e.a.client.TransitionLifecycle(context.Background(), &identityv1.TransitionLifecycleRequest{
		AgentId: g.AgentID, Transition: tDEPRECATE, SuccessorAgentId: succ, MigrationDeadline: timestamppb.New(deadline),
	}); err != nil {
		t.Fatal(err)
	}
	_, doc = document(t, e.a.client, g.AgentID, "json")
	if doc["status"] != "deprecated" || doc["successor_agent_id"] != succ || doc["migration_deadline"] != "2027-06-01T00:00:00Z" {
		t.Fatalf("deprecation signal missing: %v", doc)
	}
	_, sdoc := document(t, e.a.client, g.AgentID, "status")
	if sdoc["lifecycle_state"] != "deprecated" || sdoc["last_action_method"] != "DEPRECATE" {
		t.Fatalf("status document %v", sdoc)
	}
	if _, err := e.a.client.TransitionLifecycle(context.Background(), &identityv1.TransitionLifecycleRequest{
		AgentId: g.AgentID, Transition: tREVOKE, Reason: "policy-violation"}); err != nil {
		t.Fatal(err)
	}
	_, doc = document(t, e.a.client, g.AgentID, "json")
	if doc["status"] != "retired" || doc["revoked_at"] == nil {
		t.Fatalf("retired document %v", doc)
	}
}

func TestPendingAgentHasNoDocuments(t *testing.T) {
	e := newEnv(t, Options{})
	g := newGenesis(t, 2)
	if _, err := e.a.client.RegisterGenesis(context.Background(), &identityv1.RegisterGenesisRequest{Genesis: string(g.Bytes())}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"", "certificate", "status"} {
		_, err := e.a.client.GetIdentityDocument(context.Background(), &identityv1.GetIdentityDocumentRequest{AgentId: g.AgentID, Format: f})
		wantReason(t, err, codes.NotFound, registry.ReasonAgentNotActivated)
	}
}

// core assertions 62–64 (core §6.2).
func TestNamespaceDocument(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: registry.AuthOpen, OrgDomain: "acme.tld", GovernanceZone: "zone:acme-internal"})
	ctx := context.Background()
	a, b, c := newGenesis(t, 2), newGenesis(t, 1), newGenesis(t, 2)
	register(t, e.a.client, a, "alpha")
	register(t, e.a.client, b, "beta")
	register(t, e.a.client, c, "gamma")
	x := newGenesis(t, 3)
	register(t, e.a.client, x, "X-lab")
	if _, err := e.a.client.TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{AgentId: c.AgentID, Transition: tDEACTIVATE}); err != nil {
		t.Fatal(err)
	}

	get := func() map[string]any {
		t.Helper()
		res, err := e.a.client.GetNamespaceDocument(ctx, &identityv1.GetNamespaceDocumentRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if err := identitydoc.VerifyNamespace([]byte(res.GetDocument()), suiteKey.Public().(ed25519.PublicKey)); err != nil {
			t.Fatalf("62: %v", err)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(res.GetDocument()), &doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	doc := get()
	if doc["document_type"] != "agtp-namespace" || doc["org_domain"] != "acme.tld" || doc["governance_zone"] != "zone:acme-internal" {
		t.Fatalf("62: %v", doc)
	}
	if sig := doc["signature"].(map[string]any); sig["algorithm"] != "EdDSA" || sig["key_id"] == "" {
		t.Fatalf("62: signature %v", sig)
	}
	gen, err := time.Parse(time.RFC3339, doc["generated_at"].(string))
	if err != nil || time.Since(gen) > 300*time.Second {
		t.Fatalf("64: generated_at %v", doc["generated_at"])
	}
	labels := func(doc map[string]any) []string {
		var out []string
		for _, e := range doc["agents"].([]any) {
			m := e.(map[string]any)
			if m["lifecycle_state"] != "active" {
				t.Fatalf("63: entry %v is not active", m)
			}
			out = append(out, m["agent_label"].(string))
		}
		if float64(len(out)) != doc["total_active"].(float64) {
			t.Fatalf("63: total_active %v for %d entries", doc["total_active"], len(out))
		}
		return out
	}
	if got := labels(doc); !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Fatalf("63: agents %v (suspended and Tier 3 agents must be left out)", got)
	}
	entry := doc["agents"].([]any)[0].(map[string]any)
	if entry["manifest_uri"] != "agtp://acme.tld/agents/alpha" || entry["canonical_id"] != a.AgentID || entry["activated_at"] == nil {
		t.Fatalf("entry %v", entry)
	}

	// Regenerated after a change, without waiting for NamespaceMaxAge.
	if _, err := e.a.client.TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{AgentId: a.AgentID, Transition: tREVOKE, Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for {
		if got := labels(get()); slices.Equal(got, []string{"beta"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the namespace document still lists the revoked agent after 1 s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A replayed document fails verification once edited.
	res, _ := e.a.client.GetNamespaceDocument(ctx, &identityv1.GetNamespaceDocumentRequest{})
	forged := strings.Replace(string([]byte(res.GetDocument())), `"total_active":1`, `"total_active":2`, 1)
	if identitydoc.VerifyNamespace([]byte(forged), suiteKey.Public().(ed25519.PublicKey)) == nil {
		t.Fatal("an edited namespace document verified")
	}
}

func TestListAgents(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: registry.AuthOpen})
	a, b := newGenesis(t, 2), newGenesis(t, 2)
	register(t, e.a.client, a, "a1")
	register(t, e.a.client, b, "b1")
	x := newGenesis(t, 3)
	register(t, e.a.client, x, "X-exp")
	if _, err := e.a.client.TransitionLifecycle(context.Background(), &identityv1.TransitionLifecycleRequest{AgentId: b.AgentID, Transition: tDEACTIVATE}); err != nil {
		t.Fatal(err)
	}
	all, err := e.a.client.ListAgents(context.Background(), &identityv1.ListAgentsRequest{})
	if err != nil || len(all.GetAgents()) != 3 {
		t.Fatalf("all: %v %v", all, err)
	}
	active, err := e.a.client.ListAgents(context.Background(), &identityv1.ListAgentsRequest{ActiveOnly: true})
	if err != nil || len(active.GetAgents()) != 1 || active.GetAgents()[0].GetAgentId() != a.AgentID {
		t.Fatalf("active only: %v %v", active, err)
	}
	ids := []string{a.AgentID, b.AgentID, x.AgentID}
	for i := range 3 {
		g := newGenesis(t, 2)
		register(t, e.a.client, g, fmt.Sprintf("p%d", i))
		ids = append(ids, g.AgentID)
	}
	slices.Sort(ids)
	list := func(activeOnly bool) testkit.ListPage {
		return func(size int32, tok string) ([]string, string, error) {
			r, err := e.a.client.ListAgents(context.Background(), &identityv1.ListAgentsRequest{ActiveOnly: activeOnly, PageSize: size, PageToken: tok})
			var got []string
			for _, a := range r.GetAgents() {
				got = append(got, a.GetAgentId())
			}
			return got, r.GetNextPageToken(), err
		}
	}
	for _, size := range []int32{1, 2, 4} {
		tok := testkit.CheckPaging(t, size, ids, list(false))
		testkit.CheckTokenMismatch(t, tok, list(true))
	}
}

func TestTransitionLifecycleOverGRPC(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: registry.AuthGenesisIssuer})
	ctx := context.Background()
	g := newGenesis(t, 2)
	register(t, e.a.client, g, "bot")

	res, err := e.a.client.TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{
		AgentId: g.AgentID, Transition: tDEACTIVATE, ClientKeyFingerprint: g.IssuerFingerprint(), Actor: "ops", CallerAgentId: g.AgentID})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_SUSPENDED || res.GetPreviousStatus() != identityv1.AgentStatus_AGENT_STATUS_ACTIVE ||
		res.GetEventType() != "agent-lifecycle-suspended" || res.GetAuditId() == "" || res.GetNoop() || res.GetAgent().GetRevision() != 3 {
		t.Fatalf("103: %v", res)
	}
	evs := e.audit.Events(g.AgentID)
	if last := evs[len(evs)-1]; last.AuditID != res.GetAuditId() || last.Claims["claimed_actor"] != "ops" || last.Claims["actor"] != nil ||
		last.Claims["caller_agent_id"] != g.AgentID || last.Claims["authorized_by"] != registry.AuthorizedByGenesisIssuer ||
		last.Claims["client_key_fingerprint"] != g.IssuerFingerprint() {
		t.Fatalf("event %+v", last)
	}
	res, err = e.a.client.TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{
		AgentId: g.AgentID, Transition: tDEACTIVATE, ClientKeyFingerprint: g.IssuerFingerprint()})
	if err != nil || !res.GetNoop() || res.GetAuditId() != "" || len(e.audit.Events(g.AgentID)) != len(evs) {
		t.Fatalf("no-op: %v %v", res, err)
	}
	// 108
	_, err = e.a.client.TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{AgentId: g.AgentID, Transition: tACTIVATE})
	wantReason(t, err, codes.Unauthenticated, "genesis-issuer-cert-required")
	if grpcerr.StatusFor(codes.Unauthenticated) != 401 {
		t.Fatal("401 mapping")
	}
	_, err = e.a.client.TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{AgentId: g.AgentID, Transition: tACTIVATE,
		ClientKeyFingerprint: strings.Repeat("1", 64)})
	wantReason(t, err, codes.PermissionDenied, registry.ReasonIssuerMismatch)
}

func TestResolveAgentBindsSessions(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	a, b := newGenesis(t, 2), newGenesis(t, 2)
	register(t, e.a.client, a, "alice")
	register(t, e.a.client, b, "bob")
	fp := strings.Repeat("c", 64)
	sid := "sess-5mXbR2q9VvLw0kJp3sT7aQ"

	resolve := func(id, session, key string) error {
		_, err := e.a.client.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{AgentId: id, SessionId: session, ClientKeyFingerprint: key})
		return err
	}
	if err := resolve(a.AgentID, sid, fp); err != nil {
		t.Fatalf("first sight must bind: %v", err)
	}
	if err := resolve(a.AgentID, sid, fp); err != nil {
		t.Fatalf("same binding refused: %v", err)
	}
	wantReason(t, resolve(b.AgentID, sid, fp), codes.Unauthenticated, sessionbind.ReasonMismatch)
	wantReason(t, resolve(a.AgentID, sid, strings.Repeat("d", 64)), codes.Unauthenticated, sessionbind.ReasonMismatch)
	wantReason(t, resolve(a.AgentID, sid, ""), codes.Unauthenticated, sessionbind.ReasonMismatch)
	wantReason(t, resolve(a.AgentID, "short", fp), codes.InvalidArgument, sessionbind.ReasonInvalid)
	if err := resolve(b.AgentID, "another-session-id-0123456789", ""); err != nil {
		t.Fatalf("a session without a client certificate binds to the empty identity: %v", err)
	}

	res, err := e.a.client.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{Name: "alice"})
	if err != nil || res.GetAgent().GetAgentId() != a.AgentID {
		t.Fatalf("by name: %v %v", res, err)
	}
	_, err = e.a.client.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{AgentId: a.AgentID, Name: "bob"})
	wantReason(t, err, codes.Unauthenticated, registry.ReasonAliasMismatch)
	res, err = e.a.client.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{Uri: "agtp://" + b.AgentID + "@agents.acme.tld"})
	if err != nil || res.GetAgent().GetAgentId() != b.AgentID {
		t.Fatalf("by Form 1a: %v %v", res, err)
	}
}

// recv reads the next watch message or fails after d.
func recv(t testing.TB, ch <-chan *identityv1.WatchAgentsResponse, d time.Duration) *identityv1.WatchAgentsResponse {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("watch stream ended")
		}
		return m
	case <-time.After(d):
		t.Fatalf("no watch message within %v", d)
	}
	return nil
}

func watch(t testing.TB, c identityv1.IdentityServiceClient) <-chan *identityv1.WatchAgentsResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.WatchAgents(ctx, &identityv1.WatchAgentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *identityv1.WatchAgentsResponse, 1024)
	go func() {
		defer close(ch)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			ch <- m
		}
	}()
	return ch
}

// A revoke on one replica reaches a watcher of another replica within 1 s,
// and the front door's caller rule then refuses the agent with 410.
func TestWatchDeliversRevokeAcrossReplicasWithinOneSecond(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: registry.AuthOpen})
	other := startReplica(t, e, Options{LifecycleAuth: registry.AuthOpen})
	g := newGenesis(t, 2)
	register(t, e.a.client, g, "bot")

	ch := watch(t, other.client)
	if m := recv(t, ch, 2*time.Second); !m.GetResync() {
		t.Fatalf("a watch must start with a resync, got %v", m)
	}
	// A front-door-style cache fed by the watch.
	cache := map[string]*identityv1.AgentRecord{}
	res, err := other.client.ResolveAgent(context.Background(), &identityv1.ResolveAgentRequest{AgentId: g.AgentID})
	if err != nil {
		t.Fatal(err)
	}
	cache[g.AgentID] = res.GetAgent()
	if !callerpolicy.Caller(cache[g.AgentID]).Allowed {
		t.Fatal("active agent refused")
	}

	start := time.Now()
	if _, err := e.a.client.TransitionLifecycle(context.Background(), &identityv1.TransitionLifecycleRequest{
		AgentId: g.AgentID, Transition: tREVOKE, Reason: "compromise-detected"}); err != nil {
		t.Fatal(err)
	}
	// Earlier changes (the registration) may still be in flight; the
	// revoke must follow them within the second.
	var m *identityv1.WatchAgentsResponse
	for {
		m = recv(t, ch, time.Second-time.Since(start))
		if m.GetAgent().GetStatus() == identityv1.AgentStatus_AGENT_STATUS_RETIRED {
			break
		}
		if m.GetAgent().GetRevision() >= 3 {
			t.Fatalf("unexpected watch message %v", m)
		}
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Fatalf("revoke took %v to reach the watcher", elapsed)
	}
	if m.GetAgentId() != g.AgentID {
		t.Fatalf("watch message %v", m)
	}
	cache[m.GetAgentId()] = m.GetAgent()
	if d := callerpolicy.Caller(cache[g.AgentID]); d.Status != 410 {
		t.Fatalf("the cached record must now refuse with 410, got %+v", d)
	}
}

func TestWatchSendsRegistrationsAndTransitionsInOrder(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: registry.AuthOpen})
	ch := watch(t, e.a.client)
	if !recv(t, ch, 2*time.Second).GetResync() {
		t.Fatal("no initial resync")
	}
	g := newGenesis(t, 2)
	register(t, e.a.client, g, "bot")
	if _, err := e.a.client.TransitionLifecycle(context.Background(), &identityv1.TransitionLifecycleRequest{AgentId: g.AgentID, Transition: tDEACTIVATE}); err != nil {
		t.Fatal(err)
	}
	want := []identityv1.AgentStatus{
		identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED, // registered
		identityv1.AgentStatus_AGENT_STATUS_ACTIVE,
		identityv1.AgentStatus_AGENT_STATUS_SUSPENDED,
	}
	var rev uint64
	for i, st := range want {
		m := recv(t, ch, time.Second)
		if m.GetAgent().GetStatus() != st || m.GetAgent().GetRevision() <= rev {
			t.Fatalf("message %d: %v", i, m)
		}
		rev = m.GetAgent().GetRevision()
	}
}

// When the Redis subscription drops, events may be lost, so every watcher
// gets a resync once it is back.
func TestWatchResyncsAfterSubscriptionLoss(t *testing.T) {
	e := newEnv(t, Options{})
	ch := watch(t, e.a.client)
	if !recv(t, ch, 2*time.Second).GetResync() {
		t.Fatal("no initial resync")
	}
	if err := e.rdb.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, ch, 5*time.Second); !m.GetResync() {
		t.Fatalf("want a resync after the subscription was lost, got %v", m)
	}
	// And events flow again.
	g := newGenesis(t, 2)
	register(t, e.a.client, g, "after")
	for {
		m := recv(t, ch, 2*time.Second)
		if m.GetAgentId() == g.AgentID {
			break
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	bad := []Options{
		{},
		{SigningKey: suiteKey, TrustScore: 1.5},
		{SigningKey: suiteKey, Methods: []string{"lower"}},
		{SigningKey: suiteKey, NamespaceMaxAge: 10 * time.Minute},
		{SigningKey: suiteKey, LifecycleAuth: "nobody"},
	}
	for i, o := range bad {
		if err := o.WithDefaults().Validate(); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
	if err := (Options{SigningKey: suiteKey}).WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkResolveAgent(b *testing.B) {
	e := newEnv(b, Options{})
	g := newGenesis(b, 2)
	register(b, e.a.client, g, "bench")
	req := &identityv1.ResolveAgentRequest{AgentId: g.AgentID}
	b.Run("grpc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.a.client.ResolveAgent(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("in-process", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.a.srv.ResolveAgent(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("in-process-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := e.a.srv.ResolveAgent(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("with-session", func(b *testing.B) {
		sreq := &identityv1.ResolveAgentRequest{AgentId: g.AgentID, SessionId: "bench-session-0123456789abcdef"}
		// Only the front door binds sessions; the guard would have
		// admitted this call as it.
		ctx := access.WithCaller(context.Background(), access.FrontDoor)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.a.srv.ResolveAgent(ctx, sreq); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkIdentityDocument(b *testing.B) {
	e := newEnv(b, Options{})
	g := newGenesis(b, 2)
	register(b, e.a.client, g, "bench")
	req := &identityv1.GetIdentityDocumentRequest{AgentId: g.AgentID, Format: "json"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.a.srv.GetIdentityDocument(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// A lifecycle transition's facts about the caller come from who the
// caller proved to be: the front door states the agent's key, an operator
// is known by its certificate (and may not claim an agent's key), any
// other identity is refused. Refusals leave the agent as it was.
func TestLifecycleCallerFactsComeFromTheCaller(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: registry.AuthGenesisIssuer})
	g := newGenesis(t, 2)
	register(t, e.a.client, g, "bot")
	as := func(id access.Identity) identityv1.IdentityServiceClient {
		return identityv1.NewIdentityServiceClient(testkit.ServeGRPCAs(t, id, e.a.srv.Register))
	}
	reporting := access.Identity{Kind: access.System, Name: "reporting"}
	rcns := access.Identity{Kind: access.Service, Name: "rcnssvc"}
	for _, tc := range []struct {
		name   string
		caller access.Identity
		req    *identityv1.TransitionLifecycleRequest
		code   codes.Code
		reason string
		// The event's actor, claimed_actor and authorized_by when the
		// transition runs; "" is absent.
		actor, claimed, by string
	}{
		{name: "an operator claiming the issuer's key", caller: testkit.Operator,
			req:  &identityv1.TransitionLifecycleRequest{Transition: tDEACTIVATE, ClientKeyFingerprint: g.IssuerFingerprint()},
			code: codes.InvalidArgument, reason: registry.ReasonParameterInvalid},
		{name: "an operator claiming an Agent-ID", caller: testkit.Operator,
			req:  &identityv1.TransitionLifecycleRequest{Transition: tDEACTIVATE, CallerAgentId: g.AgentID},
			code: codes.InvalidArgument, reason: registry.ReasonParameterInvalid},
		{name: "an internal system", caller: reporting,
			req:  &identityv1.TransitionLifecycleRequest{Transition: tDEACTIVATE, ClientKeyFingerprint: g.IssuerFingerprint()},
			code: codes.PermissionDenied, reason: access.ReasonNotPermitted},
		{name: "another service stating the issuer's key", caller: rcns,
			req:  &identityv1.TransitionLifecycleRequest{Transition: tDEACTIVATE, ClientKeyFingerprint: g.IssuerFingerprint()},
			code: codes.PermissionDenied, reason: access.ReasonNotPermitted},
		{name: "the front door without the issuer's key", caller: testkit.FrontDoor,
			req:  &identityv1.TransitionLifecycleRequest{Transition: tDEACTIVATE, Actor: "operator/admin"},
			code: codes.Unauthenticated, reason: "genesis-issuer-cert-required"},
		{name: "an operator by its certificate, whatever actor it writes", caller: testkit.Operator,
			req:  &identityv1.TransitionLifecycleRequest{Transition: tDEACTIVATE, Actor: "someone else"},
			code: codes.OK, actor: "operator/admin", by: registry.AuthorizedByOperator},
		{name: "the front door for the issuer", caller: testkit.FrontDoor,
			req:  &identityv1.TransitionLifecycleRequest{Transition: tACTIVATE, ClientKeyFingerprint: g.IssuerFingerprint(), Actor: "agent", CallerAgentId: g.AgentID},
			code: codes.OK, claimed: "agent", by: registry.AuthorizedByGenesisIssuer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.audit.Events(g.AgentID))
			tc.req.AgentId = g.AgentID
			res, err := as(tc.caller).TransitionLifecycle(context.Background(), tc.req)
			if tc.code != codes.OK {
				wantReason(t, err, tc.code, tc.reason)
				if n := len(e.audit.Events(g.AgentID)); n != before {
					t.Fatalf("a refused transition appended %d events", n-before)
				}
				return
			}
			if err != nil || res.GetNoop() {
				t.Fatalf("%v %v", res, err)
			}
			evs := e.audit.Events(g.AgentID)
			last := evs[len(evs)-1]
			for k, want := range map[string]string{"actor": tc.actor, "claimed_actor": tc.claimed, "authorized_by": tc.by} {
				if got, _ := last.Claims[k].(string); got != want {
					t.Fatalf("%s %v, want %q", k, last.Claims[k], want)
				}
			}
		})
	}
	// Session binding states the agent's key: the front door's fact.
	_, err := as(testkit.Operator).ResolveAgent(context.Background(), &identityv1.ResolveAgentRequest{
		AgentId: g.AgentID, SessionId: "sess-5mXbR2q9VvLw0kJp3sT7aQ", ClientKeyFingerprint: g.IssuerFingerprint()})
	wantReason(t, err, codes.PermissionDenied, access.ReasonNotPermitted)
}

// TestLifecycleEventStatesHowTheCallWasAuthorised: the signed event says
// how the call was authorised (authorized_by) and with which client key;
// the actor an AGTP caller writes is only claimed_actor, so the Genesis
// issuer writing "operator/admin" is told apart from the operator.
func TestLifecycleEventStatesHowTheCallWasAuthorised(t *testing.T) {
	opFP := strings.Repeat("ab", 32)
	e := newEnv(t, Options{LifecycleAuth: registry.AuthGenesisIssuer, OperatorFingerprints: []string{opFP}})
	operator := identityv1.NewIdentityServiceClient(testkit.ServeGRPCAs(t, testkit.Operator, e.a.srv.Register))
	for _, tc := range []struct {
		name   string
		c      identityv1.IdentityServiceClient
		fp     func(g *genesis.Genesis) string // the front door's verified client key
		claims map[string]any                  // nil: absent
	}{
		{name: "the Genesis issuer writing an operator's actor", c: e.a.client,
			fp:     func(g *genesis.Genesis) string { return g.IssuerFingerprint() },
			claims: map[string]any{"authorized_by": registry.AuthorizedByGenesisIssuer, "actor": nil, "claimed_actor": "operator/admin"}},
		{name: "an operator by its certificate", c: operator,
			fp:     func(*genesis.Genesis) string { return "" },
			claims: map[string]any{"authorized_by": registry.AuthorizedByOperator, "actor": "operator/admin", "claimed_actor": nil, "client_key_fingerprint": nil}},
		{name: "an allowlisted operator key through the front door", c: e.a.client,
			fp: func(*genesis.Genesis) string { return opFP },
			claims: map[string]any{"authorized_by": registry.AuthorizedByOperatorFingerprint, "actor": nil, "claimed_actor": "operator/admin",
				"client_key_fingerprint": opFP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGenesis(t, 2)
			register(t, e.a.client, g, "")
			req := &identityv1.TransitionLifecycleRequest{AgentId: g.AgentID, Transition: tDEACTIVATE, Actor: "operator/admin"}
			if fp := tc.fp(g); fp != "" {
				req.ClientKeyFingerprint, req.CallerAgentId = fp, g.AgentID
			}
			res, err := tc.c.TransitionLifecycle(context.Background(), req)
			if err != nil || res.GetNoop() {
				t.Fatalf("%v %v", res, err)
			}
			evs := e.audit.Events(g.AgentID)
			last := evs[len(evs)-1]
			want := maps.Clone(tc.claims)
			if _, ok := want["client_key_fingerprint"]; !ok {
				want["client_key_fingerprint"] = req.ClientKeyFingerprint
			}
			for k, w := range want {
				if got := last.Claims[k]; got != w {
					t.Errorf("%s %v, want %v", k, got, w)
				}
			}
		})
	}
}

// TestLabelTakenOverCannotBeReinstated: once a deprecated agent's label
// was registered to another agent (core §6.5.9), the old agent may not
// return to active under it, by REINSTATE or ACTIVATE, whoever asks; the
// namespace lists the label once. An agent whose label was not taken
// over is reinstated as before.
func TestLabelTakenOverCannotBeReinstated(t *testing.T) {
	operator := func(e *env) identityv1.IdentityServiceClient {
		return identityv1.NewIdentityServiceClient(testkit.ServeGRPCAs(t, testkit.Operator, e.a.srv.Register))
	}
	for _, tc := range []struct {
		name      string
		method    identityv1.LifecycleTransition
		issuer    bool // through the front door with the issuer's key, else as an operator
		takenOver bool
	}{
		{name: "REINSTATE by an operator after takeover", method: tREINSTATE, takenOver: true},
		{name: "ACTIVATE by the issuer after takeover", method: tACTIVATE, issuer: true, takenOver: true},
		{name: "REINSTATE by the issuer, label kept", method: tREINSTATE, issuer: true},
		{name: "ACTIVATE by an operator, label kept", method: tACTIVATE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Options{LifecycleAuth: registry.AuthGenesisIssuer, LabelReuseAfter: time.Millisecond})
			ctx := context.Background()
			op := operator(e)
			old := newGenesis(t, 2)
			register(t, e.a.client, old, "helper")
			if _, err := op.TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{AgentId: old.AgentID, Transition: tDEPRECATE}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
			holder := old.AgentID
			if tc.takenOver {
				newer := newGenesis(t, 2)
				register(t, e.a.client, newer, "helper")
				holder = newer.AgentID
			}
			before := len(e.audit.Events(old.AgentID))
			req := &identityv1.TransitionLifecycleRequest{AgentId: old.AgentID, Transition: tc.method}
			c := op
			if tc.issuer {
				c, req.ClientKeyFingerprint, req.CallerAgentId = e.a.client, old.IssuerFingerprint(), old.AgentID
			}
			res, err := c.TransitionLifecycle(ctx, req)
			if tc.takenOver {
				wantReason(t, err, codes.Aborted, registry.ReasonAgentNameTaken)
				if n := len(e.audit.Events(old.AgentID)); n != before {
					t.Fatalf("a refused transition appended %d events", n-before)
				}
				r, err := e.a.client.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{AgentId: old.AgentID})
				if err != nil || r.GetAgent().GetStatus() != identityv1.AgentStatus_AGENT_STATUS_DEPRECATED {
					t.Fatalf("old agent after the refusal: %v %v", r.GetAgent(), err)
				}
			} else if err != nil || res.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_ACTIVE {
				t.Fatalf("%v %v", res, err)
			}

			r, err := e.a.client.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{Name: "helper"})
			if err != nil || r.GetAgent().GetAgentId() != holder {
				t.Fatalf("helper resolves to %v (%v), want %s", r.GetAgent().GetAgentId(), err, holder)
			}
			ns, err := e.a.client.GetNamespaceDocument(ctx, &identityv1.GetNamespaceDocumentRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Agents []struct {
					Label string `json:"agent_label"`
					ID    string `json:"canonical_id"`
				} `json:"agents"`
			}
			if err := json.Unmarshal([]byte(ns.GetDocument()), &doc); err != nil {
				t.Fatal(err)
			}
			var helpers []string
			for _, a := range doc.Agents {
				if a.Label == "helper" {
					helpers = append(helpers, a.ID)
				}
			}
			if !slices.Equal(helpers, []string{holder}) {
				t.Fatalf("namespace lists helper as %v, want only %s", helpers, holder)
			}
		})
	}
}

// TestIdentityDocumentListsTheFrontDoorsMethods: the methods the front
// door accepts for the agent (its Supported-Methods narrowed to the
// agent: QUOTE, the Tier 2 built-ins, the endpoints' methods) are in the
// identity document with the floor and the configured ones, once each;
// only the front door may name them, and only method tokens.
func TestIdentityDocumentListsTheFrontDoorsMethods(t *testing.T) {
	e := newEnv(t, Options{Methods: []string{"BOOK"}})
	g := newGenesis(t, 2)
	register(t, e.a.client, g, "methods-bot")
	get := func(c identityv1.IdentityServiceClient, format string, methods ...string) (map[string]any, error) {
		res, err := c.GetIdentityDocument(context.Background(), &identityv1.GetIdentityDocumentRequest{AgentId: g.AgentID, Format: format, Methods: methods})
		if err != nil {
			return nil, err
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(res.GetDocument()), &doc); err != nil {
			t.Fatal(err)
		}
		return doc, nil
	}
	doc, err := get(e.a.client, "json", "QUOTE", "MONITOR", "RETRY", "CREATE", "QUERY", "BOOK")
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, m := range doc["methods"].([]any) {
		methods = append(methods, m.(string))
	}
	want := append(agtp.FloorMethods(), "BOOK", "QUOTE", "MONITOR", "RETRY", "CREATE")
	if !slices.Equal(methods, want) {
		t.Fatalf("methods %v, want %v", methods, want)
	}
	// A document without methods named lists the floor and the configured
	// ones: what one request names does not stick.
	doc, err = get(e.a.client, "json")
	if err != nil || len(doc["methods"].([]any)) != len(agtp.FloorMethods())+1 {
		t.Fatalf("methods %v (%v), want the floor and BOOK", doc["methods"], err)
	}
	operator := identityv1.NewIdentityServiceClient(testkit.ServeGRPCAs(t, testkit.Operator, e.a.srv.Register))
	for _, tc := range []struct {
		name    string
		c       identityv1.IdentityServiceClient
		methods []string
		reason  string
	}{
		{"an operator names methods", operator, []string{"QUOTE"}, ReasonMethodsFrontDoorOnly},
		{"a lowercase token", e.a.client, []string{"quote"}, ReasonMethodInvalid},
		{"too many", e.a.client, slices.Repeat([]string{"QUOTE"}, maxRequestMethods+1), ReasonMethodInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := get(tc.c, "json", tc.methods...)
			wantReason(t, err, codes.InvalidArgument, tc.reason)
		})
	}
}

// TestSessionStatusAndCheckpoint: SUSPEND and RESUME answer the status as
// the SessionStatus enum and as the first release's string, and the
// checkpoint comes back as it was sent, whichever field carried it.
func TestSessionStatusAndCheckpoint(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	g := newGenesis(t, 2)
	register(t, e.a.client, g, "sleeper")
	const checkpoint = `{"step": 3, "notes": ["a", "b"]}`
	for i, tc := range []struct {
		name string
		req  func(*identityv1.SuspendSessionRequest)
	}{
		{"checkpoint", func(r *identityv1.SuspendSessionRequest) { r.Checkpoint = checkpoint }},
		//lint:ignore SA1019 the first release's field must still be honoured
		{"checkpoint_json only", func(r *identityv1.SuspendSessionRequest) { r.CheckpointJson = []byte(checkpoint) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := fmt.Sprintf("sess-5mXbR2q9VvLw0kJp3sT7a%d", i)
			if _, err := e.a.client.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{AgentId: g.AgentID, SessionId: sid}); err != nil {
				t.Fatal(err)
			}
			req := &identityv1.SuspendSessionRequest{SessionId: sid, AgentId: g.AgentID, Reason: "awaiting_input"}
			tc.req(req)
			s, err := e.a.client.SuspendSession(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			//lint:ignore SA1019 the first release's field must still be filled
			if s.GetSessionStatus() != identityv1.SessionStatus_SESSION_STATUS_SUSPENDED || s.GetStatus() != "suspended" {
				t.Fatalf("suspend: %v", s)
			}
			r, err := e.a.client.ResumeSession(ctx, &identityv1.ResumeSessionRequest{SessionId: sid, AgentId: g.AgentID, ResumptionNonce: s.GetResumptionNonce()})
			if err != nil {
				t.Fatal(err)
			}
			//lint:ignore SA1019 the first release's fields must still be filled
			if r.GetSessionStatus() != identityv1.SessionStatus_SESSION_STATUS_ACTIVE || r.GetStatus() != "active" || r.GetCheckpoint() != checkpoint || string(r.GetCheckpointJson()) != checkpoint {
				t.Fatalf("resume: %v", r)
			}
		})
	}
}
