package agp

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
)

// fuzzParseTarget runs parseTarget on a request body as an HTTP-only
// agent sends it.
func fuzzParseTarget(h *Handler, body []byte, contentType string) (*call, *target, *apiError) {
	r := httptest.NewRequest(http.MethodPost, "/agp/execute", bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	c := &call{h: h, w: httptest.NewRecorder(), r: r, rid: "fuzz-request"}
	t, e := c.parseTarget(agtp.MethodExecute)
	return c, t, e
}

// FuzzParseTarget feeds AGP query, prepare and execute bodies through
// parseTarget. A refusal is a 400 VALIDATION_ERROR whose body is JSON. An
// accepted request names a business and either its call (an absolute path
// the AGTP side can carry, whose AGTP body carries exactly its parameters)
// or, in an adapter's shape, no call at all until bind finds it; its
// confirmation hash depends on what the request says, not on how it is
// spelled (member order, whitespace, escapes, a client's idempotencyKey).
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{
		`{"businessId":"orders","request":{"method":"CREATE","path":"/orders","parameters":{"lines":[{"sku":"w","quantity":2}],"amount_cents":1395},"idempotencyKey":"client-chosen"}}`,
		`{"request":{"parameters":{"amount_cents":1395,"lines":[{"quantity":2,"sku":"w"}]},"path":"/orders","method":"CREATE"},"businessId":"orders"}`,
		`{"businessId":"reports","request":{"path":"/reports/r1","amount":12}}`,
		`{"businessId":"r\u00e9servations","request":{"path":"/rooms/%F0%9F%98%80","parameters":{"note":"<b>&amp;\u2028"}}}`,
		`{"businessId":"orders","request":{"path":"/orders","parameters":{"big":1e400}}}`,
		`{"businessId":"orders","request":{"path":"/orders","amount_cents":1e400}}`,
		`{"businessId":"orders","request":{"path":"/orders","parameters":{"a":1,"a":2}}}`,
		`{"businessId":"orders","request":{"method":"bad method\r\n","path":"/orders"}}`,
		`{"businessId":"orders","request":{"path":"/orders?limit=1"}}`,
		`{"businessId":"orders","request":{"path":"/orders","parameters":[1]}}`,
		`{"businessId":"orders","request":{"path":"/orders"},"x":1}`,
		`{"businessId":"orders","request":{"items":[{"productId":"widget","quantity":1}],"amount_cents":2995,"idempotencyKey":"client-chosen"}}`,
		`{"businessId":"orders","request":{}}`,
		`null`,
		`{`,
	} {
		f.Add([]byte(s), "application/json")
	}
	f.Add([]byte(`{"businessId":"orders","request":{"path":"/orders"}}`), "text/plain")
	f.Add([]byte(`{"businessId":"orders","request":{"path":"/orders"}}`), "application/problem+json; charset=utf-8")
	h := New(Options{})

	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		c, tg, e := fuzzParseTarget(h, body, contentType)
		if e != nil {
			if tg != nil || e.Status != http.StatusBadRequest || e.Code != CodeValidation {
				t.Fatalf("refusal %+v with target %+v", e, tg)
			}
			if b := e.body(c.rid); !json.Valid(b) {
				t.Fatalf("error body is not JSON: %s", b)
			}
			return
		}
		if tg.Business == "" || len(tg.Business) > 256 {
			t.Fatalf("businessId %q accepted", tg.Business)
		}
		if tg.Amount != nil && (math.IsInf(*tg.Amount, 0) || math.IsNaN(*tg.Amount)) {
			t.Fatalf("amount %v accepted", *tg.Amount)
		}
		if tg.Adapter != nil {
			checkAdapterTarget(t, tg)
		} else {
			checkExplicitTarget(t, c, tg)
		}
		hash, err := tg.hash()
		if err != nil {
			return
		}
		if again, _ := tg.hash(); again != hash || len(hash) != 64 {
			t.Fatalf("hash %q then %q", hash, again)
		}
		// The same request spelled otherwise: members sorted, compact,
		// HTML escaped, and the client's idempotencyKey changed.
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("accepted body does not decode: %v", err)
		}
		if r, ok := m["request"].(map[string]any); ok {
			r["idempotencyKey"] = "another"
		}
		respelled, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		_, tg2, e2 := fuzzParseTarget(h, respelled, "application/json")
		if e2 != nil {
			t.Fatalf("respelled request %s refused: %+v", respelled, e2)
		}
		if h2, err := tg2.hash(); err != nil || h2 != hash {
			t.Fatalf("respelling %s as %s changed the hash: %v", body, respelled, err)
		}
	})
}

// checkAdapterTarget: a request in an adapter's shape names no call yet
// (bind finds it from the business's declarations), holds none of the
// members that would name one, and drops the client's idempotencyKey.
func checkAdapterTarget(t *testing.T, tg *target) {
	if tg.Method != "" || tg.Path != "" || tg.Params != nil {
		t.Fatalf("adapter request with a call before bind: %+v", tg)
	}
	for _, k := range slices.Concat(explicitMembers, []string{"idempotencyKey"}) {
		if _, ok := tg.Adapter[k]; ok {
			t.Fatalf("adapter request keeps %q: %+v", k, tg.Adapter)
		}
	}
}

// checkExplicitTarget: a request that names its call has an absolute path
// the AGTP side can carry, a method and parameters, and its AGTP body
// carries exactly those parameters.
func checkExplicitTarget(t *testing.T, c *call, tg *target) {
	if !strings.HasPrefix(tg.Path, "/") || len(tg.Path) > 2048 || strings.ContainsAny(tg.Path, "?#") || !validTarget(tg.Path) {
		t.Fatalf("path %q accepted", tg.Path)
	}
	if tg.Method == "" || tg.Params == nil {
		t.Fatalf("target without method or parameters: %+v", tg)
	}
	req := c.request(tg.Method, tg.Path, tg.body())
	if req == nil || req.Path != tg.Path || req.Method != tg.Method {
		t.Fatalf("AGTP request %+v for target %+v", req, tg)
	}
	if b := tg.body(); len(b) > 0 {
		var env map[string]json.RawMessage
		if err := json.Unmarshal(b, &env); err != nil || len(env) != 1 || env["parameters"] == nil {
			t.Fatalf("AGTP body %s is not a parameters envelope", b)
		}
	} else if len(tg.Params) != 0 {
		t.Fatal("parameters dropped from the AGTP body")
	}
}

// FuzzFromAGTP maps arbitrary AGTP answers (a handler's or an upstream's
// error body) to AGP errors: always a 4xx or 5xx with a JSON body.
func FuzzFromAGTP(f *testing.F) {
	for _, eb := range []agtp.ErrorBody{
		{Status: 422, Reason: "input-invalid", Explanation: "bad", Extra: map[string]any{"violations": []any{map[string]any{"field": "x"}}}},
		{Status: 262, Reason: "authority-scope", Explanation: "no", Extra: map[string]any{"scope": "orders:write"}},
		{Status: 429, Reason: "rate-limited", Explanation: "slow", Extra: map[string]any{"retry_after_seconds": 1e300, "limit": "10/s"}},
		{Status: 409, Reason: "idempotency-key-reused", Explanation: "again", Extra: map[string]any{"retry_after_seconds": -3}},
		{Status: 504, Reason: "upstream_timeout", Explanation: "slow"},
	} {
		r, err := eb.Response()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(r.Status, r.Body)
	}
	f.Add(200, []byte(`{"result":{"ok":true}}`))
	f.Add(0, []byte(`{"reason":""}`))
	f.Add(-1, []byte(`not json`))

	f.Fuzz(func(t *testing.T, status int, body []byte) {
		resp := agtp.NewResponse(status, agtp.MediaTypeJSON, body)
		e := fromAGTP(resp)
		if e.Status < 400 || e.Status > 599 || e.Code == "" && e.Error == "" {
			t.Fatalf("AGTP %d %s mapped to %+v", status, body, e)
		}
		b := e.body("fuzz-request")
		var eb errorBody
		if err := json.Unmarshal(b, &eb); err != nil || eb.Error == "" || len(eb.Message) > maxMessage {
			t.Fatalf("error body %s: %v", b, err)
		}
		if r := resultOf(body); json.Valid(body) && !json.Valid(r) {
			t.Fatalf("resultOf(%s) = %s", body, r)
		}
	})
}
