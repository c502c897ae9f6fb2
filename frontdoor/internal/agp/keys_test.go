package agp

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestAdminKeyManagesItsOwnAgent drives /keys with admin keys against a
// real policysvc: an admin key manages the keys of its own agent, and
// every attempt on another agent's keys is a 403 AGENT_MISMATCH that
// leaves them as they were; a key an operator made global manages every
// agent's keys.
func TestAdminKeyManagesItsOwnAgent(t *testing.T) {
	const (
		agentA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		agentB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	)
	policy := startPolicy(t, testkit.PKI(t), testkit.StartRedis(t))
	// The keys the test starts with are an operator's; the handler under
	// test is the front door.
	keys := policy.operator
	h := New(Options{Keys: policy.frontdoor, Agents: agentStates{}, KeyCacheTTL: -1, Log: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	h.Register(mux)
	ctx := context.Background()
	mint := func(agent string, scopes ...string) *agpv1.CreateApiKeyResponse {
		t.Helper()
		return must(keys.CreateApiKey(ctx, &agpv1.CreateApiKeyRequest{Label: "test", AgentId: agent, Scopes: scopes}))(t)
	}
	adminA := mint(agentA, "admin").GetSecret()
	globalA := must(keys.CreateApiKey(ctx, &agpv1.CreateApiKeyRequest{Label: "ops", AgentId: agentA, Scopes: []string{"admin"}, Global: true}))(t).GetSecret()
	keyA := mint(agentA, "query").GetKey()
	keyB := mint(agentB, "query").GetKey()
	keyB2 := mint(agentB, "query").GetKey()
	// keysOf is what policysvc holds for an agent, for the before/after
	// comparison of a refused call.
	keysOf := func(agent string) []*agpv1.ApiKey {
		t.Helper()
		return must(keys.ListApiKeys(ctx, &agpv1.ListApiKeysRequest{AgentId: agent}))(t).GetKeys()
	}
	beforeB := keysOf(agentB)

	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		status       int
		code         string
		// agentID is the details.agentId a refusal names ("" for none).
		agentID string
		// global: the call is made with the global admin key, and may
		// change agent B's keys.
		global bool
	}{
		{name: "create for another agent", method: "POST", path: "/keys", body: `{"agentId":"` + agentB + `","scopes":["admin"]}`,
			status: 403, code: CodeAgentMismatch, agentID: agentB},
		{name: "list another agent's keys", method: "GET", path: "/keys?agentId=" + agentB, status: 403, code: CodeAgentMismatch, agentID: agentB},
		{name: "revoke another agent's key", method: "DELETE", path: "/keys/" + keyB.GetId(), status: 403, code: CodeAgentMismatch},
		{name: "revoke a key that does not exist", method: "DELETE", path: "/keys/key_none", status: 404, code: "KEY_NOT_FOUND"},
		{name: "create for its own agent, named", method: "POST", path: "/keys", body: `{"agentId":"` + agentA + `","scopes":["query"]}`, status: 201},
		{name: "create for its own agent by default", method: "POST", path: "/keys", body: `{"label":"mine"}`, status: 201},
		{name: "list its own agent's keys", method: "GET", path: "/keys?agentId=" + agentA, status: 200},
		{name: "revoke its own agent's key", method: "DELETE", path: "/keys/" + keyA.GetId(), status: 200},
		{name: "global is not set through /keys", method: "POST", path: "/keys", body: `{"scopes":["admin"],"global":true}`, status: 400, code: CodeValidation},
		{name: "global: list another agent's keys", method: "GET", path: "/keys?agentId=" + agentB, status: 200, global: true},
		{name: "global: create for another agent", method: "POST", path: "/keys", body: `{"agentId":"` + agentB + `","scopes":["query"]}`, status: 201, global: true},
		{name: "global: revoke another agent's key", method: "DELETE", path: "/keys/" + keyB2.GetId(), status: 200, global: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r *http.Request
			if tc.body != "" {
				r = httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
				r.Header.Set("Content-Type", "application/json")
			} else {
				r = httptest.NewRequest(tc.method, tc.path, nil)
			}
			wantAgent := agentA
			if r.Header.Set("X-Api-Key", adminA); tc.global {
				r.Header.Set("X-Api-Key", globalA)
				wantAgent = agentB
			}
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			var body map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("%q is not JSON", w.Body)
			}
			if w.Code != tc.status {
				t.Fatalf("%s %s = %d %v, want %d", tc.method, tc.path, w.Code, body, tc.status)
			}
			if tc.code != "" {
				details, _ := body["details"].(map[string]any)
				if body["code"] != tc.code || body["error"] == "" || body["requestId"] == "" {
					t.Fatalf("refusal %v, want AGP's error shape with code %s", body, tc.code)
				}
				if tc.code == CodeAgentMismatch && (details["keyAgentId"] != agentA || (details["agentId"] != nil) != (tc.agentID != "") ||
					tc.agentID != "" && details["agentId"] != tc.agentID) {
					t.Fatalf("details %v, want keyAgentId %s and agentId %q", details, agentA, tc.agentID)
				}
			}
			if tc.status == 201 && (body["agentId"] != wantAgent || body["global"] != false) {
				t.Fatalf("created %v, want a key of %s that is not global", body, wantAgent)
			}
			if tc.status == 200 && tc.method == "GET" {
				list, _ := body["keys"].([]any)
				for _, k := range list {
					if k.(map[string]any)["agentId"] != wantAgent {
						t.Fatalf("listed %v: a key of another agent than %s", k, wantAgent)
					}
				}
			}
			after := keysOf(agentB)
			if !tc.global && !slices.EqualFunc(after, beforeB, func(a, b *agpv1.ApiKey) bool { return proto.Equal(a, b) }) {
				t.Fatalf("agent B's keys changed: %v, were %v", after, beforeB)
			}
			beforeB = after
		})
	}

	// GET /keys without agentId: its own agent's keys, or every key for a
	// global admin key.
	for _, tc := range []struct {
		name, key string
		want      int
	}{
		{"admin key", adminA, len(keysOf(agentA))},
		{"global admin key", globalA, len(keysOf(agentA)) + len(keysOf(agentB))},
	} {
		t.Run("GET /keys with the "+tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/keys", nil)
			r.Header.Set("X-Api-Key", tc.key)
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			var body struct {
				Keys []struct {
					AgentID string `json:"agentId"`
				} `json:"keys"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 200 {
				t.Fatalf("GET /keys = %d %s (%v)", w.Code, w.Body, err)
			}
			if len(body.Keys) != tc.want {
				t.Fatalf("listed %d keys, want %d", len(body.Keys), tc.want)
			}
		})
	}
}
