package server

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/internal/archive"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

type fixture struct {
	srv    *Server
	client auditv1.AuditServiceClient
	redis  *testkit.Redis
	rdb    *redis.Client
}

func genKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keySet(t testing.TB, active ed25519.PrivateKey, old ...crypto.PublicKey) *attribution.KeySet {
	t.Helper()
	ks, err := attribution.NewKeySet(active, old...)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// start runs a Server behind a real gRPC server on a loopback port.
func start(t testing.TB, opts Options) *fixture {
	t.Helper()
	rs := testkit.StartRedis(t)
	rdb := rs.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	if opts.ServerID == "" {
		opts.ServerID = "audit.test"
	}
	s, err := New(rdb, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, "Run", s.Run)
	conn := testkit.ServeGRPC(t, func(g grpc.ServiceRegistrar) { auditv1.RegisterAuditServiceServer(g, s) })
	return &fixture{srv: s, client: auditv1.NewAuditServiceClient(conn), redis: rs, rdb: rdb}
}

func claims(t testing.TB, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func response(agent string, i int) map[string]any {
	return map[string]any{"status": 200, "method": "QUERY", "agent_id": agent, "request_hash": strings.Repeat("a", 64),
		"request_id": fmt.Sprint("req-", i), "response_id": fmt.Sprint("resp-", i), "task_id": "t-1"}
}

func wantReason(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	c, r, _, _ := grpcerr.Reason(err)
	if c != code || r != reason {
		t.Fatalf("error = %v (code %v reason %q), want %v %q", err, c, r, code, reason)
	}
}

func TestSignAndAppendChainsRecordsReadableByAuditID(t *testing.T) {
	ctx := context.Background()
	f := start(t, Options{Keys: keySet(t, genKey(t))})
	agent := strings.Repeat("ab", 32)
	prev := attribution.ZeroAuditID
	var last *auditv1.SignAndAppendResponse
	for i := range 3 {
		r, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: agent, ClaimsJson: claims(t, response(agent, i))})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetPreviousAuditId() != prev || r.GetSequence() != uint64(i+1) || r.GetAuditId() != attribution.AuditID(r.GetAttributionRecord()) {
			t.Fatalf("record %d: %+v", i, r)
		}
		got, err := f.client.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: r.GetAuditId()})
		if err != nil {
			t.Fatal(err)
		}
		rec := got.GetRecord()
		if rec.GetJws() != r.GetAttributionRecord() || rec.GetChainAgentId() != agent || rec.GetSequence() != uint64(i+1) ||
			rec.GetStream() != attribution.StreamAttribution || rec.GetStoredAt() == nil {
			t.Fatalf("GetRecord %d: %+v", i, rec)
		}
		var p map[string]any
		//lint:ignore SA1019 the first release's field must still carry the payload
		if err := json.Unmarshal(rec.GetPayloadJson(), &p); err != nil {
			t.Fatal(err)
		}
		if got := rec.GetPayload().AsMap(); !reflect.DeepEqual(got, p) {
			t.Fatalf("payload %d: the Struct %v, the JSON bytes %v", i, got, p)
		}
		if p["previous_audit_id"] != prev || p["server_id"] != "audit.test" || p["audit_record_version"] != "1" || p["timestamp"] == nil {
			t.Fatalf("payload %d: %v", i, p)
		}
		prev, last = r.GetAuditId(), r
	}
	head, err := f.client.GetChainHead(ctx, &auditv1.GetChainHeadRequest{AgentId: agent})
	if err != nil || head.GetAuditId() != last.GetAuditId() || head.GetLength() != 3 {
		t.Fatalf("head: %v %+v", err, head)
	}
	v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent})
	if err != nil || !v.GetValid() || v.GetLength() != 3 {
		t.Fatalf("verify: %v %+v", err, v)
	}
}

func TestSignAndAppendRefusesBadInput(t *testing.T) {
	f := start(t, Options{Keys: keySet(t, genKey(t)), MaxClaimsBytes: 512})
	ok := response("agent-x", 0)
	with := func(k string, v any) []byte {
		m := map[string]any{}
		for a, b := range ok {
			m[a] = b
		}
		m[k] = v
		return claims(t, m)
	}
	cases := []struct {
		name   string
		req    *auditv1.SignAndAppendRequest
		reason string
	}{
		{"previous-audit-id-set", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", ClaimsJson: with("previous_audit_id", attribution.ZeroAuditID)}, "audit-previous-id-set"},
		{"not-json", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", ClaimsJson: []byte("{")}, "audit-claims-invalid"},
		{"array", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", ClaimsJson: []byte("[]")}, "audit-claims-invalid"},
		{"too-large", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", ClaimsJson: with("pad", strings.Repeat("x", 600))}, "audit-claims-too-large"},
		{"no-status", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", ClaimsJson: with("status", 0)}, "audit-claims-invalid"},
		{"bad-request-hash", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", ClaimsJson: with("request_hash", "ABC")}, "audit-claims-invalid"},
		{"bad-timestamp", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", ClaimsJson: with("timestamp", "yesterday")}, "audit-claims-invalid"},
		{"version-2", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", ClaimsJson: with("audit_record_version", "2")}, "audit-record-version-unsupported"},
		{"other-agents-record", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-y", ClaimsJson: claims(t, ok)}, "audit-chain-agent-mismatch"},
		{"hash-tag-in-agent-id", &auditv1.SignAndAppendRequest{ChainAgentId: "a}{b", ClaimsJson: claims(t, ok)}, "agent-id-invalid"},
		{"outcome-without-token", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", ClaimsJson: claims(t, ok),
			IdempotentOutcome: &auditv1.IdempotentOutcome{Slot: rediskeys.IdempotencySlot("agent-x", "k"), TtlSeconds: 60}}, "idempotent-outcome-invalid"},
		{"outcome-ttl-zero", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", ClaimsJson: claims(t, ok),
			IdempotentOutcome: &auditv1.IdempotentOutcome{Slot: rediskeys.IdempotencySlot("agent-x", "k"), Token: "t"}}, "idempotent-outcome-invalid"},
		{"outcome-slot-of-other-agent", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", ClaimsJson: claims(t, ok),
			IdempotentOutcome: &auditv1.IdempotentOutcome{Slot: rediskeys.IdempotencySlot("agent-y", "k"), Token: "t", TtlSeconds: 60}}, "audit-record-invalid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.client.SignAndAppend(context.Background(), tc.req)
			wantReason(t, err, codes.InvalidArgument, tc.reason)
		})
	}
	if _, err := f.client.GetChainHead(context.Background(), &auditv1.GetChainHeadRequest{AgentId: "agent-x"}); grpcerr.StatusFor(status(err)) != 404 {
		t.Fatalf("a refused request left a record: %v", err)
	}
}

func status(err error) codes.Code { c, _, _, _ := grpcerr.Reason(err); return c }

func TestCredentialMembersNeverReachTheRecord(t *testing.T) {
	f := start(t, Options{Keys: keySet(t, genKey(t))})
	m := response("agent-c", 0)
	m["authorization"] = "Bearer secret-token"
	m["api_key"] = "k"
	m["from_principal"] = "alice"
	r, err := f.client.SignAndAppend(context.Background(), &auditv1.SignAndAppendRequest{ChainAgentId: "agent-c", ClaimsJson: claims(t, m)})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := attribution.Parse(r.GetAttributionRecord())
	if strings.Contains(string(rec.RawPayload), "secret-token") || strings.Contains(string(rec.RawPayload), "api_key") ||
		!strings.Contains(string(rec.RawPayload), `"from_principal":"alice"`) {
		t.Fatalf("payload = %s", rec.RawPayload)
	}
}

func TestAnonymousTrafficChainsUnderTheServerChain(t *testing.T) {
	ctx := context.Background()
	f := start(t, Options{Keys: keySet(t, genKey(t)), AnonymousChains: 1})
	m := response("", 0)
	delete(m, "agent_id")
	a, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ClaimsJson: claims(t, m)})
	if err != nil {
		t.Fatal(err)
	}
	// An unauthenticated caller's claimed Agent-ID is recorded, on the
	// server chain, not on that agent's chain.
	m["agent_id"] = "claimed-agent"
	b, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ClaimsJson: claims(t, m)})
	if err != nil || b.GetPreviousAuditId() != a.GetAuditId() {
		t.Fatalf("second anonymous record: %v %+v", err, b)
	}
	head, err := f.client.GetChainHead(ctx, &auditv1.GetChainHeadRequest{AgentId: rediskeys.ServerChainShard(0)})
	if err != nil || head.GetAuditId() != b.GetAuditId() || head.GetLength() != 2 {
		t.Fatalf("server chain head: %v %+v", err, head)
	}
	rec, err := f.client.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: b.GetAuditId()})
	if err != nil || rec.GetRecord().GetChainAgentId() != "" {
		t.Fatalf("record: %v %+v", err, rec)
	}
	if _, err := f.client.GetChainHead(ctx, &auditv1.GetChainHeadRequest{AgentId: "claimed-agent"}); status(err) != codes.NotFound {
		t.Fatalf("claimed agent got a chain: %v", err)
	}
}

// Anonymous records are spread over the server chain's shards, so that
// they are not appended one after another; each shard is a chain that
// verifies, and together they hold every record once. A retried request
// lands on its shard again and appends nothing.
func TestAnonymousRecordsSpreadOverServerChainShards(t *testing.T) {
	ctx := context.Background()
	const shards, records = 4, 40
	f := start(t, Options{Keys: keySet(t, genKey(t)), AnonymousChains: shards})
	m := response("", 0)
	delete(m, "agent_id")
	for i := range records {
		req := &auditv1.SignAndAppendRequest{ClaimsJson: claims(t, m), RequestId: fmt.Sprintf("anon-%d", i)}
		first, err := f.client.SignAndAppend(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := f.client.SignAndAppend(ctx, req); err != nil || !again.GetReplayed() || again.GetAuditId() != first.GetAuditId() {
			t.Fatalf("retry of anon-%d: %v %+v", i, err, again)
		}
	}
	total, used := int64(0), 0
	for n := range shards {
		v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: rediskeys.ServerChainShard(n)})
		if status(err) == codes.NotFound {
			continue
		}
		if err != nil || !v.GetValid() {
			t.Fatalf("shard %d: %v %+v", n, err, v)
		}
		used++
		total += int64(v.GetLength())
	}
	if total != records || used < 2 {
		t.Fatalf("%d records on %d shards, want %d spread over more than one", total, used, records)
	}
}

func TestIdempotentOutcomeStoredWithTheRecord(t *testing.T) {
	ctx := context.Background()
	f := start(t, Options{Keys: keySet(t, genKey(t))})
	slot := rediskeys.IdempotencySlot("agent-i", "key")
	f.rdb.HSet(ctx, slot, rediskeys.SlotState, rediskeys.SlotPending, rediskeys.SlotToken, "tok")
	r, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: "agent-i", ClaimsJson: claims(t, response("agent-i", 0)),
		IdempotentOutcome: &auditv1.IdempotentOutcome{Slot: slot, Token: "tok", TtlSeconds: 3600, Response: []byte("stored response")}})
	if err != nil || !r.GetOutcomeStored() {
		t.Fatalf("append: %v %+v", err, r)
	}
	if h := f.rdb.HGetAll(ctx, slot).Val(); h[rediskeys.SlotState] != rediskeys.SlotDone || h[rediskeys.SlotResponse] != "stored response" {
		t.Fatalf("slot %v", h)
	}
	r, err = f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: "agent-i", ClaimsJson: claims(t, response("agent-i", 1)),
		IdempotentOutcome: &auditv1.IdempotentOutcome{Slot: slot, Token: "stale", TtlSeconds: 3600, Response: []byte("other")}})
	if err != nil || r.GetOutcomeStored() || r.GetSequence() != 2 {
		t.Fatalf("stale token: %v %+v", err, r)
	}
}

func TestReadsAnswer404ForUnknownAnd400ForMalformed(t *testing.T) {
	ctx := context.Background()
	f := start(t, Options{Keys: keySet(t, genKey(t))})
	_, err := f.client.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: strings.Repeat("e", 64)})
	wantReason(t, err, codes.NotFound, "audit-record-not-found")
	_, err = f.client.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: strings.Repeat("E", 64)})
	wantReason(t, err, codes.InvalidArgument, "audit-id-invalid")
	_, err = f.client.GetChainHead(ctx, &auditv1.GetChainHeadRequest{AgentId: "nobody"})
	wantReason(t, err, codes.NotFound, "chain-not-found")
	_, err = f.client.GetChainHead(ctx, &auditv1.GetChainHeadRequest{})
	wantReason(t, err, codes.InvalidArgument, "agent-id-required")
	_, err = f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: "nobody"})
	wantReason(t, err, codes.NotFound, "chain-not-found")
	if grpcerr.StatusFor(codes.NotFound) != 404 {
		t.Fatal("NotFound does not map to 404")
	}
}

func TestLifecycleEventsNewestFirstInPages(t *testing.T) {
	ctx := context.Background()
	ks := keySet(t, genKey(t))
	f := start(t, Options{Keys: ks, LifecycleMaxLimit: 5})
	agent := "agent-l"
	types := []string{"agent-genesis-issued", "agent-lifecycle-suspended", "agent-lifecycle-reinstated", "agent-lifecycle-suspended",
		"agent-lifecycle-reinstated", "agent-lifecycle-deprecated", "agent-genesis-revoked"}
	var ids []string
	for _, et := range types {
		r, err := f.client.AppendLifecycleEvent(ctx, &auditv1.AppendLifecycleEventRequest{AgentId: agent, EventType: et,
			Claims: string(claims(t, map[string]any{"reason": "test", "actor": "op"}))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetAuditId())
	}
	var got []*auditv1.LifecycleEvent
	token := ""
	pages := 0
	for {
		r, err := f.client.ListLifecycleEvents(ctx, &auditv1.ListLifecycleEventsRequest{AgentId: agent, PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got = append(got, r.GetEvents()...)
		if token = r.GetNextPageToken(); token == "" {
			break
		}
	}
	if pages != 3 || len(got) != len(types) {
		t.Fatalf("%d pages, %d events", pages, len(got))
	}
	keys, _ := attribution.ParseJWKS(must(jsondoc.JSON(must(f.client.GetSigningKeys(ctx, &auditv1.GetSigningKeysRequest{})).GetJwks())))
	v := attribution.NewChainVerifier(attribution.ChainOptions{VerifyOptions: attribution.VerifyOptions{Keys: keys}, AgentID: agent})
	for i := len(got) - 1; i >= 0; i-- { // oldest first for the chain check
		e := got[i]
		want := len(types) - 1 - i
		if e.GetFormat() != "jws" || e.GetAuditId() != ids[want] || e.GetEventType() != types[want] {
			t.Fatalf("event %d: %+v", i, e)
		}
		if _, err := v.Add(e.GetEnvelope(), e.GetAuditId()); err != nil {
			t.Fatalf("lifecycle stream does not verify: %v", err)
		}
	}
	newest := slices.Clone(ids)
	slices.Reverse(newest)
	list := func(agent string) testkit.ListPage {
		return func(size int32, tok string) ([]string, string, error) {
			r, err := f.client.ListLifecycleEvents(ctx, &auditv1.ListLifecycleEventsRequest{AgentId: agent, PageSize: size, PageToken: tok})
			var got []string
			for _, e := range r.GetEvents() {
				got = append(got, e.GetAuditId())
			}
			return got, r.GetNextPageToken(), err
		}
	}
	for _, size := range []int32{1, 2, 3, 5} {
		tok := testkit.CheckPaging(t, size, newest, list(agent))
		testkit.CheckTokenMismatch(t, tok, list("agent-other"))
	}
	// A client built against the first release sends limit, which is
	// still honoured as the page size.
	legacy := &auditv1.ListLifecycleEventsRequest{AgentId: agent}
	//lint:ignore SA1019 the first release's field is what this checks
	legacy.Limit = 2
	if r, err := f.client.ListLifecycleEvents(ctx, legacy); err != nil || len(r.GetEvents()) != 2 || r.GetNextPageToken() == "" {
		t.Fatalf("limit of the first release: %v %d events", err, len(r.GetEvents()))
	}
	r, err := f.client.ListLifecycleEvents(ctx, &auditv1.ListLifecycleEventsRequest{AgentId: agent, PageSize: 100})
	if err != nil || len(r.GetEvents()) != 5 {
		t.Fatalf("limit above the cap: %v %d events", err, len(r.GetEvents()))
	}
	_, err = f.client.ListLifecycleEvents(ctx, &auditv1.ListLifecycleEventsRequest{AgentId: agent, PageSize: -1})
	wantReason(t, err, codes.InvalidArgument, "page-size-invalid")
	_, err = f.client.ListLifecycleEvents(ctx, &auditv1.ListLifecycleEventsRequest{AgentId: agent, PageToken: "x"})
	wantReason(t, err, codes.InvalidArgument, "page-token-invalid")
	_, err = f.client.AppendLifecycleEvent(ctx, &auditv1.AppendLifecycleEventRequest{AgentId: agent, EventType: "Bad Type"})
	wantReason(t, err, codes.InvalidArgument, "event-type-invalid")
	vr, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent, Stream: attribution.StreamLifecycle})
	if err != nil || !vr.GetValid() || vr.GetLength() != uint64(len(types)) {
		t.Fatalf("verify lifecycle: %v %+v", err, vr)
	}
	empty, err := f.client.ListLifecycleEvents(ctx, &auditv1.ListLifecycleEventsRequest{AgentId: "no-events"})
	if err != nil || len(empty.GetEvents()) != 0 || empty.GetNextPageToken() != "" {
		t.Fatalf("agent without events: %v %+v", err, empty)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestVerifyChainNamesTheTamperedRecord(t *testing.T) {
	ctx := context.Background()
	f := start(t, Options{Keys: keySet(t, genKey(t))})
	var ids []string
	for i := range 4 {
		r, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: "agent-t", ClaimsJson: claims(t, response("agent-t", i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetAuditId())
	}
	// Rewrite record 3 with a changed status, stored Audit-ID updated to
	// match, as someone with write access to Redis could.
	key := rediskeys.ChainStream("agent-t")
	msgs := f.rdb.XRange(ctx, key, "-", "+").Val()
	parts := strings.Split(msgs[2].Values["jws"].(string), ".")
	rec, _ := attribution.Parse(msgs[2].Values["jws"].(string))
	forged := parts[0] + "." + b64(strings.Replace(string(rec.RawPayload), `"status":200`, `"status":403`, 1)) + "." + parts[2]
	msgs[2].Values["jws"], msgs[2].Values["audit_id"] = forged, attribution.AuditID(forged)
	f.rdb.Del(ctx, key)
	for _, m := range msgs {
		f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: m.ID, Values: m.Values})
	}
	v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: "agent-t"})
	if err != nil {
		t.Fatal(err)
	}
	if v.GetValid() || v.GetFirstInvalidAuditId() != attribution.AuditID(forged) || !strings.HasPrefix(v.GetProblem(), attribution.ProblemBadSignature) {
		t.Fatalf("verify = %+v", v)
	}
	// The original Audit-ID no longer resolves to anything.
	_, err = f.client.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: ids[2]})
	wantReason(t, err, codes.NotFound, "audit-record-not-found")
}

func TestKeyRotationKeepsOldRecordsVerifiable(t *testing.T) {
	ctx := context.Background()
	oldKey := genKey(t)
	oldSet := keySet(t, oldKey)
	f := start(t, Options{Keys: oldSet})
	r1, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: "agent-r", ClaimsJson: claims(t, response("agent-r", 0))})
	if err != nil {
		t.Fatal(err)
	}
	newSet := keySet(t, genKey(t), oldKey.Public())
	f.srv.SetKeys(newSet)
	r2, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: "agent-r", ClaimsJson: claims(t, response("agent-r", 1))})
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := attribution.Parse(r1.GetAttributionRecord())
	p2, _ := attribution.Parse(r2.GetAttributionRecord())
	if p1.KID != oldSet.ActiveKID() || p2.KID != newSet.ActiveKID() || p1.KID == p2.KID {
		t.Fatalf("kids %s %s", p1.KID, p2.KID)
	}
	v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: "agent-r"})
	if err != nil || !v.GetValid() {
		t.Fatalf("verify after rotation: %v %+v", err, v)
	}
	// The JWKS over HTTP equals the gRPC one and verifies both records.
	hs := httptest.NewServer(f.srv.JWKSHandler())
	defer hs.Close()
	resp, err := http.Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/jwk-set+json" {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	g, _ := f.client.GetSigningKeys(ctx, &auditv1.GetSigningKeysRequest{})
	//lint:ignore SA1019 the first release's field must still carry the JWKS byte for byte
	if string(g.GetJwksJson()) != string(body) {
		t.Fatalf("HTTP and gRPC JWKS differ")
	}
	var fromHTTP map[string]any
	if err := json.Unmarshal(body, &fromHTTP); err != nil || !reflect.DeepEqual(g.GetJwks().AsMap(), fromHTTP) {
		t.Fatalf("jwks %v, HTTP %s (%v)", g.GetJwks().AsMap(), body, err)
	}
	pub, err := attribution.ParseJWKS(body)
	if err != nil || len(pub) != 2 {
		t.Fatalf("JWKS: %v %d keys", err, len(pub))
	}
	r := attribution.VerifyChain([]string{r1.GetAttributionRecord(), r2.GetAttributionRecord()},
		attribution.ChainOptions{VerifyOptions: attribution.VerifyOptions{Keys: pub}, AgentID: "agent-r"})
	if !r.Valid {
		t.Fatalf("chain against published JWKS: %+v", r.Break)
	}
}

func TestWithoutKeyRecordsAreUnsignedButChained(t *testing.T) {
	ctx := context.Background()
	f := start(t, Options{})
	var last string
	for i := range 2 {
		r, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: "agent-n", ClaimsJson: claims(t, response("agent-n", i))})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(r.GetAttributionRecord(), ".") {
			t.Fatalf("record %q is not alg none", r.GetAttributionRecord())
		}
		if i == 1 && r.GetPreviousAuditId() != last {
			t.Fatal("unsigned records are not chained")
		}
		last = r.GetAuditId()
	}
	v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: "agent-n"})
	if err != nil || !v.GetValid() {
		t.Fatalf("verify: %v %+v", err, v)
	}
	g, _ := f.client.GetSigningKeys(ctx, &auditv1.GetSigningKeysRequest{})
	if b, err := jsondoc.JSON(g.GetJwks()); err != nil || string(b) != `{"keys":[]}` {
		t.Fatalf("JWKS without a key = %s (%v)", b, err)
	}
}

func TestRedisDownFailsClosedWith503(t *testing.T) {
	f := start(t, Options{Keys: keySet(t, genKey(t))})
	f.redis.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: "agent-d", ClaimsJson: claims(t, response("agent-d", 0))})
	wantReason(t, err, codes.Unavailable, "audit-unavailable")
	if grpcerr.StatusFor(status(err)) != 503 {
		t.Fatalf("maps to %d", grpcerr.StatusFor(status(err)))
	}
}

func TestSignedRecordStreams(t *testing.T) {
	ctx := context.Background()
	f := start(t, Options{Keys: keySet(t, genKey(t))})
	r, err := f.client.AppendSignedRecord(ctx, &auditv1.AppendSignedRecordRequest{AgentId: "agent-s", Stream: "confirm",
		Claims: string(claims(t, map[string]any{"event_type": "confirm-attestation", "task_id": "t-9", "status": 200}))})
	if err != nil || r.GetSequence() != 1 || r.GetPreviousAuditId() != attribution.ZeroAuditID {
		t.Fatalf("append: %v %+v", err, r)
	}
	g, err := f.client.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: r.GetAuditId()})
	if err != nil || g.GetRecord().GetStream() != "confirm" || g.GetRecord().GetChainAgentId() != "agent-s" {
		t.Fatalf("get: %v %+v", err, g)
	}
	for _, bad := range []string{"attribution", "lifecycle", "Confirm", ""} {
		_, err := f.client.AppendSignedRecord(ctx, &auditv1.AppendSignedRecordRequest{AgentId: "agent-s", Stream: bad})
		wantReason(t, err, codes.InvalidArgument, "stream-invalid")
	}
	v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: "agent-s", Stream: "confirm"})
	if err != nil || !v.GetValid() || v.GetLength() != 1 {
		t.Fatalf("verify: %v %+v", err, v)
	}
}

// An agent's streams hold only its own records, whichever RPC appends to
// them: claims naming another agent are refused and nothing is appended,
// and claims that name none are recorded as the chain's agent's.
func TestAppendsRefuseAnotherAgentsClaims(t *testing.T) {
	ctx := context.Background()
	f := start(t, Options{Keys: keySet(t, genKey(t))})
	other := map[string]any{"agent_id": "agent-other", "event_type": "confirm-attestation", "status": 200}
	none := map[string]any{"event_type": "confirm-attestation", "status": 200}
	for _, tc := range []struct {
		name   string
		stream string
		append func(members map[string]any) (*auditv1.Record, error)
	}{
		{"AppendSignedRecord", "confirm", func(m map[string]any) (*auditv1.Record, error) {
			r, err := f.client.AppendSignedRecord(ctx, &auditv1.AppendSignedRecordRequest{AgentId: "agent-own", Stream: "confirm", Claims: string(claims(t, m))})
			return recordOf(ctx, t, f, r.GetAuditId(), err)
		}},
		{"AppendLifecycleEvent", "lifecycle", func(m map[string]any) (*auditv1.Record, error) {
			r, err := f.client.AppendLifecycleEvent(ctx, &auditv1.AppendLifecycleEventRequest{AgentId: "agent-own", EventType: "confirm-attestation", Claims: string(claims(t, m))})
			return recordOf(ctx, t, f, r.GetAuditId(), err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.append(other)
			wantReason(t, err, codes.InvalidArgument, "audit-chain-agent-mismatch")
			rec, err := tc.append(none)
			if err != nil {
				t.Fatal(err)
			}
			p, err := attribution.Parse(rec.GetJws())
			if err != nil || p.Payload.AgentID != "agent-own" || rec.GetSequence() != 1 {
				t.Fatalf("record %+v (%v): want agent-own's first record", rec, err)
			}
			v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: "agent-own", Stream: tc.stream})
			if err != nil || !v.GetValid() || v.GetLength() != 1 {
				t.Fatalf("verify: %v %+v; the refused append must leave nothing", err, v)
			}
		})
	}
}

// A stored signed stream of another agent's records fails VerifyChain,
// as the attribution and lifecycle streams do.
func TestVerifyChainChecksTheAgentOnSignedStreams(t *testing.T) {
	ctx := context.Background()
	f := start(t, Options{Keys: keySet(t, genKey(t))})
	agentA, agentB := strings.Repeat("aa", 32), strings.Repeat("bb", 32)
	for i := range 3 {
		if _, err := f.client.AppendSignedRecord(ctx, &auditv1.AppendSignedRecordRequest{AgentId: agentA, Stream: "confirm",
			Claims: string(claims(t, map[string]any{"method": "CONFIRM", "type": "confirm", "target_id": i}))}); err != nil {
			t.Fatal(err)
		}
	}
	// Someone with write access to Redis copies A's stream under B's keys.
	for _, m := range f.rdb.XRange(ctx, rediskeys.SignedStream(agentA, "confirm"), "-", "+").Val() {
		f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: rediskeys.SignedStream(agentB, "confirm"), ID: m.ID, Values: m.Values})
	}
	f.rdb.Copy(ctx, rediskeys.SignedStreamHead(agentA, "confirm"), rediskeys.SignedStreamHead(agentB, "confirm"), 0, false)
	v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agentB, Stream: "confirm"})
	if err != nil {
		t.Fatal(err)
	}
	if v.GetValid() || !strings.HasPrefix(v.GetProblem(), attribution.ProblemAgentMismatch) {
		t.Fatalf("agent A's confirm records as agent B's: valid %v, problem %q", v.GetValid(), v.GetProblem())
	}
}

// recordOf fetches the record an append returned.
func recordOf(ctx context.Context, t *testing.T, f *fixture, auditID string, err error) (*auditv1.Record, error) {
	t.Helper()
	if err != nil {
		return nil, err
	}
	g, err := f.client.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: auditID})
	if err != nil {
		t.Fatalf("get %s: %v", auditID, err)
	}
	return g.GetRecord(), nil
}

func TestArchiveReceivesAppendedRecords(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ks := keySet(t, genKey(t))
	f := start(t, Options{Keys: ks, Archive: archive.Options{Dir: dir, SyncInterval: 10 * time.Millisecond}})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: "agent-a", ClaimsJson: claims(t, response("agent-a", i))}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var entries []attribution.Entry
	deadline := time.Now().Add(5 * time.Second)
	for len(entries) < 20 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		entries = entries[:0]
		files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
		for _, name := range files {
			fh, _ := os.Open(name)
			_ = attribution.ReadEntries(fh, func(e attribution.Entry) error { entries = append(entries, e); return nil })
			fh.Close()
		}
	}
	res := attribution.VerifyEntries(entries, attribution.ChainOptions{VerifyOptions: attribution.VerifyOptions{Keys: ks}}, true)
	r := res[attribution.ChainKey{Stream: attribution.StreamAttribution, Chain: "agent-a"}]
	if !r.Valid || r.Checked != 20 {
		t.Fatalf("archive: %d entries, %+v", len(entries), r)
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, o := range map[string]Options{
		"negative-claims":   {MaxClaimsBytes: -1},
		"default-above-max": {LifecycleDefaultLimit: 10, LifecycleMaxLimit: 5},
		"bad-archive":       {Archive: archive.Options{Dir: "x", Instance: "a/b"}},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero options: %v", err)
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// claimForms builds a SignAndAppend request for chain from a payload in
// each form a caller can send it: JSON (REST callers) and typed claims
// (the front door).
var claimForms = []struct {
	name    string
	request func(b *testing.B, chain string, p map[string]any) *auditv1.SignAndAppendRequest
}{
	{"claims=json", func(b *testing.B, chain string, p map[string]any) *auditv1.SignAndAppendRequest {
		return &auditv1.SignAndAppendRequest{ChainAgentId: chain, ClaimsJson: claims(b, p)}
	}},
	{"claims=typed", func(b *testing.B, chain string, p map[string]any) *auditv1.SignAndAppendRequest {
		return &auditv1.SignAndAppendRequest{ChainAgentId: chain, Claims: typedClaims(b, p)}
	}},
}

// BenchmarkSignAndAppendRPC is SignAndAppend through gRPC (loopback,
// insecure): the per-record cost the front door sees.
func BenchmarkSignAndAppendRPC(b *testing.B) {
	for _, form := range claimForms {
		b.Run(form.name, func(b *testing.B) {
			f := start(b, Options{Keys: keySet(b, genKey(b))})
			reqs := make([]*auditv1.SignAndAppendRequest, 1000)
			for i := range reqs {
				chain := fmt.Sprint("agent-", i)
				reqs[i] = form.request(b, chain, response(chain, i))
			}
			b.SetParallelism(32)
			b.ReportAllocs()
			var n sync.Mutex
			i := 0
			startT := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n.Lock()
					k := i % len(reqs)
					i++
					n.Unlock()
					if _, err := f.client.SignAndAppend(context.Background(), reqs[k]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(startT).Seconds(), "records/s")
		})
	}
}

// BenchmarkSignAndAppendBatchRPC is SignAndAppendBatch through gRPC
// (loopback, insecure) as the front door sends it: batches of 17 typed
// items with request IDs over 8 chains, 4 batches in flight. An op is one
// batch.
func BenchmarkSignAndAppendBatchRPC(b *testing.B) {
	f := start(b, Options{Keys: keySet(b, genKey(b))})
	form := claimForms[1]
	var next atomic.Int64
	b.SetParallelism(2)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := &auditv1.SignAndAppendBatchRequest{}
			for range 17 {
				n := next.Add(1)
				chain := fmt.Sprint("agent-", n%8)
				it := form.request(b, chain, response(chain, int(n)))
				it.RequestId = fmt.Sprintf("0190b7c2-0000-7000-8000-%012x", n)
				req.Items = append(req.Items, it)
			}
			resp, err := f.client.SignAndAppendBatch(context.Background(), req)
			if err != nil {
				b.Error(err)
				return
			}
			for _, r := range resp.GetResults() {
				if r.GetError() != nil {
					b.Error(r.GetError())
					return
				}
			}
		}
	})
}

// BenchmarkSignAndAppendRPCSequential is one SignAndAppend at a time on one
// chain: the latency a front door with one request in flight waits for.
func BenchmarkSignAndAppendRPCSequential(b *testing.B) {
	for _, form := range claimForms {
		b.Run(form.name, func(b *testing.B) {
			f := start(b, Options{Keys: keySet(b, genKey(b))})
			req := form.request(b, "agent-0", response("agent-0", 0))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.client.SignAndAppend(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestClaimsFromEitherRelease signs the same members whether a client
// sends claims (this release) or only claims_json (the first release).
func TestClaimsFromEitherRelease(t *testing.T) {
	ctx := context.Background()
	f := start(t, Options{Keys: keySet(t, genKey(t))})
	members := map[string]any{"reason": "test", "actor": "op"}
	for _, tc := range []struct {
		name string
		req  *auditv1.AppendLifecycleEventRequest
		rec  *auditv1.AppendSignedRecordRequest
	}{
		{"claims",
			&auditv1.AppendLifecycleEventRequest{AgentId: "agent-cn", EventType: "agent-lifecycle-suspended", Claims: string(claims(t, members))},
			&auditv1.AppendSignedRecordRequest{AgentId: "agent-cn", Stream: "confirm", Claims: string(claims(t, members))}},
		{"claims_json only",
			//lint:ignore SA1019 the first release's field must still be honoured
			&auditv1.AppendLifecycleEventRequest{AgentId: "agent-co", EventType: "agent-lifecycle-suspended", ClaimsJson: claims(t, members)},
			//lint:ignore SA1019 the first release's field must still be honoured
			&auditv1.AppendSignedRecordRequest{AgentId: "agent-co", Stream: "confirm", ClaimsJson: claims(t, members)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := f.client.AppendLifecycleEvent(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			s, err := f.client.AppendSignedRecord(ctx, tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{l.GetAuditId(), s.GetAuditId()} {
				r, err := f.client.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: id})
				if err != nil {
					t.Fatal(err)
				}
				if p := r.GetRecord().GetPayload().AsMap(); p["reason"] != "test" || p["actor"] != "op" {
					t.Fatalf("record %s payload %v", id, p)
				}
			}
		})
	}
}
