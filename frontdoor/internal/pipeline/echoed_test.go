package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// maxClaimsBytes is auditsvc's default bound on a record's claims.
const maxClaimsBytes = 64 << 10

// echoedBounds are the request fields the front door echoes or records,
// with their bounds and the answer to a longer value: the wire stage's 400
// naming the field, or for Agent-ID the caller stage's 401, which every
// malformed Agent-ID gets.
var echoedBounds = []struct {
	field  string
	max    int
	status int
	reason string
}{
	{agtp.HeaderAgentID, 64, agtp.StatusUnauthorized, "agent-unauthenticated"},
	{agtp.HeaderTaskID, 256, agtp.StatusBadRequest, "invalid-header"},
	{agtp.HeaderRequestID, 256, agtp.StatusBadRequest, "invalid-header"},
	{agtp.HeaderSessionID, 256, agtp.StatusBadRequest, "session-id-invalid"},
}

// echoedValue is a value of field n bytes long; an Agent-ID of 64 bytes is
// the stage fixture's agent.
func echoedValue(field string, n int) string {
	if field == agtp.HeaderAgentID {
		return stageAgent + strings.Repeat("c", n-len(stageAgent))
	}
	return strings.Repeat("v", n)
}

// readable writes resp and reads it back with the default limits, as the
// project's client does.
func readable(t *testing.T, resp *agtp.Response) *agtp.Response {
	t.Helper()
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	if err := resp.Write(bw); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = bw.Flush()
	got, err := agtp.ReadResponse(bufio.NewReader(&buf), agtp.Limits{})
	if err != nil {
		t.Fatalf("a client with the default limits cannot read the answer (%d bytes): %v", buf.Len(), err)
	}
	return got
}

// claimsCarry reports whether a record's claims carry v in a member taken
// from a request field.
func claimsCarry(c *auditv1.AttributionClaims, v string) bool {
	for _, m := range []string{c.GetAgentId(), c.GetUnprovenAgentId(), c.GetTaskId(), c.GetRequestId(), c.GetSessionId()} {
		if m == v {
			return true
		}
	}
	return false
}

// countingFixture is a stage fixture whose EXECUTE /notes handler and
// policysvc count their calls.
func countingFixture(t *testing.T) (f *stageFixture, ran, asked *atomic.Int32) {
	ran, asked = new(atomic.Int32), new(atomic.Int32)
	f = newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.handlers = map[string]handler.Func{"test.notes.put": func(context.Context, *handler.Call) (*handler.Result, error) {
			ran.Add(1)
			return &handler.Result{Output: json.RawMessage(`{"stored":true}`)}, nil
		}}
		f.policy.AuthorizeF = func(context.Context, *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
			asked.Add(1)
			return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW}, nil
		}
	})
	return f, ran, asked
}

// A request field the front door echoes or records that is longer than
// its bound is refused, by the wire stage with 400, the field's reason and
// a body naming the field and the bound (Agent-ID by the caller stage,
// 401): nothing runs, no policy state is touched, nothing goes on an
// agent's chain, and neither the answer nor its record carries the value.
func TestEchoedFieldOverBoundRefused(t *testing.T) {
	for _, tc := range echoedBounds {
		for _, n := range []int{tc.max + 1, 40 << 10} {
			t.Run(tc.field+"/"+strconv.Itoa(n), func(t *testing.T) {
				f, ran, asked := countingFixture(t)
				v := echoedValue(tc.field, n)
				resp, body := f.do(t, stageRequest("EXECUTE", "/notes", `{"text":"x"}`, agtp.HeaderIdempotencyKey, "k-1", tc.field, v))
				wantAnswer(t, resp, body, tc.status, tc.reason)
				if tc.status == agtp.StatusBadRequest && (body["field"] != tc.field || body["max_bytes"] != float64(tc.max) ||
					!strings.Contains(body["explanation"].(string), strconv.Itoa(tc.max))) {
					t.Fatalf("body does not name the field and its bound: %s", resp.Body)
				}
				if ran.Load() != 0 || asked.Load() != 0 {
					t.Fatalf("handler ran %d times, policy asked %d times", ran.Load(), asked.Load())
				}
				for _, fl := range resp.Header {
					if fl.Value == v {
						t.Fatalf("the answer echoes %s", fl.Name)
					}
				}
				if bytes.Contains(resp.Body, []byte(v)) {
					t.Fatalf("the answer's body carries the value")
				}
				readable(t, resp)
				recs := f.appended()
				if len(recs) != 1 {
					t.Fatalf("%d records, want the refusal's one", len(recs))
				}
				if r := recs[0]; r.GetChainAgentId() != "" || r.GetIdempotentOutcome() != nil || claimsCarry(r.GetClaims(), v) {
					t.Fatalf("refusal recorded on chain %q, outcome %v, claims %v", r.GetChainAgentId(), r.GetIdempotentOutcome(), r.GetClaims())
				}
			})
		}
	}
}

// A value at its bound is taken, echoed byte for byte and recorded; with
// every field at its bound at once the answer still reads with the default
// limits and the claims stay within auditsvc's bound.
func TestEchoedFieldAtBoundAccepted(t *testing.T) {
	all := []string{agtp.HeaderIdempotencyKey, "k-1"}
	for _, tc := range echoedBounds {
		all = append(all, tc.field, echoedValue(tc.field, tc.max))
	}
	cases := []struct {
		name    string
		headers []string
	}{{"all at once", all}}
	for _, tc := range echoedBounds {
		cases = append(cases, struct {
			name    string
			headers []string
		}{tc.field, []string{tc.field, echoedValue(tc.field, tc.max)}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, ran, _ := countingFixture(t)
			resp := f.p.ServeAGTP(context.Background(), stageConn(), stageRequest("EXECUTE", "/notes", `{"text":"x"}`, tc.headers...))
			if resp.Status != agtp.StatusOK || ran.Load() != 1 {
				t.Fatalf("answer = %d %s, handler ran %d times", resp.Status, resp.Body, ran.Load())
			}
			got := readable(t, resp)
			for i := 0; i+1 < len(tc.headers); i += 2 {
				name, v := tc.headers[i], tc.headers[i+1]
				if name == agtp.HeaderSessionID || name == agtp.HeaderIdempotencyKey {
					continue // recorded, not echoed
				}
				if got.Header.Get(name) != v {
					t.Fatalf("%s echoed as %q", name, got.Header.Get(name))
				}
			}
			recs := f.appended()
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			c := recs[0].GetClaims()
			if n := proto.Size(c); n > maxClaimsBytes {
				t.Fatalf("claims are %d bytes, over auditsvc's %d", n, maxClaimsBytes)
			}
			for i := 0; i+1 < len(tc.headers); i += 2 {
				if name := tc.headers[i]; name != agtp.HeaderIdempotencyKey && !claimsCarry(c, tc.headers[i+1]) {
					t.Fatalf("%s not recorded: %v", name, c)
				}
			}
		})
	}
}

// A field repeated with one line over its bound is refused too.
func TestEchoedFieldRepeatedOverBound(t *testing.T) {
	f, ran, _ := countingFixture(t)
	req := stageRequest("EXECUTE", "/notes", `{"text":"x"}`, agtp.HeaderTaskID, "t-1")
	req.Header.Add(agtp.HeaderTaskID, strings.Repeat("t", 257))
	resp, body := f.do(t, req)
	wantAnswer(t, resp, body, agtp.StatusBadRequest, "invalid-header")
	if ran.Load() != 0 || resp.Header.Get(agtp.HeaderTaskID) != "t-1" {
		t.Fatalf("handler ran %d times; Task-ID echoed %q", ran.Load(), resp.Header.Get(agtp.HeaderTaskID))
	}
}

// The bounds come before the structural answer: an unknown path with an
// oversized field is 400, not a 404 carrying the field.
func TestEchoedFieldBeforeStructure(t *testing.T) {
	f := newStageFixture(t, nil)
	resp, body := f.do(t, stageRequest("QUERY", "/nowhere", "", agtp.HeaderRequestID, strings.Repeat("r", 40<<10)))
	wantAnswer(t, resp, body, agtp.StatusBadRequest, "invalid-header")
	readable(t, resp)
}

// The transport's own error answers (RespondError) leave an oversized
// field out of the answer and its unsigned record, so they stay readable.
func TestRespondErrorLeavesOversizedFieldsOut(t *testing.T) {
	f := newStageFixture(t, nil)
	req := stageRequest("QUERY", "/notes/n-1", "")
	for _, tc := range echoedBounds {
		req.Header.Set(tc.field, echoedValue(tc.field, 40<<10))
	}
	resp := f.p.RespondError(context.Background(), stageConn(), req, &agtp.ProtocolError{Status: agtp.StatusBadRequest, Reason: "body-too-large", Explanation: "too large", CloseConnection: true})
	for _, tc := range echoedBounds {
		if resp.Header.Has(tc.field) {
			t.Fatalf("the answer echoes %s", tc.field)
		}
	}
	if bytes.Contains(resp.Body, []byte("task_id")) {
		t.Fatalf("body carries task_id: %s", resp.Body)
	}
	if got := readable(t, resp); got.Header.Get(agtp.HeaderAttributionRecord) == "" {
		t.Fatal("no Attribution-Record")
	}
}

// An echoed field the wire layer accepts with a byte over 0x7f (obs-text
// is allowed in field values, docs/wire.md) goes into the
// Attribution-Record's claims, protobuf strings that must be UTF-8: it is
// refused before anything runs, 400 with the field's reason, and the
// refusal is signed and chained like any other (before, the handler ran
// and the record could not be signed: 503 audit-unavailable, no record).
func TestEchoedFieldsThatAreNotASCIIAreRefusedBeforeTheHandler(t *testing.T) {
	for _, tc := range []struct{ field, reason string }{
		{agtp.HeaderRequestID, agtp.ReasonInvalidHeader},
		{agtp.HeaderTaskID, agtp.ReasonInvalidHeader},
		{agtp.HeaderSessionID, "session-id-invalid"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			f, ran, _ := countingFixture(t)
			raw := "AGTP/1.0 EXECUTE /notes\r\nAgent-ID: " + stageAgent + "\r\n" + tc.field + ": r-\xff-" + strings.Repeat("a", 24) + "\r\n" +
				"Content-Type: application/vnd.agtp+json\r\nContent-Length: 12\r\n\r\n{\"text\":\"x\"}"
			req, err := agtp.ReadRequest(bufio.NewReader(strings.NewReader(raw)), agtp.Limits{})
			if err != nil {
				t.Fatalf("the wire layer refuses the request: %v", err)
			}
			resp, body := f.do(t, req)
			if ran.Load() != 0 || resp.Status != agtp.StatusBadRequest || body["reason"] != tc.reason {
				t.Fatalf("handler ran %d times; answer %d %s, want 400 %s", ran.Load(), resp.Status, resp.Body, tc.reason)
			}
			if recs := f.appended(); len(recs) != 1 {
				t.Fatalf("%d records stored for the refusal, want 1", len(recs))
			}
		})
	}
}
