package agp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

func ep(method, path, namespace, impact, fn string, deprecated bool) *endpoint.Endpoint {
	d := &endpoint.Definition{Method: method, Path: path, Namespace: namespace,
		Semantic: endpoint.Semantic{Impact: impact}, Handler: endpoint.Handler{Type: endpoint.HandlerRegisteredFunction, Function: fn}}
	if deprecated {
		d.Deprecated = &endpoint.Deprecation{DeprecatedIn: "1.0"}
	}
	return &endpoint.Endpoint{Def: d}
}

func TestBusinesses(t *testing.T) {
	st := &catalogstate.State{Endpoints: []*endpoint.Endpoint{
		ep("QUERY", "/orders/{order_id}", "orders", "informational", "orders.get", false),
		ep("CREATE", "/orders", "orders", "reversible", "orders.create", false),
		ep("FETCH", "/legacy/{id}", "", "informational", "legacy.fetch", true),
		ep("DISCOVER", "/methods", builtinNamespace, "informational", "agtp.builtin.discover", false),
		ep("QUERY", "/{anything}", "", "informational", "x", false),
	}}
	bs := businesses(st)
	if len(bs) != 2 || bs[0].ID != "legacy" || bs[1].ID != "orders" {
		t.Fatalf("businesses = %+v, want legacy (first segment) and orders (namespace), no built-ins", bs)
	}
	if bs[0].active() || !bs[1].active() {
		t.Error("a business whose endpoints are all deprecated must not be active")
	}
	if findBusiness(st, "agtp.builtin") != nil || findBusiness(st, "nope") != nil {
		t.Error("built-ins or unknown ids resolved to a business")
	}
	data := bs[1].discoverData("srv")
	eps := data["endpoints"].(map[string]endpointView)
	if eps["QUERY /orders/{order_id}"].Operation != OpQuery || eps["CREATE /orders"].Operation != OpExecute {
		t.Errorf("endpoints %+v: informational endpoints are queries, the rest executes", eps)
	}
}

func TestFromAGTP(t *testing.T) {
	errResp := func(status int, reason string, extra map[string]any) *agtp.Response {
		r, err := agtp.ErrorBody{Status: status, Reason: reason, Explanation: "why", Extra: extra}.Response()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		resp   *agtp.Response
		status int
		code   string
	}{
		{errResp(422, "input-invalid", map[string]any{"violations": []any{"x"}}), 400, CodeValidation},
		{errResp(400, "invalid-body", nil), 400, CodeValidation},
		{errResp(404, "endpoint-not-found", nil), 400, CodeCapabilityNotFound},
		{errResp(459, "method-invalid", nil), 400, CodeCapabilityNotFound},
		{errResp(401, "agent-unauthenticated", nil), 401, CodeUnauthorized},
		{errResp(410, "agent-retired", nil), 401, CodeUnauthorized},
		{errResp(262, "scope-required", map[string]any{"scope": "orders:write"}), 403, CodeForbidden},
		{errResp(456, "budget-exceeded", nil), 403, "BUDGET_EXCEEDED"},
		{errResp(429, "rate-limited", map[string]any{"retry_after_seconds": 7}), 429, CodeRateLimited},
		{errResp(409, "idempotency-key-reused", nil), 409, "IDEMPOTENCY_KEY_REUSED"},
		{errResp(503, "handler-timeout", nil), 504, CodeAdapterTimeout},
		{errResp(502, "upstream_error", nil), 502, CodeAdapterError},
		{errResp(500, "output-invalid", nil), 502, CodeAdapterError},
		{errResp(422, "out_of_stock", nil), 422, "OUT_OF_STOCK"},
		{errResp(503, "auditsvc-unavailable", nil), 503, CodeUnavailable},
		{errResp(500, "internal", nil), 500, CodeInternal},
		{agtp.NewResponse(500, agtp.MediaTypeJSON, []byte("not json")), 500, CodeInternal},
	} {
		e := fromAGTP(tc.resp)
		if e.Status != tc.status || e.Code != tc.code {
			t.Errorf("%d %s -> %d %s, want %d %s", tc.resp.Status, tc.resp.Body, e.Status, e.Code, tc.status, tc.code)
		}
		var b errorBody
		if err := json.Unmarshal(e.body("rid-1"), &b); err != nil || b.Error == "" || b.RequestID != "rid-1" || b.Code != tc.code {
			t.Errorf("%s: body %+v (%v) lacks error, code or requestId", tc.code, b, err)
		}
	}
	if e := fromAGTP(errResp(262, "scope-required", map[string]any{"scope": "orders:write"})); e.Message != "Missing required scope: orders:write" {
		t.Errorf("262 message %q must name the scope", e.Message)
	}
	if e := fromAGTP(errResp(429, "rate-limited", map[string]any{"retry_after_seconds": 7})); e.RetryAfter != 7 {
		t.Errorf("429 retryAfter = %d, want 7", e.RetryAfter)
	}
	long := &apiError{Status: 502, Message: strings.Repeat("x", 900)}
	var b errorBody
	_ = json.Unmarshal(long.body(""), &b)
	if len(b.Message) != maxMessage {
		t.Errorf("message of %d characters, want it cut to %d", len(b.Message), maxMessage)
	}
}

func parse(t *testing.T, body string) (*target, *apiError) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/agp/execute", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	c := &call{h: New(Options{}), w: httptest.NewRecorder(), r: r}
	return c.parseTarget("EXECUTE")
}

func TestParseTargetAndHash(t *testing.T) {
	a, e := parse(t, `{"businessId":"orders","request":{"method":"CREATE","path":"/orders","parameters":{"lines":[{"sku":"w","quantity":2}],"amount_cents":1395},"idempotencyKey":"client-chosen"}}`)
	if e != nil {
		t.Fatal(e.Message, e.Details)
	}
	if a.Amount == nil || *a.Amount != 1395 {
		t.Errorf("amount = %v, want 1395 from the parameters", a.Amount)
	}
	if _, ok := a.Canonical["idempotencyKey"]; ok {
		t.Error("a client's idempotencyKey must be dropped (server-injected, AGP §9.1)")
	}
	// Same request, other key order, no client idempotencyKey: same hash.
	b, e := parse(t, `{"request":{"parameters":{"amount_cents":1395,"lines":[{"quantity":2,"sku":"w"}]},"path":"/orders","method":"CREATE"},"businessId":"orders"}`)
	if e != nil {
		t.Fatal(e.Message)
	}
	ha, _ := a.hash()
	hb, _ := b.hash()
	if ha != hb {
		t.Errorf("key order changed the hash: %s vs %s", ha, hb)
	}
	for name, body := range map[string]string{
		"other value":    `{"businessId":"orders","request":{"method":"CREATE","path":"/orders","parameters":{"lines":[{"sku":"w","quantity":3}],"amount_cents":1395}}}`,
		"other business": `{"businessId":"shop","request":{"method":"CREATE","path":"/orders","parameters":{"lines":[{"sku":"w","quantity":2}],"amount_cents":1395}}}`,
	} {
		o, e := parse(t, body)
		if e != nil {
			t.Fatal(e.Message)
		}
		if h, _ := o.hash(); h == ha {
			t.Errorf("%s: same hash", name)
		}
	}
	if def, e := parse(t, `{"businessId":"reports","request":{"path":"/reports/r1","amount":12}}`); e != nil || def.Method != "EXECUTE" || *def.Amount != 12 {
		t.Errorf("default method / top-level amount: %+v %v", def, e)
	}
	// An adapter's request (no method, path or parameters) is hashed as
	// sent, like AGP's reference implementation does.
	sdk, e := parse(t, `{"businessId":"orders","request":{"items":[{"productId":"w","quantity":2}],"amount_cents":2995,"idempotencyKey":"x"}}`)
	if e != nil || sdk.Adapter == nil || sdk.Amount == nil || *sdk.Amount != 2995 || sdk.Canonical["idempotencyKey"] != nil {
		t.Fatalf("adapter request: %+v %v", sdk, e)
	}
	sdk2, _ := parse(t, `{"request":{"amount_cents":2995,"items":[{"quantity":2,"productId":"w"}]},"businessId":"orders"}`)
	if h1, _ := sdk.hash(); h1 == "" || func() string { h, _ := sdk2.hash(); return h }() != h1 {
		t.Error("an adapter request's hash depends on key order")
	}
	for name, body := range map[string]string{
		"not json":                  `{`,
		"array":                     `[]`,
		"extra member":              `{"businessId":"orders","request":{"path":"/orders"},"x":1}`,
		"no business":               `{"request":{"path":"/orders"}}`,
		"no request":                `{"businessId":"orders"}`,
		"method without path":       `{"businessId":"orders","request":{"method":"CREATE"}}`,
		"adapter amount not number": `{"businessId":"orders","request":{"items":[],"amount_cents":"10"}}`,
		"query in path":             `{"businessId":"orders","request":{"path":"/orders?limit=1"}}`,
		"relative path":             `{"businessId":"orders","request":{"path":"orders"}}`,
		"unknown member":            `{"businessId":"orders","request":{"path":"/orders","body":{}}}`,
		"bad parameters":            `{"businessId":"orders","request":{"path":"/orders","parameters":[1]}}`,
		"amount not number":         `{"businessId":"orders","request":{"path":"/orders","amount_cents":"10"}}`,
	} {
		if _, e := parse(t, body); e == nil || e.Status != 400 || e.Code != CodeValidation {
			t.Errorf("%s: %+v, want 400 %s", name, e, CodeValidation)
		}
	}
}

func TestPresentedKey(t *testing.T) {
	for _, tc := range []struct {
		headers     []string
		key         string
		present, ok bool
	}{
		{[]string{"X-Api-Key", "agp_abc"}, "agp_abc", true, true},
		{[]string{"Authorization", "Bearer agp_abc"}, "agp_abc", true, true},
		{[]string{"Authorization", "bearer   agp_abc "}, "agp_abc", true, true},
		{[]string{"Authorization", "Basic dXNlcjpwYXNz"}, "", true, false},
		{[]string{"X-Api-Key", "has space"}, "has space", true, false},
		{nil, "", false, false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for i := 0; i+1 < len(tc.headers); i += 2 {
			r.Header.Set(tc.headers[i], tc.headers[i+1])
		}
		k, present := presentedKey(r)
		if k != tc.key || present != tc.present || wellFormedKey(k) != tc.ok {
			t.Errorf("%v: key %q present %v well-formed %v", tc.headers, k, present, wellFormedKey(k))
		}
	}
}

func TestKeyCache(t *testing.T) {
	k := &agpv1.ApiKey{Id: "k1"}
	live := func() *keyCache { c := &keyCache{ttl: time.Minute, max: 2}; c.reset(true); return c }
	for _, tc := range []struct {
		name   string
		run    func(c *keyCache)
		cached bool
	}{
		{"kept while the watch is live", func(c *keyCache) { c.put(c.generation(), "h1", k) }, true},
		{"not kept while the watch is down", func(c *keyCache) {
			c.reset(false)
			c.put(c.generation(), "h1", k)
		}, false},
		{"evicted by hash", func(c *keyCache) {
			c.put(c.generation(), "h1", k)
			c.evict("", "h1")
		}, false},
		{"evicted by key id", func(c *keyCache) {
			c.put(c.generation(), "h1", k)
			c.evict("k1")
		}, false},
		{"another key's change leaves it", func(c *keyCache) {
			c.put(c.generation(), "h1", k)
			c.evict("k2", "h2")
		}, true},
		{"dropped when the watch breaks", func(c *keyCache) {
			c.put(c.generation(), "h1", k)
			c.reset(false)
			c.reset(true)
		}, false},
		{"a lookup that raced a change is not put back", func(c *keyCache) {
			gen := c.generation() // lookup starts
			c.evict("k1", "h1")   // the revocation arrives first
			c.put(gen, "h1", k)   // the lookup's stale answer
		}, false},
		{"a lookup that raced a reconnect is not put back", func(c *keyCache) {
			gen := c.generation()
			c.reset(false)
			c.reset(true)
			c.put(gen, "h1", k)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := live()
			tc.run(c)
			if got := c.get("h1") != nil; got != tc.cached {
				t.Errorf("cached = %v, want %v", got, tc.cached)
			}
		})
	}

	c := &keyCache{ttl: 50 * time.Millisecond, max: 2}
	c.reset(true)
	c.put(c.generation(), "h1", k)
	time.Sleep(60 * time.Millisecond)
	if c.get("h1") != nil {
		t.Error("expired entry still served: the TTL is the safety net")
	}
	for _, h := range []string{"a", "b", "c"} {
		c.put(c.generation(), h, k)
	}
	if len(c.m) > 2 {
		t.Errorf("cache grew to %d entries past its bound 2", len(c.m))
	}
	off := &keyCache{ttl: -1, max: 2}
	off.reset(true)
	off.put(off.generation(), "h", k)
	if off.get("h") != nil {
		t.Error("a disabled cache served a key")
	}
}

func TestRequestID(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set(HeaderRequestID, "client-id.1")
	if got := requestID(r); got != "client-id.1" {
		t.Errorf("client id not echoed: %q", got)
	}
	r.Header.Set(HeaderRequestID, "bad id\x01")
	if got := requestID(r); got == "bad id\x01" || len(got) != 36 {
		t.Errorf("unsafe client id %q used", got)
	}
}

func TestIdempotencyKeyHeader(t *testing.T) {
	for _, tc := range []struct {
		value, want string
		ok          bool
	}{
		{"", "", true},
		{"   ", "", true}, // whitespace only: no idempotency, as in AGP
		{" order-1 ", "order-1", true},
		{strings.Repeat("k", maxIdempotencyKey), strings.Repeat("k", maxIdempotencyKey), true},
		{strings.Repeat("k", maxIdempotencyKey+1), "", false},
		{"caf\u00e9", "", false},
	} {
		r := httptest.NewRequest("POST", "/agp/execute", nil)
		r.Header.Set(HeaderIdempotencyKey, tc.value)
		got, e := idempotencyKey(r)
		if got != tc.want || (e == nil) != tc.ok {
			t.Errorf("%q: key %q, error %v", tc.value, got, e)
		}
	}
}
