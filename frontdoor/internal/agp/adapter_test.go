package agp

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	catalogdemo "github.com/agtpsuite/agtp/catalogsvc/demo"
	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/services/agtp"
)

// demoState compiles the demo catalog, whose orders and documents
// endpoints declare their AGP requests.
func demoState(t *testing.T) *catalogstate.State {
	t.Helper()
	eps, err := catalogdemo.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	st := &catalogstate.State{Endpoints: eps}
	return st
}

// TestBindAdapterRequests pins how a stock client's request object finds
// its endpoint: the SDK's own examples (agp-gateway-protocol §21) against
// the demo business's declarations.
func TestBindAdapterRequests(t *testing.T) {
	st := demoState(t)
	tests := []struct {
		name, business, op, request string
		method, path, params        string
		code                        string
	}{
		{name: "SDK execute: items and amount_cents place an order", business: "orders", op: OpExecute,
			request: `{"items": [{"productId": "widget", "quantity": 2}], "amount_cents": 2995}`,
			method:  "CREATE", path: "/orders", params: `{"lines": [{"sku": "widget", "quantity": 2}]}`},
		{name: "a plain filter lists orders", business: "orders", op: OpQuery, request: `{"status": "open"}`,
			method: "QUERY", path: "/orders", params: `{"status": "open"}`},
		{name: "an empty query lists orders", business: "orders", op: OpQuery, request: `{}`,
			method: "QUERY", path: "/orders", params: `{}`},
		{name: "orderId fills the path and wins over the list", business: "orders", op: OpQuery, request: `{"orderId": "ord-1001"}`,
			method: "QUERY", path: "/orders/ord-1001", params: `{}`},
		{name: "a path value is percent-encoded", business: "orders", op: OpQuery, request: `{"orderId": "a/b"}`,
			method: "QUERY", path: "/orders/a%2Fb", params: `{}`},
		{name: "a matched action selects cancel", business: "orders", op: OpExecute, request: `{"action": "cancel", "orderId": "ord-1002", "reason": "late"}`,
			method: "CANCEL", path: "/orders/ord-1002", params: `{"reason": "late"}`},
		{name: "another business's declaration", business: "documents", op: OpQuery, request: `{"text": "One. Two.", "maxSentences": 1}`,
			method: "SUMMARIZE", path: "/documents", params: `{"text": "One. Two.", "max_sentences": 1}`},
		{name: "no execute endpoint takes a bare filter", business: "orders", op: OpExecute, request: `{"status": "open"}`, code: CodeCapabilityNotFound},
		{name: "no query endpoint of documents takes an empty request", business: "documents", op: OpQuery, request: `{}`, code: CodeCapabilityNotFound},
		{name: "a rename onto a member also sent", business: "orders", op: OpExecute, request: `{"items": [], "lines": []}`, code: CodeValidation},
		{name: "a path value that is not a scalar", business: "orders", op: OpQuery, request: `{"orderId": {"x": 1}}`, code: CodeValidation},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req map[string]any
			if err := json.Unmarshal([]byte(tc.request), &req); err != nil {
				t.Fatal(err)
			}
			b := findBusiness(st, tc.business)
			if b == nil {
				t.Fatalf("no business %s", tc.business)
			}
			tg := &target{Business: tc.business, Adapter: req}
			e := b.bind(tc.op, tg)
			if tc.code != "" {
				if e == nil || e.Code != tc.code {
					t.Fatalf("bind = %+v, want %s", e, tc.code)
				}
				return
			}
			if e != nil {
				t.Fatalf("bind: %+v", e)
			}
			var want map[string]any
			if err := json.Unmarshal([]byte(tc.params), &want); err != nil {
				t.Fatal(err)
			}
			if tg.Method != tc.method || tg.Path != tc.path || !reflect.DeepEqual(tg.Params, want) {
				t.Fatalf("bound to %s %s %v, want %s %s %v", tg.Method, tg.Path, tg.Params, tc.method, tc.path, want)
			}
		})
	}
}

// TestBindAmbiguous: two endpoints that take a request equally well are
// named, not chosen between.
func TestBindAmbiguous(t *testing.T) {
	a := ep("QUERY", "/shop/items", "shop", "informational", "shop.items", false)
	a.Def.AGP = &endpoint.AGPMapping{Requires: []string{"q"}}
	b := ep("SEARCH", "/shop/catalog", "shop", "informational", "shop.search", false)
	b.Def.AGP = &endpoint.AGPMapping{Requires: []string{"q"}}
	biz := findBusiness(&catalogstate.State{Endpoints: []*endpoint.Endpoint{a, b}}, "shop")
	e := biz.bind(OpQuery, &target{Business: "shop", Adapter: map[string]any{"q": "x"}})
	if e == nil || e.Code != CodeAmbiguous || !strings.Contains(e.Message, "QUERY /shop/items and SEARCH /shop/catalog") {
		t.Fatalf("bind = %+v, want %s naming both", e, CodeAmbiguous)
	}
}

// TestDiscoverCapabilitiesShape: capabilities are keyed by AGP operation
// with InteractionCapability's five members; the endpoints are listed
// apart with the request each takes.
func TestDiscoverCapabilitiesShape(t *testing.T) {
	data := findBusiness(demoState(t), "orders").discoverData("srv")
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Capabilities map[string]map[string]any `json:"capabilities"`
		Endpoints    map[string]map[string]any `json:"endpoints"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{OpDiscover, OpQuery, OpExecute} {
		c := got.Capabilities[op]
		if len(c) != 5 || c["operation"] != op || c["method"] == "" || c["endpoint"] == "" || c["authRequired"] != true || c["description"] == "" {
			t.Errorf("capabilities.%s = %v, want AGP's {operation, method, endpoint, authRequired, description}", op, c)
		}
	}
	if q := got.Capabilities[OpQuery]; !strings.Contains(q["endpoint"].(string), "/orders/{order_id}") || strings.Contains(q["method"].(string), "CREATE") {
		t.Errorf("query capability %v: lists the informational endpoints only", q)
	}
	create := got.Endpoints["CREATE /orders"]
	req, _ := create["request"].(map[string]any)
	if create["operation"] != OpExecute || req == nil || req["rename"] == nil {
		t.Errorf("endpoints[CREATE /orders] = %v, want execute with its request declaration", create)
	}
}

// TestPendingTransactions: an answer of 202 Accepted (work that outlives
// the request) is a pending transaction in the envelope and the record;
// other 2xx succeed, errors fail.
func TestPendingTransactions(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   string
	}{{202, txPending}, {200, txSucceeded}, {201, txSucceeded}, {262, txFailed}, {422, txFailed}, {504, txFailed}} {
		if got := txStatus(tc.status); got != tc.want {
			t.Errorf("txStatus(%d) = %s, want %s", tc.status, got, tc.want)
		}
	}
	c := &call{rid: "r"}
	resp := c.shaper(&transaction{id: "tx-1"})(context.Background(), nil, agtp.NewResponse(agtp.StatusAccepted, agtp.MediaTypeJSON, []byte(`{"result":{"job":"j-1"}}`)))
	var env operationEnvelope
	if err := json.Unmarshal(resp.Body, &env); err != nil || env.Status != txPending || env.TransactionID != "tx-1" || string(env.Data) != `{"job":"j-1"}` {
		t.Fatalf("envelope %s (%v), want pending with the result as data", resp.Body, err)
	}
}
