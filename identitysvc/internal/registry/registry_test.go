package registry

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/identitysvc/internal/testaudit"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

const (
	tACTIVATE   = identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_ACTIVATE
	tDEACTIVATE = identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEACTIVATE
	tREINSTATE  = identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REINSTATE
	tREVOKE     = identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REVOKE
	tDEPRECATE  = identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEPRECATE
)

type env struct {
	reg   *Registry
	audit *testaudit.Server
	rdb   *redis.Client
}

func newEnv(t testing.TB, opts Options) *env {
	t.Helper()
	rdb := testkit.StartRedis(t).Client(t)
	audit, client := testaudit.Start(t)
	reg, err := New(rdb, slog.New(slog.NewTextHandler(io.Discard, nil)), client, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &env{reg: reg, audit: audit, rdb: rdb}
}

type agentKey struct {
	g    *genesis.Genesis
	priv ed25519.PrivateKey
}

func newGenesis(t testing.TB, owner string, tier int) agentKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	tpl := genesis.Template{
		Owner: owner, Archetype: genesis.ArchetypeExecutor, GovernanceZone: "development",
		Scope: []string{"orders:query", "orders:create"}, TrustTier: tier,
	}
	if tier == 1 {
		tpl.VerificationPath, tpl.OrgDomain = genesis.PathDNSAnchored, "acme.tld"
	}
	g, err := genesis.Create(tpl, priv)
	if err != nil {
		t.Fatal(err)
	}
	return agentKey{g: g, priv: priv}
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

// keys lists every key in Redis.
func keys(t testing.TB, rdb *redis.Client) []string {
	t.Helper()
	k, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestDecideFollowsTheLifecycleTable(t *testing.T) {
	type want struct {
		to, event, reason string
		noop              bool
	}
	noop := want{noop: true}
	impossible := func(r string) want { return want{reason: r} }
	cases := []struct {
		t       identityv1.LifecycleTransition
		from    string
		history bool
		want    want
	}{
		{tACTIVATE, "pending", false, want{to: "active", event: EventGenesisIssued}},
		{tACTIVATE, "active", true, noop},
		{tACTIVATE, "suspended", true, want{to: "active", event: EventLifecycleReinstated}},
		{tACTIVATE, "deprecated", true, want{to: "active", event: EventLifecycleReinstated}},
		{tACTIVATE, "retired", true, impossible(ReasonAgentRetired)},
		{tDEACTIVATE, "active", true, want{to: "suspended", event: EventLifecycleSuspended}},
		{tDEACTIVATE, "suspended", true, noop},
		{tDEACTIVATE, "deprecated", true, noop}, // any non-active state (docs/decisions.md#D-deactivate-deprecated)
		{tDEACTIVATE, "retired", true, noop},
		{tDEACTIVATE, "pending", false, noop},
		{tREINSTATE, "suspended", true, want{to: "active", event: EventLifecycleReinstated}},
		{tREINSTATE, "deprecated", true, want{to: "active", event: EventLifecycleReinstated}},
		{tREINSTATE, "active", true, noop},
		{tREINSTATE, "retired", true, impossible(ReasonAgentRetired)},
		{tREINSTATE, "pending", false, impossible(ReasonAgentNotActivated)},
		{tREVOKE, "active", true, want{to: "retired", event: EventGenesisRevoked}},
		{tREVOKE, "suspended", true, want{to: "retired", event: EventGenesisRevoked}},
		{tREVOKE, "deprecated", true, want{to: "retired", event: EventGenesisRevoked}},
		{tREVOKE, "pending", false, want{to: "retired", event: EventGenesisRevoked}},
		{tREVOKE, "retired", true, noop},
		{tDEPRECATE, "active", true, want{to: "deprecated", event: EventLifecycleDeprecated}},
		{tDEPRECATE, "suspended", true, want{to: "deprecated", event: EventLifecycleDeprecated}},
		{tDEPRECATE, "deprecated", true, noop},
		{tDEPRECATE, "retired", true, impossible(ReasonAgentRetired)},
		{tDEPRECATE, "pending", false, impossible(ReasonAgentNotActivated)},
	}
	for _, c := range cases {
		t.Run(MethodName(c.t)+"_from_"+c.from, func(t *testing.T) {
			o := decide(c.t, c.from, c.history)
			got := want{to: o.to, event: o.event, noop: o.noop, reason: o.reason}
			if got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestRegisterStoresPendingAgentAndIndexesName(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	k := newGenesis(t, "Acme", 2)
	a, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Name: "orders-bot"})
	if err != nil {
		t.Fatal(err)
	}
	rec := a.Record
	if rec.GetAgentId() != k.g.AgentID || rec.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED || rec.GetRevision() != 1 {
		t.Fatalf("unexpected record %v", rec)
	}
	if rec.GetIssuerFingerprint() != k.g.IssuerFingerprint() || rec.GetTrustTier() != 2 ||
		rec.GetVerificationPath() != "org-asserted" || rec.GetTrustWarning() != genesis.TrustWarningVerificationIncomplete {
		t.Fatalf("trust data not derived from the Genesis: %v", rec)
	}
	if id, err := e.reg.LookupName(ctx, "orders-bot"); err != nil || id != k.g.AgentID {
		t.Fatalf("name lookup: %s, %v", id, err)
	}
	if n, _ := e.rdb.SCard(ctx, rediskeys.AgentIndex).Result(); n != 1 {
		t.Fatalf("index has %d members", n)
	}
	if len(e.audit.Events(k.g.AgentID)) != 0 {
		t.Fatal("registration without activate must not sign an event")
	}
	if got := callerpolicy.Caller(rec); got.Status != 401 || got.Reason != "agent-unauthenticated" {
		t.Fatalf("a never-activated caller must get 401 agent-unauthenticated, got %+v", got)
	}
}

func TestRegisterWithActivateIssuesGenesisEvent(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	k := newGenesis(t, "Acme", 2)
	a, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Activate: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Record.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_ACTIVE {
		t.Fatalf("status %v", a.Record.GetStatus())
	}
	if a.Record.GetName() != "agent-"+k.g.AgentID[:12] {
		t.Fatalf("default name %q", a.Record.GetName())
	}
	evs := e.audit.Events(k.g.AgentID)
	if len(evs) != 1 || evs[0].EventType != EventGenesisIssued {
		t.Fatalf("events %+v", evs)
	}
	if g, ok := evs[0].Claims["genesis"].(map[string]any); !ok || g["agent_id"] != k.g.AgentID {
		t.Fatal("the genesis event must carry the full Agent Genesis (core §6.5.6)")
	}
	if evs[0].Claims["previous_status"] != "pending" || evs[0].Claims["new_status"] != "active" {
		t.Fatalf("claims %v", evs[0].Claims)
	}
}

func TestRegisterRefusesBadInputAndStoresNothing(t *testing.T) {
	ctx := context.Background()
	good := newGenesis(t, "Acme", 2)
	tampered := strings.Replace(string(good.g.Bytes()), `"owner":"Acme"`, `"owner":"Mallory"`, 1)
	// A signature by the right key over other bytes.
	sig := base64.RawURLEncoding.EncodeToString(ed25519.Sign(good.priv, []byte("something else")))
	badSig := strings.Replace(string(good.g.Bytes()), base64.RawURLEncoding.EncodeToString(good.g.Signature), sig, 1)
	unsigned, err := genesis.New(genesis.Template{Owner: "Acme", Archetype: "executor", GovernanceZone: "dev",
		Scope: []string{"a:b"}, TrustTier: 2}, good.priv.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name   string
		req    RegisterRequest
		code   codes.Code
		reason string
	}{
		{"malformed JSON", RegisterRequest{GenesisJSON: []byte(`{"owner":`)}, codes.InvalidArgument, genesis.ReasonMalformed},
		{"missing field", RegisterRequest{GenesisJSON: []byte(`{"owner":"x"}`)}, codes.InvalidArgument, genesis.ReasonFieldMissing},
		{"hash mismatch", RegisterRequest{GenesisJSON: []byte(tampered)}, codes.FailedPrecondition, genesis.ReasonHashMismatch},
		{"bad signature", RegisterRequest{GenesisJSON: []byte(badSig)}, codes.FailedPrecondition, genesis.ReasonSignatureInvalid},
		{"unsigned", RegisterRequest{GenesisJSON: unsigned.Bytes()}, codes.InvalidArgument, genesis.ReasonFieldMissing},
		{"bad name", RegisterRequest{GenesisJSON: good.g.Bytes(), Name: "no spaces"}, codes.InvalidArgument, ReasonAgentNameInvalid},
		{"tier 3 without X- label", RegisterRequest{GenesisJSON: newGenesis(t, "Lab", 3).g.Bytes(), Name: "lab"}, codes.InvalidArgument, ReasonExperimentalLabel},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, Options{})
			_, err := e.reg.Register(ctx, c.req)
			wantReason(t, err, c.code, c.reason)
			if k := keys(t, e.rdb); len(k) != 0 {
				t.Fatalf("refused registration stored %v", k)
			}
		})
	}
}

func TestRegisterRefusesDuplicateAsCollision(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	k := newGenesis(t, "Acme", 2)
	if _, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Name: "first", Activate: true}); err != nil {
		t.Fatal(err)
	}
	before := keys(t, e.rdb)
	_, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Name: "second"})
	wantReason(t, err, codes.Aborted, ReasonAgentIDCollision)
	if after := keys(t, e.rdb); len(after) != len(before) {
		t.Fatalf("collision stored keys: %v -> %v", before, after)
	}
	if _, err := e.reg.LookupName(ctx, "second"); err == nil {
		t.Fatal("the colliding registration's name was stored")
	}
	if n := len(e.audit.Events(k.g.AgentID)); n != 1 {
		t.Fatalf("%d events after a collision, want 1", n)
	}
}

func TestRegisterNeverReusesRetiredID(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: AuthOpen})
	ctx := context.Background()
	k := newGenesis(t, "Acme", 2)
	if _, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Name: "old", Activate: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Transition(ctx, TransitionRequest{AgentID: k.g.AgentID, Transition: tREVOKE, Reason: "compromise-detected"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Name: "reborn", Activate: true})
	wantReason(t, err, codes.Aborted, ReasonAgentIDRetired)
	a, err := e.reg.Get(ctx, k.g.AgentID)
	if err != nil || a.Record.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_RETIRED {
		t.Fatalf("retired record changed: %v %v", a, err)
	}
}

func TestRegisterNameRules(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := &now
	e := newEnv(t, Options{LifecycleAuth: AuthOpen, Now: func() time.Time { return *clock }})
	ctx := context.Background()
	a := newGenesis(t, "Acme", 2)
	if _, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: a.g.Bytes(), Name: "bookbot", Activate: true}); err != nil {
		t.Fatal(err)
	}
	b := newGenesis(t, "Beta", 2)
	_, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: b.g.Bytes(), Name: "bookbot"})
	wantReason(t, err, codes.Aborted, ReasonAgentNameTaken)
	if _, err := e.reg.Get(ctx, b.g.AgentID); err == nil {
		t.Fatal("the refused agent was stored")
	}

	// core §6.5.9: the label is reusable 90 days after a revocation.
	if _, err := e.reg.Transition(ctx, TransitionRequest{AgentID: a.g.AgentID, Transition: tREVOKE, Reason: "retire"}); err != nil {
		t.Fatal(err)
	}
	*clock = now.Add(89 * 24 * time.Hour)
	_, err = e.reg.Register(ctx, RegisterRequest{GenesisJSON: b.g.Bytes(), Name: "bookbot"})
	wantReason(t, err, codes.Aborted, ReasonAgentNameTaken)
	*clock = now.Add(91 * 24 * time.Hour)
	if _, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: b.g.Bytes(), Name: "bookbot"}); err != nil {
		t.Fatalf("label not reusable after 90 days: %v", err)
	}
	if id, _ := e.reg.LookupName(ctx, "bookbot"); id != b.g.AgentID {
		t.Fatalf("label maps to %s", id)
	}
	if old, err := e.reg.Get(ctx, a.g.AgentID); err != nil || old.Record.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_RETIRED {
		t.Fatal("the retired agent must stay resolvable by its canonical ID")
	}

	x := newGenesis(t, "Lab", 3)
	if _, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: x.g.Bytes(), Name: "X-lab"}); err != nil {
		t.Fatalf("tier 3 with an X- label: %v", err)
	}
}

func TestRegisterRollsBackWhenActivationEventFails(t *testing.T) {
	e := newEnv(t, Options{})
	e.audit.Append = func(context.Context, *auditv1.AppendLifecycleEventRequest) (*auditv1.AppendLifecycleEventResponse, error) {
		return nil, fmt.Errorf("audit down")
	}
	k := newGenesis(t, "Acme", 2)
	_, err := e.reg.Register(context.Background(), RegisterRequest{GenesisJSON: k.g.Bytes(), Name: "bot", Activate: true})
	wantReason(t, err, codes.Unavailable, ReasonAuditUnavailable)
	if k := keys(t, e.rdb); len(k) != 0 {
		t.Fatalf("failed registration left %v", k)
	}
}

// lifecycle runs one transition and fails the test on error.
func lifecycle(t *testing.T, e *env, id string, tr identityv1.LifecycleTransition, reason string) *TransitionResult {
	t.Helper()
	res, err := e.reg.Transition(context.Background(), TransitionRequest{AgentID: id, Transition: tr, Reason: reason, Actor: "test"})
	if err != nil {
		t.Fatalf("%s: %v", MethodName(tr), err)
	}
	return res
}

// The lifecycle assertions core 102–107 (core §7.2.14–18), at the registry
// layer, with the caller rules the front door applies to the result.
func TestLifecycleAssertions(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: AuthOpen})
	ctx := context.Background()
	k := newGenesis(t, "Acme", 2)
	id := k.g.AgentID
	if _, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Activate: true}); err != nil {
		t.Fatal(err)
	}
	events := func() int { return len(e.audit.Events(id)) }

	// 102: ACTIVATE on active is a no-op without an event.
	res := lifecycle(t, e, id, tACTIVATE, "")
	if !res.Noop || res.AuditID != "" || events() != 1 {
		t.Fatalf("102: %+v, %d events", res, events())
	}

	// 103: DEACTIVATE → suspended, and the agent's traffic gets 503.
	res = lifecycle(t, e, id, tDEACTIVATE, "operator-pause")
	if res.Noop || res.Status != identityv1.AgentStatus_AGENT_STATUS_SUSPENDED ||
		res.PreviousStatus != identityv1.AgentStatus_AGENT_STATUS_ACTIVE ||
		res.EventType != EventLifecycleSuspended || res.AuditID == "" {
		t.Fatalf("103: %+v", res)
	}
	if d := callerpolicy.Caller(res.Agent.Record); d.Status != 503 || d.State != "suspended" {
		t.Fatalf("103: suspended caller got %+v", d)
	}
	if d := callerpolicy.Target(res.Agent.Record); d.Status != 503 || d.Fields()["lifecycle_state"] != "suspended" {
		t.Fatalf("103: suspended target got %+v", d)
	}

	// 104: REINSTATE → active, traffic served again.
	res = lifecycle(t, e, id, tREINSTATE, "operator-resume")
	if res.Status != identityv1.AgentStatus_AGENT_STATUS_ACTIVE || res.EventType != EventLifecycleReinstated {
		t.Fatalf("104: %+v", res)
	}
	if d := callerpolicy.Caller(res.Agent.Record); !d.Allowed {
		t.Fatalf("104: reinstated caller refused: %+v", d)
	}

	// 107: DEPRECATE → deprecated, still served; again → no-op.
	succ := newGenesis(t, "Acme", 2).g.AgentID
	deadline := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	res, err := e.reg.Transition(ctx, TransitionRequest{AgentID: id, Transition: tDEPRECATE, Reason: "v2",
		SuccessorAgentID: succ, MigrationDeadline: deadline})
	if err != nil || res.Status != identityv1.AgentStatus_AGENT_STATUS_DEPRECATED || res.EventType != EventLifecycleDeprecated {
		t.Fatalf("107: %+v %v", res, err)
	}
	if d := callerpolicy.Caller(res.Agent.Record); !d.Allowed || !d.Deprecated || d.SuccessorAgentID != succ {
		t.Fatalf("107: deprecated caller must be served with the signal: %+v", d)
	}
	if !res.Agent.Deadline.Equal(deadline) {
		t.Fatalf("107: migration deadline %v", res.Agent.Deadline)
	}
	if res = lifecycle(t, e, id, tDEPRECATE, ""); !res.Noop {
		t.Fatal("107: second DEPRECATE must be a no-op")
	}
	// docs/decisions.md#D-deactivate-deprecated: DEACTIVATE on deprecated is
	// a no-op.
	if res = lifecycle(t, e, id, tDEACTIVATE, ""); !res.Noop {
		t.Fatal("DEACTIVATE on a deprecated agent must be a no-op")
	}

	// 105: REVOKE without a reason is 400.
	_, err = e.reg.Transition(ctx, TransitionRequest{AgentID: id, Transition: tREVOKE})
	wantReason(t, err, codes.InvalidArgument, ReasonReasonRequired)

	// 106: REVOKE → retired and 410; REINSTATE → 422; REVOKE again → no-op.
	res = lifecycle(t, e, id, tREVOKE, "principal-request")
	if res.Status != identityv1.AgentStatus_AGENT_STATUS_RETIRED || res.PreviousStatus != identityv1.AgentStatus_AGENT_STATUS_DEPRECATED ||
		res.EventType != EventGenesisRevoked {
		t.Fatalf("106: %+v", res)
	}
	if d := callerpolicy.Caller(res.Agent.Record); d.Status != 410 || d.RevokedAt.IsZero() {
		t.Fatalf("106: retired caller got %+v", d)
	}
	_, err = e.reg.Transition(ctx, TransitionRequest{AgentID: id, Transition: tREINSTATE})
	wantReason(t, err, codes.FailedPrecondition, ReasonTransitionImpossible)
	_, err = e.reg.Transition(ctx, TransitionRequest{AgentID: id, Transition: tACTIVATE})
	wantReason(t, err, codes.FailedPrecondition, ReasonTransitionImpossible)
	if res = lifecycle(t, e, id, tREVOKE, "again"); !res.Noop {
		t.Fatal("106: second REVOKE must be a no-op")
	}

	// One event per real transition: issued, suspended, reinstated,
	// deprecated, revoked.
	want := []string{EventGenesisIssued, EventLifecycleSuspended, EventLifecycleReinstated, EventLifecycleDeprecated, EventGenesisRevoked}
	evs := e.audit.Events(id)
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d", len(evs), len(want))
	}
	for i, ev := range evs {
		if ev.EventType != want[i] {
			t.Fatalf("event %d is %s, want %s", i, ev.EventType, want[i])
		}
	}
}

func TestActivateAfterSuspendOrDeprecateIsReinstatement(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: AuthOpen})
	k := newGenesis(t, "Acme", 2)
	if _, err := e.reg.Register(context.Background(), RegisterRequest{GenesisJSON: k.g.Bytes(), Activate: true}); err != nil {
		t.Fatal(err)
	}
	lifecycle(t, e, k.g.AgentID, tDEACTIVATE, "")
	if res := lifecycle(t, e, k.g.AgentID, tACTIVATE, ""); res.EventType != EventLifecycleReinstated {
		t.Fatalf("ACTIVATE with history must be agent-lifecycle-reinstated, got %s", res.EventType)
	}
	dep, err := e.reg.Transition(context.Background(), TransitionRequest{AgentID: k.g.AgentID, Transition: tDEPRECATE,
		SuccessorAgentID: strings.Repeat("ab", 32)})
	if err != nil || dep.Agent.Record.GetSuccessorAgentId() == "" {
		t.Fatalf("deprecate: %v", err)
	}
	res := lifecycle(t, e, k.g.AgentID, tACTIVATE, "cancel deprecation")
	if res.EventType != EventLifecycleReinstated || res.Agent.Record.GetSuccessorAgentId() != "" {
		t.Fatalf("cancelled deprecation must clear the successor: %+v", res.Agent.Record)
	}
}

func TestTransitionRefusesBadRequests(t *testing.T) {
	e := newEnv(t, Options{})
	k := newGenesis(t, "Acme", 2)
	if _, err := e.reg.Register(context.Background(), RegisterRequest{GenesisJSON: k.g.Bytes(), Activate: true}); err != nil {
		t.Fatal(err)
	}
	id := k.g.AgentID
	cases := []struct {
		name   string
		req    TransitionRequest
		code   codes.Code
		reason string
	}{
		{"malformed agent id", TransitionRequest{AgentID: "xyz", Transition: tACTIVATE}, codes.InvalidArgument, ReasonInvalidCanonicalID},
		{"no transition", TransitionRequest{AgentID: id}, codes.InvalidArgument, ReasonTransitionInvalid},
		{"unknown agent", TransitionRequest{AgentID: strings.Repeat("0", 64), Transition: tACTIVATE}, codes.NotFound, ReasonAgentNotFound},
		{"successor on DEACTIVATE", TransitionRequest{AgentID: id, Transition: tDEACTIVATE, SuccessorAgentID: strings.Repeat("a", 64)}, codes.InvalidArgument, ReasonParameterInvalid},
		{"successor is itself", TransitionRequest{AgentID: id, Transition: tDEPRECATE, SuccessorAgentID: id}, codes.InvalidArgument, ReasonParameterInvalid},
		{"deadline on REVOKE", TransitionRequest{AgentID: id, Transition: tREVOKE, Reason: "x", MigrationDeadline: time.Now()}, codes.InvalidArgument, ReasonParameterInvalid},
		{"huge reason", TransitionRequest{AgentID: id, Transition: tREVOKE, Reason: strings.Repeat("r", maxText+1)}, codes.InvalidArgument, ReasonParameterInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.reg.Transition(context.Background(), c.req)
			wantReason(t, err, c.code, c.reason)
		})
	}
	if n := len(e.audit.Events(id)); n != 1 {
		t.Fatalf("refused calls signed events: %d", n)
	}
}

// core assertion 108 and core §7.2.19.
func TestLifecycleAuthorisationGenesisIssuer(t *testing.T) {
	operator := strings.Repeat("0f", 32)
	e := newEnv(t, Options{LifecycleAuth: AuthGenesisIssuer, OperatorFingerprints: []string{operator}})
	ctx := context.Background()
	k := newGenesis(t, "Acme", 2)
	id := k.g.AgentID
	if _, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Activate: true}); err != nil {
		t.Fatal(err)
	}
	stranger := newGenesis(t, "Other", 2).g.IssuerFingerprint()

	_, err := e.reg.Transition(ctx, TransitionRequest{AgentID: id, Transition: tDEACTIVATE})
	wantReason(t, err, codes.Unauthenticated, ReasonCertRequired)
	_, err = e.reg.Transition(ctx, TransitionRequest{AgentID: id, Transition: tDEACTIVATE, ClientKeyFingerprint: stranger})
	wantReason(t, err, codes.PermissionDenied, ReasonIssuerMismatch)
	if _, _, _, md := grpcerr.Reason(err); md["lifecycle_auth"] != AuthGenesisIssuer {
		t.Fatalf("the refusal must name the mode, got %v", md)
	}
	a, _ := e.reg.Get(ctx, id)
	if a.Record.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_ACTIVE || len(e.audit.Events(id)) != 1 {
		t.Fatal("an unauthorised call changed state or signed an event")
	}

	res, err := e.reg.Transition(ctx, TransitionRequest{AgentID: id, Transition: tDEACTIVATE, ClientKeyFingerprint: k.g.IssuerFingerprint()})
	if err != nil || res.Status != identityv1.AgentStatus_AGENT_STATUS_SUSPENDED {
		t.Fatalf("the Genesis issuer was refused: %v", err)
	}
	res, err = e.reg.Transition(ctx, TransitionRequest{AgentID: id, Transition: tREINSTATE, ClientKeyFingerprint: operator})
	if err != nil || res.Status != identityv1.AgentStatus_AGENT_STATUS_ACTIVE {
		t.Fatalf("an allowlisted operator was refused: %v", err)
	}
}

func TestLifecycleAuthorisationOpen(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: AuthOpen})
	k := newGenesis(t, "Acme", 2)
	if _, err := e.reg.Register(context.Background(), RegisterRequest{GenesisJSON: k.g.Bytes(), Activate: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Transition(context.Background(), TransitionRequest{AgentID: k.g.AgentID, Transition: tDEACTIVATE}); err != nil {
		t.Fatalf("open mode refused an anonymous caller: %v", err)
	}
}

// Lifecycle calls are authorised unless a deployment opens them on
// purpose: the zero Options mean genesis_issuer.
func TestLifecycleAuthorisationDefaultsToGenesisIssuer(t *testing.T) {
	if got := (Options{}).WithDefaults().LifecycleAuth; got != AuthGenesisIssuer {
		t.Fatalf("default lifecycle auth %q, want %q", got, AuthGenesisIssuer)
	}
	e := newEnv(t, Options{})
	k := newGenesis(t, "Acme", 2)
	if _, err := e.reg.Register(context.Background(), RegisterRequest{GenesisJSON: k.g.Bytes(), Activate: true}); err != nil {
		t.Fatal(err)
	}
	_, err := e.reg.Transition(context.Background(), TransitionRequest{AgentID: k.g.AgentID, Transition: tDEACTIVATE})
	wantReason(t, err, codes.Unauthenticated, ReasonCertRequired)
}

func TestTransitionLeavesStateUnchangedWhenAuditFails(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: AuthOpen})
	k := newGenesis(t, "Acme", 2)
	if _, err := e.reg.Register(context.Background(), RegisterRequest{GenesisJSON: k.g.Bytes(), Activate: true}); err != nil {
		t.Fatal(err)
	}
	e.audit.Append = func(context.Context, *auditv1.AppendLifecycleEventRequest) (*auditv1.AppendLifecycleEventResponse, error) {
		return nil, fmt.Errorf("disk full")
	}
	_, err := e.reg.Transition(context.Background(), TransitionRequest{AgentID: k.g.AgentID, Transition: tREVOKE, Reason: "x"})
	wantReason(t, err, codes.Unavailable, ReasonAuditUnavailable)
	a, _ := e.reg.Get(context.Background(), k.g.AgentID)
	if a.Record.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_ACTIVE || a.Record.GetRevision() != 2 {
		t.Fatalf("state changed without an event: %v", a.Record)
	}
	if n, _ := e.rdb.Exists(context.Background(), rediskeys.AgentLifecycleLock(k.g.AgentID)).Result(); n != 0 {
		t.Fatal("the lifecycle lock was not released")
	}
}

// Racing lifecycle calls on one agent leave one consistent history: every
// event's previous_status is the status of the event before it, one event
// per real transition, and the final state and revision match the events.
func TestConcurrentTransitionsLeaveOneConsistentHistory(t *testing.T) {
	e := newEnv(t, Options{LifecycleAuth: AuthOpen, LockWait: 20 * time.Second})
	ctx := context.Background()
	k := newGenesis(t, "Acme", 2)
	id := k.g.AgentID
	if _, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Activate: true}); err != nil {
		t.Fatal(err)
	}
	// Two registries on the same Redis stand in for two replicas.
	reg2, err := New(e.rdb, slog.New(slog.NewTextHandler(io.Discard, nil)), e.reg.audit, Options{LifecycleAuth: AuthOpen, LockWait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	seq := []identityv1.LifecycleTransition{tDEACTIVATE, tREINSTATE, tDEPRECATE, tACTIVATE, tDEACTIVATE, tACTIVATE}
	var real, noops atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.reg
			if w%2 == 1 {
				r = reg2
			}
			for i := range 12 {
				tr := seq[(w+i)%len(seq)]
				res, err := r.Transition(ctx, TransitionRequest{AgentID: id, Transition: tr, Reason: "race"})
				if err != nil {
					if c, _, _, _ := grpcerr.Reason(err); c == codes.FailedPrecondition {
						continue
					}
					t.Errorf("%s: %v", MethodName(tr), err)
					return
				}
				if res.Noop {
					noops.Add(1)
				} else {
					real.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	evs := e.audit.Events(id)
	if int64(len(evs)) != real.Load()+1 {
		t.Fatalf("%d events for %d real transitions (+1 issue)", len(evs), real.Load())
	}
	if real.Load() < 5 || noops.Load() == 0 {
		t.Fatalf("the race exercised too little: %d real, %d no-ops", real.Load(), noops.Load())
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Claims["previous_status"] != evs[i-1].Claims["new_status"] {
			t.Fatalf("event %d starts from %v but event %d ended in %v", i, evs[i].Claims["previous_status"], i-1, evs[i-1].Claims["new_status"])
		}
		if evs[i].Claims["revision"].(float64) != evs[i-1].Claims["revision"].(float64)+1 {
			t.Fatalf("event revisions are not consecutive at %d", i)
		}
	}
	a, _ := e.reg.Get(ctx, id)
	last := evs[len(evs)-1]
	if callerpolicy.StateName(a.Record.GetStatus()) != last.Claims["new_status"] || float64(a.Record.GetRevision()) != last.Claims["revision"].(float64) {
		t.Fatalf("final record %v/%d does not match the last event %v", a.Record.GetStatus(), a.Record.GetRevision(), last.Claims)
	}
}

func TestResolveFormsAndAliases(t *testing.T) {
	e := newEnv(t, Options{OrgDomains: []string{"acme.tld"}})
	ctx := context.Background()
	a := newGenesis(t, "Acme", 2)
	b := newGenesis(t, "Acme", 2)
	for _, r := range []RegisterRequest{{GenesisJSON: a.g.Bytes(), Name: "bookbot", Activate: true}, {GenesisJSON: b.g.Bytes(), Name: "paybot", Activate: true}} {
		if _, err := e.reg.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	ok := []struct{ name, id, label, uri string }{
		{"canonical id", a.g.AgentID, "", ""},
		{"label", "", "bookbot", ""},
		{"form 1", "", "", "agtp://" + a.g.AgentID},
		{"form 1a ignores the host", "", "", "agtp://" + a.g.AgentID + "@elsewhere.example:9999"},
		{"form 3", "", "", "agtp://acme.tld/agents/bookbot"},
		{"form 4", "", "", "agtp://agtp.acme.tld/agents/bookbot?format=json"},
		{"form 3 with a package extension", "", "", "agtp://acme.tld/agents/bookbot.agent"},
		{"id and matching alias", a.g.AgentID, "bookbot", "agtp://agtp.acme.tld/agents/bookbot"},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			got, err := e.reg.Resolve(ctx, c.id, c.label, c.uri)
			if err != nil {
				t.Fatal(err)
			}
			if got.Record.GetAgentId() != a.g.AgentID {
				t.Fatalf("resolved %s", got.Record.GetAgentId())
			}
		})
	}
	bad := []struct {
		name, id, label, uri string
		code                 codes.Code
		reason               string
	}{
		{"alias names another agent", a.g.AgentID, "paybot", "", codes.Unauthenticated, ReasonAliasMismatch},
		{"uri names another agent", a.g.AgentID, "", "agtp://acme.tld/agents/paybot", codes.Unauthenticated, ReasonAliasMismatch},
		{"malformed canonical id", strings.Repeat("A", 64), "", "", codes.InvalidArgument, ReasonInvalidCanonicalID},
		{"malformed form 1", "", "", "agtp://" + strings.Repeat("AB", 32), codes.InvalidArgument, ReasonInvalidCanonicalID},
		{"unknown id", strings.Repeat("0", 64), "", "", codes.NotFound, ReasonAgentNotFound},
		{"unknown label", "", "nobody", "", codes.NotFound, ReasonAgentNotFound},
		{"form 2 is a server", "", "", "agtp://agents.acme.tld:4480", codes.InvalidArgument, ReasonInvalidURIForm},
		{"form 2a is an organisation", "", "", "agtp://acme.tld", codes.InvalidArgument, ReasonInvalidURIForm},
		{"domain not hosted", "", "", "agtp://other.tld/agents/bookbot", codes.NotFound, ReasonDomainNotHosted},
		{"not an agtp uri", "", "", "https://acme.tld/agents/bookbot", codes.InvalidArgument, ReasonInvalidURIForm},
		{"nothing named", "", "", "", codes.InvalidArgument, ReasonParameterInvalid},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.reg.Resolve(ctx, c.id, c.label, c.uri)
			wantReason(t, err, c.code, c.reason)
		})
	}
}

func TestLoadGenesisRecomputesOnEveryLoad(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	k := newGenesis(t, "Acme", 2)
	if _, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.LoadGenesis(ctx, k.g.AgentID); err != nil {
		t.Fatal(err)
	}
	forged := strings.Replace(string(k.g.Bytes()), `"owner":"Acme"`, `"owner":"Mallory"`, 1)
	e.rdb.HSet(ctx, rediskeys.Agent(k.g.AgentID), fGenesis, forged)
	_, err := e.reg.LoadGenesis(ctx, k.g.AgentID)
	wantReason(t, err, codes.Internal, "internal")
}

func TestOptionsValidate(t *testing.T) {
	bad := []Options{
		{LifecycleAuth: "anyone"},
		{OperatorFingerprints: []string{"ABC"}},
		{OrgDomains: []string{"not a domain"}},
		{AuditTimeout: time.Minute, LockTTL: time.Second},
	}
	for _, o := range bad {
		if err := o.WithDefaults().Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if err := (Options{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func BenchmarkGet(b *testing.B) {
	e := newEnv(b, Options{})
	ctx := context.Background()
	k := newGenesis(b, "Acme", 2)
	if _, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Activate: true}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.reg.Get(ctx, k.g.AgentID); err != nil {
			b.Fatal(err)
		}
	}
}
