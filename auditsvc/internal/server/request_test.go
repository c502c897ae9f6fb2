package server

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/attribution/attributionpb"
	"github.com/agtpsuite/agtp/deploy/clustertest"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// replica is one auditsvc behind its own gRPC server.
type replica struct {
	srv    *Server
	client auditv1.AuditServiceClient
}

// startReplica runs a Server on rdb, as one of several auditsvc replicas
// sharing it. now, if set, is its clock.
func startReplica(t *testing.T, rdb redis.UniversalClient, ks *attribution.KeySet, now func() time.Time) replica {
	t.Helper()
	s, err := New(rdb, nil, Options{ServerID: "audit.test", Keys: ks})
	if err != nil {
		t.Fatal(err)
	}
	if now != nil {
		s.now = now
	}
	conn := testkit.ServeGRPC(t, func(g grpc.ServiceRegistrar) { auditv1.RegisterAuditServiceServer(g, s) })
	return replica{srv: s, client: auditv1.NewAuditServiceClient(conn)}
}

// backends are one node and a Redis Cluster, where a script may only touch
// keys of one slot: the request entry must carry the chain's hash tag.
var backends = []struct {
	name  string
	start func(t *testing.T) redis.UniversalClient
}{
	{"single-node", func(t *testing.T) redis.UniversalClient { return testkit.StartRedis(t).Client(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return clustertest.StartCluster(t, 3, 0).Client }},
}

// answer is what each append RPC returns, side by side.
type answer struct {
	jws, auditID, prev string
	seq                uint64
	outcomeStored      bool
	replayed           bool
}

// appendCall sends one append RPC for agent with request ID id.
type appendCall func(ctx context.Context, c auditv1.AuditServiceClient, agent, id string) (answer, error)

func signTyped(m map[string]any) func(t *testing.T) appendCall {
	return func(t *testing.T) appendCall {
		return func(ctx context.Context, c auditv1.AuditServiceClient, agent, id string) (answer, error) {
			return signAndAppend(ctx, c, &auditv1.SignAndAppendRequest{ChainAgentId: agent, Claims: typedClaims(t, withAgent(m, agent)), RequestId: id})
		}
	}
}

func signJSON(m map[string]any) func(t *testing.T) appendCall {
	return func(t *testing.T) appendCall {
		return func(ctx context.Context, c auditv1.AuditServiceClient, agent, id string) (answer, error) {
			return signAndAppend(ctx, c, &auditv1.SignAndAppendRequest{ChainAgentId: agent, ClaimsJson: claims(t, withAgent(m, agent)), RequestId: id})
		}
	}
}

func signWithOutcome(m map[string]any, token string) func(t *testing.T) appendCall {
	return func(t *testing.T) appendCall {
		return func(ctx context.Context, c auditv1.AuditServiceClient, agent, id string) (answer, error) {
			return signAndAppend(ctx, c, &auditv1.SignAndAppendRequest{ChainAgentId: agent, Claims: typedClaims(t, withAgent(m, agent)), RequestId: id,
				IdempotentOutcome: &auditv1.IdempotentOutcome{Slot: rediskeys.IdempotencySlot(agent, "key"), Token: token, TtlSeconds: 3600, Response: []byte("stored")}})
		}
	}
}

func signAndAppend(ctx context.Context, c auditv1.AuditServiceClient, req *auditv1.SignAndAppendRequest) (answer, error) {
	r, err := c.SignAndAppend(ctx, req)
	return answer{r.GetAttributionRecord(), r.GetAuditId(), r.GetPreviousAuditId(), r.GetSequence(), r.GetOutcomeStored(), r.GetReplayed()}, err
}

func lifecycle(eventType string, m map[string]any) func(t *testing.T) appendCall {
	return func(t *testing.T) appendCall {
		return func(ctx context.Context, c auditv1.AuditServiceClient, agent, id string) (answer, error) {
			r, err := c.AppendLifecycleEvent(ctx, &auditv1.AppendLifecycleEventRequest{AgentId: agent, EventType: eventType, Claims: string(claims(t, m)), RequestId: id})
			return answer{r.GetJws(), r.GetAuditId(), r.GetPreviousAuditId(), r.GetSequence(), false, r.GetReplayed()}, err
		}
	}
}

func signedRecord(stream string, m map[string]any) func(t *testing.T) appendCall {
	return func(t *testing.T) appendCall {
		return func(ctx context.Context, c auditv1.AuditServiceClient, agent, id string) (answer, error) {
			r, err := c.AppendSignedRecord(ctx, &auditv1.AppendSignedRecordRequest{AgentId: agent, Stream: stream, Claims: string(claims(t, m)), RequestId: id})
			return answer{r.GetJws(), r.GetAuditId(), r.GetPreviousAuditId(), r.GetSequence(), false, r.GetReplayed()}, err
		}
	}
}

func withAgent(m map[string]any, agent string) map[string]any {
	out := map[string]any{"agent_id": agent}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func with(m map[string]any, k string, v any) map[string]any {
	out := map[string]any{k: v}
	for k2, v2 := range m {
		if k2 != k {
			out[k2] = v2
		}
	}
	return out
}

// A front door whose SignAndAppend answer was lost sends the same request
// again, to the same replica or (load balanced) another one. The records
// a response is attested by must stay one; a request ID reused for other
// content is refused, and without a request ID every call appends.
func TestRetriedAppendsAppendOnce(t *testing.T) {
	const requestID = "0197a3c0-7c1e-7cc4-9f1a-5b2d4e6f8a90"
	resp := map[string]any{"status": 200, "method": "QUERY", "request_hash": strings.Repeat("a", 64), "request_id": "agent-chosen",
		"response_id": requestID, "task_id": "t-1", "timestamp": "2026-01-02T03:04:05.123456789Z"}
	noTimestamp := map[string]any{}
	for k, v := range resp {
		if k != "timestamp" {
			noTimestamp[k] = v
		}
	}
	event := map[string]any{"reason": "test", "actor": "op"}
	confirm := map[string]any{"event_type": "confirm-attestation", "task_id": "t-9", "status": 200}

	cases := []struct {
		name         string
		stream       string // the stream the calls append to
		first, retry func(t *testing.T) appendCall
		retryOn      int    // replica the retry is sent to
		retryID      string // request ID of the retry ("-": none on either call)
		wantReason   string // the retry is refused with ALREADY_EXISTS and this reason
		wantRecords  uint64
		wantOutcome  bool
	}{
		{name: "typed claims, same replica", first: signTyped(resp), retry: signTyped(resp), wantRecords: 1},
		{name: "typed claims, other replica", first: signTyped(resp), retry: signTyped(resp), retryOn: 1, wantRecords: 1},
		{
			// The service fills the timestamp; the other replica's clock is
			// an hour ahead, and the retry still gets the first record.
			name: "claims without timestamp, other replica", first: signJSON(noTimestamp), retry: signJSON(noTimestamp), retryOn: 1,
			wantRecords: 1,
		},
		{name: "with idempotent outcome", first: signWithOutcome(resp, "tok"), retry: signWithOutcome(resp, "tok"), retryOn: 1, wantRecords: 1, wantOutcome: true},
		{name: "lifecycle event", stream: attribution.StreamLifecycle, first: lifecycle("agent-lifecycle-suspended", event),
			retry: lifecycle("agent-lifecycle-suspended", event), retryOn: 1, wantRecords: 1},
		{name: "signed record", stream: "confirm", first: signedRecord("confirm", confirm), retry: signedRecord("confirm", confirm), retryOn: 1, wantRecords: 1},

		{name: "without request_id every call appends", first: signTyped(resp), retry: signTyped(resp), retryID: "-", wantRecords: 2},
		{name: "another request_id appends", first: signTyped(resp), retry: signTyped(resp), retryID: "another-request", wantRecords: 2},

		{name: "other claims refused", first: signTyped(resp), retry: signTyped(with(resp, "status", 500)), retryOn: 1,
			wantReason: "audit-request-id-reused", wantRecords: 1},
		{
			// The same payload, but not the same request message.
			name: "typed first, JSON retry refused", first: signTyped(resp), retry: signJSON(resp), retryOn: 1,
			wantReason: "audit-request-id-reused", wantRecords: 1,
		},
		{name: "other caller timestamp refused", first: signTyped(resp), retry: signTyped(with(resp, "timestamp", "2026-01-02T03:04:06Z")),
			wantReason: "audit-request-id-reused", wantRecords: 1},
		{name: "other idempotent outcome refused", first: signWithOutcome(resp, "tok"), retry: signWithOutcome(resp, "other-tok"),
			wantReason: "audit-request-id-reused", wantRecords: 1, wantOutcome: true},
		{name: "other lifecycle event refused", stream: attribution.StreamLifecycle, first: lifecycle("agent-lifecycle-suspended", event),
			retry: lifecycle("agent-lifecycle-reinstated", event), wantReason: "audit-request-id-reused", wantRecords: 1},
		{name: "other signed record refused", stream: "confirm", first: signedRecord("confirm", confirm),
			retry: signedRecord("confirm", with(confirm, "task_id", "t-10")), wantReason: "audit-request-id-reused", wantRecords: 1},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.start(t)
			ks := keySet(t, genKey(t))
			replicas := []replica{
				startReplica(t, rdb, ks, nil),
				startReplica(t, rdb, ks, func() time.Time { return time.Now().Add(time.Hour) }),
			}
			var records uint64
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					agent := strings.Repeat(string(rune('a'+i)), 64)
					rdb.HSet(ctx, rediskeys.IdempotencySlot(agent, "key"), rediskeys.SlotState, rediskeys.SlotPending, rediskeys.SlotToken, "tok")
					firstID, retryID := requestID, tc.retryID
					switch retryID {
					case "":
						retryID = requestID
					case "-":
						firstID, retryID = "", ""
					}
					first, err := tc.first(t)(ctx, replicas[0].client, agent, firstID)
					if err != nil || first.replayed || first.outcomeStored != tc.wantOutcome {
						t.Fatalf("first call: %v %+v", err, first)
					}
					again, err := tc.retry(t)(ctx, replicas[tc.retryOn].client, agent, retryID)
					switch {
					case tc.wantReason != "":
						wantReason(t, err, codes.AlreadyExists, tc.wantReason)
					case err != nil:
						t.Fatalf("retry: %v", err)
					case tc.wantRecords == 1:
						if !again.replayed {
							t.Fatalf("retry not marked replayed: %+v", again)
						}
						again.replayed = false
						if again != first {
							t.Fatalf("retry answered\n%+v\nwant the first answer\n%+v", again, first)
						}
					default:
						if again.replayed || again.auditID == first.auditID || again.seq != 2 {
							t.Fatalf("retry did not append: %+v", again)
						}
					}
					v, err := replicas[1].client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent, Stream: tc.stream})
					if err != nil || !v.GetValid() || v.GetLength() != tc.wantRecords {
						t.Fatalf("chain: %v %+v, want %d valid records", err, v, tc.wantRecords)
					}
					records += tc.wantRecords
					g, err := replicas[1].client.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: first.auditID})
					if err != nil || g.GetRecord().GetJws() != first.jws {
						t.Fatalf("first record by Audit-ID: %v %+v", err, g)
					}
				})
			}
			// Attempts that appended nothing left no index entry behind.
			if n := countKeys(t, rdb, rediskeys.AuditIndex("*")); n != int(records) {
				t.Fatalf("%d index entries, want one per record (%d)", n, records)
			}
		})
	}
}

// countKeys counts the keys matching pattern (on every master of a
// cluster).
func countKeys(t *testing.T, rdb redis.UniversalClient, pattern string) int {
	t.Helper()
	ctx := context.Background()
	var n atomic.Int64
	count := func(ctx context.Context, c redis.UniversalClient) error {
		keys, err := c.Keys(ctx, pattern).Result()
		n.Add(int64(len(keys)))
		return err
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return count(ctx, c) })
	} else {
		err = count(ctx, rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
	return int(n.Load())
}

func TestRequestIDMustBeBoundedAndKeySafe(t *testing.T) {
	ctx := context.Background()
	f := start(t, Options{Keys: keySet(t, genKey(t))})
	for name, tc := range map[string]struct {
		id     string
		reason string
	}{
		"uuid":          {"0197a3c0-7c1e-7cc4-9f1a-5b2d4e6f8a90", ""},
		"longest":       {strings.Repeat("A", 128), ""},
		"base64url":     {"aZ09_-.x", ""},
		"too long":      {strings.Repeat("A", 129), "audit-request-id-invalid"},
		"hash tag":      {"{agent}", "audit-request-id-invalid"},
		"key separator": {"a:b", "audit-request-id-invalid"},
		"space":         {"a b", "audit-request-id-invalid"},
		"non-ascii":     {"é", "audit-request-id-invalid"},
	} {
		t.Run(name, func(t *testing.T) {
			req := func() error {
				_, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: "agent-v",
					ClaimsJson: claims(t, response("agent-v", 0)), RequestId: tc.id})
				return err
			}
			if tc.reason != "" {
				wantReason(t, req(), codes.InvalidArgument, tc.reason)
				_, err := f.client.AppendLifecycleEvent(ctx, &auditv1.AppendLifecycleEventRequest{AgentId: "agent-v",
					EventType: "agent-lifecycle-suspended", RequestId: tc.id})
				wantReason(t, err, codes.InvalidArgument, tc.reason)
				_, err = f.client.AppendSignedRecord(ctx, &auditv1.AppendSignedRecordRequest{AgentId: "agent-v",
					Stream: "confirm", RequestId: tc.id})
				wantReason(t, err, codes.InvalidArgument, tc.reason)
				return
			}
			if err := req(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// BenchmarkRequestFingerprint is what a request ID adds to an append in
// Go: a protobuf encode and SHA-256 of a front door's request.
func BenchmarkRequestFingerprint(b *testing.B) {
	p := frontDoorPayload()
	req := &auditv1.SignAndAppendRequest{ChainAgentId: p.AgentID, Claims: attributionpb.Claims(&p), RequestId: "0197a3c0-7c1e-7cc4-9f1a-5b2d4e6f8a90"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := requestOf(req.GetRequestId(), req); err != nil {
			b.Fatal(err)
		}
	}
}
