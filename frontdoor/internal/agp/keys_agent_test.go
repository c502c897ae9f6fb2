package agp

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// agentStates is an AgentLookup in which every agent is registered and
// active except those it lists with another status, agentUnregistered
// (not registered) or agentLookupFails (identitysvc does not answer).
type agentStates map[string]identityv1.AgentStatus

const (
	agentUnregistered identityv1.AgentStatus = -1
	agentLookupFails  identityv1.AgentStatus = -2
)

func (a agentStates) Lookup(_ context.Context, id string) (*identityv1.AgentRecord, error) {
	st, listed := a[id]
	switch {
	case !listed:
		st = identityv1.AgentStatus_AGENT_STATUS_ACTIVE
	case st == agentUnregistered:
		return nil, nil
	case st == agentLookupFails:
		return nil, errors.New("identitysvc unavailable")
	}
	return &identityv1.AgentRecord{AgentId: id, Status: st}, nil
}

// TestAdminKeyOfAnAgentNotServedIsRefused: /keys acts for an admin key
// only while its agent is a caller the pipeline serves (active, or
// deprecated); the admin key of a suspended, retired, never activated or
// unknown agent is 401 UNAUTHORIZED on create, list and revoke, and
// changes nothing; an identitysvc that does not answer is 503; a handler
// with no agent lookup refuses every admin call.
func TestAdminKeyOfAnAgentNotServedIsRefused(t *testing.T) {
	agentOf := func(c byte) string { return strings.Repeat(string(c), 64) }
	agents := agentStates{
		agentOf('b'): identityv1.AgentStatus_AGENT_STATUS_SUSPENDED,
		agentOf('c'): identityv1.AgentStatus_AGENT_STATUS_RETIRED,
		agentOf('d'): identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED, // registered, never activated
		agentOf('e'): agentUnregistered,
		agentOf('f'): identityv1.AgentStatus_AGENT_STATUS_DEPRECATED,
		agentOf('9'): agentLookupFails,
	}
	policy := startPolicy(t, testkit.PKI(t), testkit.StartRedis(t))
	keys := policy.operator
	ctx := context.Background()
	serve := func(h *Handler, method, path, secret, body string) (int, map[string]any) {
		t.Helper()
		mux := http.NewServeMux()
		h.Register(mux)
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("X-Api-Key", secret)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: %q is not JSON", method, path, w.Body)
		}
		if rid := w.Header().Get(HeaderRequestID); rid == "" || out["requestId"] != nil && out["requestId"] != rid {
			t.Errorf("%s %s: X-Request-Id %q, body requestId %v", method, path, rid, out["requestId"])
		}
		return w.Code, out
	}
	h := New(Options{Keys: policy.frontdoor, Agents: agents, KeyCacheTTL: -1, Log: slog.New(slog.DiscardHandler)})
	for _, tc := range []struct {
		name   string
		agent  string
		status int
		code   string
		state  string
	}{
		{"active", agentOf('a'), 201, "", ""},
		{"deprecated (still served)", agentOf('f'), 201, "", ""},
		{"suspended", agentOf('b'), 401, CodeUnauthorized, "suspended"},
		{"retired", agentOf('c'), 401, CodeUnauthorized, "retired"},
		{"never activated", agentOf('d'), 401, CodeUnauthorized, "pending"},
		{"not registered", agentOf('e'), 401, CodeUnauthorized, ""},
		{"identitysvc down", agentOf('9'), 503, CodeUnavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admin := must(keys.CreateApiKey(ctx, &agpv1.CreateApiKeyRequest{Label: "admin", AgentId: tc.agent, Scopes: []string{"*"}}))(t)
			victim := must(keys.CreateApiKey(ctx, &agpv1.CreateApiKeyRequest{Label: "victim", AgentId: tc.agent, Scopes: []string{"query"}}))(t).GetKey()
			before := len(must(keys.ListApiKeys(ctx, &agpv1.ListApiKeysRequest{AgentId: tc.agent}))(t).GetKeys())

			st, body := serve(h, "POST", "/keys", admin.GetSecret(), `{"label":"minted","scopes":["*"]}`)
			if st != tc.status || tc.code != "" && body["code"] != tc.code {
				t.Fatalf("POST /keys = %d %v, want %d %s", st, body, tc.status, tc.code)
			}
			if tc.status == 201 {
				return
			}
			if d, _ := body["details"].(map[string]any); tc.state != "" && d["lifecycleState"] != tc.state {
				t.Errorf("details %v: want lifecycleState %q", d, tc.state)
			}
			for _, c := range []struct{ method, path string }{{"GET", "/keys"}, {"DELETE", "/keys/" + victim.GetId()}} {
				if st, body := serve(h, c.method, c.path, admin.GetSecret(), ""); st != tc.status || body["code"] != tc.code {
					t.Errorf("%s %s = %d %v, want %d %s", c.method, c.path, st, body, tc.status, tc.code)
				}
			}
			if after := len(must(keys.ListApiKeys(ctx, &agpv1.ListApiKeysRequest{AgentId: tc.agent}))(t).GetKeys()); after != before {
				t.Fatalf("the agent has %d keys after the refusals, had %d", after, before)
			}
		})
	}

	t.Run("no agent lookup", func(t *testing.T) {
		bare := New(Options{Keys: policy.frontdoor, KeyCacheTTL: -1, Log: slog.New(slog.DiscardHandler)})
		admin := must(keys.CreateApiKey(ctx, &agpv1.CreateApiKeyRequest{Label: "admin", AgentId: agentOf('a'), Scopes: []string{"admin"}}))(t)
		if st, body := serve(bare, "POST", "/keys", admin.GetSecret(), `{}`); st != 503 || body["code"] != CodeUnavailable {
			t.Fatalf("POST /keys without an agent lookup = %d %v, want 503", st, body)
		}
	})
}

// TestUnroutedAnswersAGPError: a request no AGP route takes, under /agp,
// /health or /keys, is answered in AGP's error form, with code, requestId
// and X-Request-Id: 405 with Allow for a path a route serves with other
// methods, 404 otherwise.
func TestUnroutedAnswersAGPError(t *testing.T) {
	mux := http.NewServeMux()
	New(Options{Log: slog.New(slog.DiscardHandler)}).Register(mux)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/agp/discover", 405, "POST"},
		{"PUT", "/agp/execute", 405, "POST"},
		{"GET", "/agp/execute/prepare", 405, "POST"},
		{"POST", "/agp/status/0b6c3f2e-8f57-4a5c-9d56-0a4f8d2c1e11", 405, "GET, HEAD"},
		{"DELETE", "/agp/businesses", 405, "GET, HEAD"},
		{"POST", "/health", 405, "GET, HEAD"},
		{"PUT", "/keys", 405, "GET, HEAD, POST"},
		{"POST", "/keys/me", 405, "DELETE, GET, HEAD"},
		{"GET", "/keys/key_1", 405, "DELETE"},
		{"GET", "/agp/nowhere", 404, ""},
		{"POST", "/agp/discover/more", 404, ""},
		{"GET", "/agp/status/", 404, ""},
		{"GET", "/agp", 404, ""},
		{"GET", "/agp/", 404, ""},
		{"GET", "/keys/", 404, ""},
		{"DELETE", "/keys/a/b", 404, ""},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		r.Header.Set(HeaderRequestID, "req-unrouted-1")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		var body errorBody
		err := json.Unmarshal(w.Body.Bytes(), &body)
		want := CodeRouteNotFound
		if tc.status == 405 {
			want = CodeMethodNotAllowed
		}
		if w.Code != tc.status || err != nil || body.Code != want || body.Error == "" || body.RequestID != "req-unrouted-1" ||
			w.Header().Get(HeaderRequestID) != "req-unrouted-1" || w.Header().Get("Content-Type") != ContentType || w.Header().Get("Allow") != tc.allow {
			t.Errorf("%s %s = %d Allow %q Content-Type %q X-Request-Id %q %s, want %d %s Allow %q",
				tc.method, tc.path, w.Code, w.Header().Get("Allow"), w.Header().Get("Content-Type"), w.Header().Get(HeaderRequestID), w.Body, tc.status, want, tc.allow)
		}
	}
}
