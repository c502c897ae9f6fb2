package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/attribution/attributionpb"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// fullPayload sets every named member a caller may set, with Extra
// members whose raw values are not compact and one credential-like member.
func fullPayload(agent string) attribution.Payload {
	h := strings.Repeat("c", 64)
	return attribution.Payload{
		ServerID: "fd.example", Timestamp: "2026-11-22T05:00:00.123456789Z", RequestHash: strings.Repeat("a", 64),
		Status: 201, Method: "PURCHASE", AgentID: agent, OwnerID: "owner-1", SessionID: "s-1", TaskID: "t-1",
		RequestID: "req-1", ResponseID: "resp-1", ResultHash: strings.Repeat("b", 64), AuditRecordVersion: "1",
		ActionID: "act-1", EvaluationID: "ev-1", DecisionID: "dec-1", RequestedMethod: "BUY",
		ActingPrincipalID: "alice", SynthesisID: "syn-1", ContractHash: h, NegotiationOrigin: attribution.OriginPropose,
		PriorActions:                    []attribution.PriorAction{{AgentID: "other", AuditID: h, AgentURI: "agtp://other.example"}, {}},
		StandingAuthorizationDecisionID: "sad-1", MerchantID: "m-1", MerchantFingerprint: "fp-1",
		IntentAssertionJTI: "jti-1", FromPrincipal: "alice", ToPrincipal: "bob", ProcedureID: "/procs/p",
		RunInput:  json.RawMessage("{ \"b\": [1, 2.50, \"\\u00e9<&\u2028\"], \"a\": null }"),
		EventType: "custom-event",
		Extra: map[string]json.RawMessage{
			"x_note": json.RawMessage(` { "k" : "v" } `), "a_first": json.RawMessage(`true`), "empty": json.RawMessage(`""`),
			"html": json.RawMessage("\"<&> \\u2028 \u2029\""), "api_key": json.RawMessage(`"must not be signed"`),
		},
	}
}

// TestTypedClaimsSignTheSameRecordAsJSON sends each payload as claims_json
// to one server and as typed claims to another with the same key: the
// records (JWS and Audit-ID) must be identical, defaults and the removal
// of credential-like members included.
func TestTypedClaimsSignTheSameRecordAsJSON(t *testing.T) {
	key := genKey(t)
	viaJSON := start(t, Options{Keys: keySet(t, key)})
	viaTyped := start(t, Options{Keys: keySet(t, key)})
	minimal := attribution.Payload{Status: 200, Method: "QUERY", Timestamp: "2026-11-22T05:00:00Z"}
	noPriorsNoExtra := fullPayload("agent-n")
	noPriorsNoExtra.PriorActions, noPriorsNoExtra.Extra, noPriorsNoExtra.RunInput = nil, nil, nil
	cases := []struct {
		name, chain string
		p           attribution.Payload
	}{
		{"every member", "agent-f", fullPayload("agent-f")},
		{"every member, agent_id from the chain", "agent-g", fullPayload("")},
		{"no prior_actions, run_input or extra", "agent-n", noPriorsNoExtra},
		{"minimal, server_id from the service", "agent-m", minimal},
		{"server chain", "", fullPayload("")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			raw, err := json.Marshal(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			a, err := viaJSON.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: tc.chain, ClaimsJson: raw})
			if err != nil {
				t.Fatal(err)
			}
			b, err := viaTyped.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: tc.chain, Claims: attributionpb.Claims(&tc.p)})
			if err != nil {
				t.Fatal(err)
			}
			if a.GetAttributionRecord() != b.GetAttributionRecord() || a.GetAuditId() != b.GetAuditId() {
				t.Fatalf("records differ:\njson  %s\ntyped %s", payloadOf(t, a.GetAttributionRecord()), payloadOf(t, b.GetAttributionRecord()))
			}
			body := payloadOf(t, b.GetAttributionRecord())
			if strings.Contains(body, "api_key") || !strings.Contains(body, `"server_id":"`) {
				t.Fatalf("payload %s: credential member kept or server_id missing", body)
			}
		})
	}
}

func payloadOf(t *testing.T, jws string) string {
	t.Helper()
	r, err := attribution.Parse(jws)
	if err != nil {
		t.Fatal(err)
	}
	return string(r.RawPayload)
}

func TestTypedClaimsRefusedLikeJSON(t *testing.T) {
	f := start(t, Options{Keys: keySet(t, genKey(t)), MaxClaimsBytes: 512})
	ok := func() *auditv1.AttributionClaims {
		return &auditv1.AttributionClaims{Status: 200, Method: "QUERY", AgentId: "agent-x", RequestHash: strings.Repeat("a", 64),
			RequestId: "req-0", ResponseId: "resp-0", TaskId: "t-1"}
	}
	with := func(set func(c *auditv1.AttributionClaims)) *auditv1.AttributionClaims { c := ok(); set(c); return c }
	cases := []struct {
		name   string
		req    *auditv1.SignAndAppendRequest
		reason string
	}{
		{"both-forms", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", Claims: ok(), ClaimsJson: []byte(`{"status":200}`)}, "audit-claims-invalid"},
		{"previous-audit-id-set", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x",
			Claims: with(func(c *auditv1.AttributionClaims) { c.PreviousAuditId = attribution.ZeroAuditID })}, "audit-previous-id-set"},
		{"too-large", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x",
			Claims: with(func(c *auditv1.AttributionClaims) {
				c.Extra = map[string][]byte{"pad": []byte(`"` + strings.Repeat("x", 600) + `"`)}
			})}, "audit-claims-too-large"},
		{"no-status", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", Claims: with(func(c *auditv1.AttributionClaims) { c.Status = 0 })}, "audit-claims-invalid"},
		{"status-beyond-int32", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", Claims: with(func(c *auditv1.AttributionClaims) { c.Status = 1<<32 + 200 })}, "audit-claims-invalid"},
		{"bad-request-hash", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", Claims: with(func(c *auditv1.AttributionClaims) { c.RequestHash = "ABC" })}, "audit-claims-invalid"},
		{"bad-result-hash", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", Claims: with(func(c *auditv1.AttributionClaims) { c.ResultHash = "abc" })}, "audit-claims-invalid"},
		{"bad-timestamp", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", Claims: with(func(c *auditv1.AttributionClaims) { c.Timestamp = "yesterday" })}, "audit-claims-invalid"},
		{"version-2", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x", Claims: with(func(c *auditv1.AttributionClaims) { c.AuditRecordVersion = "2" })}, "audit-record-version-unsupported"},
		{"other-agents-record", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-y", Claims: ok()}, "audit-chain-agent-mismatch"},
		{"extra-shadows-named-member", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x",
			Claims: with(func(c *auditv1.AttributionClaims) { c.Extra = map[string][]byte{"status": []byte("500")} })}, "audit-claims-invalid"},
		{"extra-not-json", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x",
			Claims: with(func(c *auditv1.AttributionClaims) { c.Extra = map[string][]byte{"note": []byte("{")} })}, "audit-claims-invalid"},
		{"extra-empty-value", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x",
			Claims: with(func(c *auditv1.AttributionClaims) { c.Extra = map[string][]byte{"note": nil} })}, "audit-claims-invalid"},
		{"run-input-not-json", &auditv1.SignAndAppendRequest{ChainAgentId: "agent-x",
			Claims: with(func(c *auditv1.AttributionClaims) { c.RunInput = []byte("{'a':1}") })}, "audit-claims-invalid"},
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

func typedClaims(t testing.TB, m map[string]any) *auditv1.AttributionClaims {
	t.Helper()
	var p attribution.Payload
	if err := json.Unmarshal(claims(t, m), &p); err != nil {
		t.Fatal(err)
	}
	return attributionpb.Claims(&p)
}

// frontDoorPayload is the size and shape of a front door's record of a
// tier 1 request (docs/performance.md).
func frontDoorPayload() attribution.Payload {
	agent := strings.Repeat("ab", 32)
	return attribution.Payload{
		ServerID: "agtp.example.com", Timestamp: "2026-11-22T05:00:00.123456789Z", RequestHash: strings.Repeat("a", 64),
		Status: 200, Method: "QUERY", AgentID: agent, OwnerID: "owner-0042", SessionID: "sess-7f3a9c",
		TaskID: "task-1b2c3d", RequestID: "01JD0000000000000000000000", ResponseID: "01JD0000000000000000000001",
		ResultHash: strings.Repeat("b", 64), AuditRecordVersion: "1", ActingPrincipalID: "alice@example.com",
	}
}

// BenchmarkClaimsDecode is auditsvc's work to read a request's payload
// members off the wire: unmarshal the request and decode and check the
// claims, as claims_json and as typed claims.
func BenchmarkClaimsDecode(b *testing.B) {
	s := start(b, Options{}).srv
	p := frontDoorPayload()
	raw, err := json.Marshal(p)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  *auditv1.SignAndAppendRequest
	}{
		{"json", &auditv1.SignAndAppendRequest{ChainAgentId: p.AgentID, ClaimsJson: raw}},
		{"typed", &auditv1.SignAndAppendRequest{ChainAgentId: p.AgentID, Claims: attributionpb.Claims(&p)}},
	} {
		wire, err := proto.Marshal(tc.req)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var req auditv1.SignAndAppendRequest
				if err := proto.Unmarshal(wire, &req); err != nil {
					b.Fatal(err)
				}
				if _, err := s.claims(req.GetClaimsJson(), req.GetClaims()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClaimsEncode is the front door's side: from the payload to the
// request's wire bytes.
func BenchmarkClaimsEncode(b *testing.B) {
	p := frontDoorPayload()
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			raw, err := json.Marshal(p)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := proto.Marshal(&auditv1.SignAndAppendRequest{ChainAgentId: p.AgentID, ClaimsJson: raw}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(&auditv1.SignAndAppendRequest{ChainAgentId: p.AgentID, Claims: attributionpb.Claims(&p)}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
