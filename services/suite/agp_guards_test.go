package suite

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// startAGPGuardSuite starts the suite and returns it with the demo
// agent's AGP client, once the demo business is served.
func startAGPGuardSuite(t *testing.T) (*Suite, *agpRefusalClient) {
	t.Helper()
	s := startTestSuite(t, Config{RedisURL: testkit.StartRedis(t).URL()})
	return s, demoAGPClient(t, s)
}

// TestAGPGuards runs the whole suite in process and checks three rules of
// the AGP binding (docs/agp.md):
//   - an Idempotency-Key is bound to the AGP request, business included,
//     not only to the AGTP call it maps to: a member the mapping drops, or
//     another business, with the same key is 409 IDEMPOTENCY_KEY_REUSED,
//     never a replay of the first answer;
//   - a request no AGP route takes is an AGP error (code, requestId,
//     X-Request-Id): 405 with Allow for a known path, else 404;
//   - /keys acts for an admin key only while its agent is served: once the
//     demo agent is suspended its admin key is 401 UNAUTHORIZED and mints
//     nothing; reinstated, it mints again.
func TestAGPGuards(t *testing.T) {
	s, c := startAGPGuardSuite(t)

	t.Run("an Idempotency-Key is bound to the AGP request", func(t *testing.T) {
		// amount_cents is AGP's (the confirmation policy reads it), not
		// the endpoint's input, and the business is not in the AGTP call:
		// all these bodies map to the same CREATE /orders.
		order := func(business string, cents int) string {
			return `{"businessId":"` + business + `","request":{"method":"CREATE","path":"/orders",` +
				`"parameters":{"lines":[{"sku":"widget","quantity":1}]},"amount_cents":` + strconv.Itoa(cents) + `}}`
		}
		first := c.send("POST", "/agp/execute", order("orders", 100), "Idempotency-Key", "guard-1")
		if first.status != 200 || first.body["status"] != "succeeded" {
			t.Fatalf("first execute = %d %s", first.status, first.raw)
		}
		again := c.send("POST", "/agp/execute", order("orders", 100), "Idempotency-Key", "guard-1")
		if again.status != 200 || again.header.Get("X-Idempotent-Replayed") != "true" || !bytes.Equal(again.raw, first.raw) {
			t.Fatalf("the same request again = %d replayed=%q %s, want the replay of %s", again.status, again.header.Get("X-Idempotent-Replayed"), again.raw, first.raw)
		}
		for _, tc := range []struct{ name, body string }{
			{"a member the mapping ignores changed", order("orders", 999999)},
			{"another business", order("documents", 100)},
		} {
			res := c.send("POST", "/agp/execute", tc.body, "Idempotency-Key", "guard-1")
			if res.status != 409 || res.code() != "IDEMPOTENCY_KEY_REUSED" || res.header.Get("X-Idempotent-Replayed") != "" || res.body["requestId"] == nil {
				t.Errorf("%s, same key = %d replayed=%q %s, want 409 IDEMPOTENCY_KEY_REUSED", tc.name, res.status, res.header.Get("X-Idempotent-Replayed"), res.raw)
			}
		}
		// Without the key, the other business has no such capability.
		if res := c.send("POST", "/agp/execute", order("documents", 100)); res.status != 400 || res.code() != "CAPABILITY_NOT_FOUND" {
			t.Errorf("the other business without a key = %d %s, want 400 CAPABILITY_NOT_FOUND", res.status, res.raw)
		}
		// The key still answers its own request.
		if res := c.send("POST", "/agp/execute", order("orders", 100), "Idempotency-Key", "guard-1"); res.status != 200 || !bytes.Equal(res.raw, first.raw) {
			t.Errorf("the first request after the refusals = %d %s, want its replay", res.status, res.raw)
		}
	})

	t.Run("a request no route takes is an AGP error", func(t *testing.T) {
		for _, tc := range []struct {
			method, path string
			status       int
			code, allow  string
		}{
			{"GET", "/agp/execute", 405, "METHOD_NOT_ALLOWED", "POST"},
			{"DELETE", "/agp/businesses", 405, "METHOD_NOT_ALLOWED", "GET, HEAD"},
			{"PUT", "/keys", 405, "METHOD_NOT_ALLOWED", "GET, HEAD, POST"},
			{"POST", "/keys/me", 405, "METHOD_NOT_ALLOWED", "DELETE, GET, HEAD"},
			{"GET", "/agp/nowhere", 404, "NOT_FOUND", ""},
			{"GET", "/keys/", 404, "NOT_FOUND", ""},
		} {
			res := c.send(tc.method, tc.path, "", "X-Request-Id", "guard-rid-1")
			if res.status != tc.status || res.code() != tc.code || res.body["requestId"] != "guard-rid-1" || res.header.Get("X-Request-Id") != "guard-rid-1" ||
				res.header.Get("Allow") != tc.allow || !strings.HasPrefix(res.header.Get("Content-Type"), "application/json") {
				t.Errorf("%s %s = %d Allow %q X-Request-Id %q %s, want %d %s Allow %q", tc.method, tc.path, res.status, res.header.Get("Allow"), res.header.Get("X-Request-Id"), res.raw, tc.status, tc.code, tc.allow)
			}
		}
		// The routes themselves still answer.
		if res := c.send("GET", "/keys/me", ""); res.status != 200 {
			t.Errorf("GET /keys/me = %d %s", res.status, res.raw)
		}
	})

	t.Run("an admin key acts only while its agent is served", func(t *testing.T) {
		ctx := context.Background()
		admin, err := kit.LoadMTLS(s.Layout().CA(), s.Layout().Cert(devpki.Admin), s.Layout().Key(devpki.Admin))
		if err != nil {
			t.Fatal(err)
		}
		tel, err := kit.NewTelemetry(ctx, "suite-test", kit.TelemetryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		dial := func(name string) *grpc.ClientConn {
			t.Helper()
			conn, err := kit.DialService(s.Addrs[name], name, admin, tel)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			return conn
		}
		keys := agpv1.NewAgpServiceClient(dial("policysvc"))
		identity := identityv1.NewIdentityServiceClient(dial("identitysvc"))
		agent := s.demoAgent.AgentID
		minted, err := keys.CreateApiKey(ctx, &agpv1.CreateApiKeyRequest{Label: "guard admin", AgentId: agent, Scopes: []string{"*"}})
		if err != nil {
			t.Fatal(err)
		}
		ac := &agpRefusalClient{t: t, base: c.base, key: minted.GetSecret(), hc: c.hc}
		count := func() int {
			t.Helper()
			out, err := keys.ListApiKeys(ctx, &agpv1.ListApiKeysRequest{AgentId: agent})
			if err != nil {
				t.Fatal(err)
			}
			return len(out.GetKeys())
		}
		if res := ac.send("POST", "/keys", `{"label":"while active","scopes":["*"]}`); res.status != 201 {
			t.Fatalf("POST /keys with an active agent's admin key = %d %s", res.status, res.raw)
		}
		transition := func(tr identityv1.LifecycleTransition) {
			t.Helper()
			if _, err := identity.TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{AgentId: agent, Transition: tr, Reason: "agp guard test"}); err != nil {
				t.Fatal(err)
			}
		}
		transition(identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEACTIVATE)
		before := count()
		var last agpAnswer
		testkit.WaitFor(t, 10*time.Second, "the suspension to reach the front door", func() bool {
			last = ac.send("GET", "/keys", "")
			return last.status == 401
		})
		if last.code() != "UNAUTHORIZED" {
			t.Fatalf("GET /keys with a suspended agent's admin key = %d %s, want 401 UNAUTHORIZED", last.status, last.raw)
		}
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/keys", `{"label":"while suspended","scopes":["*"]}`},
			{"DELETE", "/keys/demo", ""},
		} {
			if res := ac.send(r.method, r.path, r.body); res.status != 401 || res.code() != "UNAUTHORIZED" {
				t.Errorf("%s %s with a suspended agent's admin key = %d %s, want 401 UNAUTHORIZED", r.method, r.path, res.status, res.raw)
			}
		}
		if after := count(); after != before {
			t.Fatalf("the suspended agent has %d keys after the refusals, had %d", after, before)
		}
		transition(identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REINSTATE)
		testkit.WaitFor(t, 10*time.Second, "the reinstatement to reach the front door", func() bool {
			last = ac.send("POST", "/keys", `{"label":"reinstated","scopes":["query"]}`)
			return last.status == 201
		})
	})
}

// TestAGPOverlongMethodIsRefusedOnTheChain: the method of an explicit AGP
// request becomes the AGTP request's method, so it meets the wire's rule
// (3 to 32 capital letters). A request naming a 70 KiB method is a plain
// refusal (400), signed and chained to the caller like every AGP response
// (docs/agp.md); it does not make auditsvc refuse a record too large to
// chain, which turned the refusal into a 503 audit-unavailable with an
// unchained record the size of the method in a response header.
func TestAGPOverlongMethodIsRefusedOnTheChain(t *testing.T) {
	_, c := startAGPGuardSuite(t)
	for _, tc := range []struct{ name, method string }{
		{"a 40-letter method", strings.Repeat("A", 40)},
		{"a 70 KiB method", strings.Repeat("A", 70<<10)},
	} {
		for _, p := range []string{"/agp/query", "/agp/execute"} {
			res := c.send("POST", p, `{"businessId":"orders","request":{"method":"`+tc.method+`","path":"/orders"}}`)
			rec := res.header.Get("Attribution-Record")
			if res.status != 400 || len(rec) > 16<<10 {
				t.Errorf("%s, POST %s = %d %s (agtpReason %v), Attribution-Record %d bytes; want 400 with a chained record of a few KiB",
					tc.name, p, res.status, res.code(), res.body["details"], len(rec))
			}
		}
	}
}
