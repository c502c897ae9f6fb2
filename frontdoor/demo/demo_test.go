package demo_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	catalogdemo "github.com/agtpsuite/agtp/catalogsvc/demo"
	"github.com/agtpsuite/agtp/frontdoor/demo"
	"github.com/agtpsuite/agtp/frontdoor/handler"
)

func TestEveryDemoFunctionIsRegistered(t *testing.T) {
	reg := handler.NewRegistry()
	demo.Register(reg)
	for _, name := range catalogdemo.Functions {
		if _, ok := reg.Lookup(name); !ok {
			t.Errorf("the demo catalog binds %s, which the demo does not register", name)
		}
	}
}

// TestPurchase walks an order through PURCHASE: an open order is paid
// once; paid, shipped, cancelled and unknown orders are declared errors.
func TestPurchase(t *testing.T) {
	reg := handler.NewRegistry()
	demo.Register(reg)
	call := func(name, input string) (map[string]any, error) {
		t.Helper()
		f, _ := reg.Lookup(name)
		res, err := f(context.Background(), &handler.Call{Input: []byte(input), Caller: handler.Caller{AgentID: "agent-1"}})
		if err != nil {
			return nil, err
		}
		var out map[string]any
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatal(err)
		}
		return out, nil
	}
	created, err := call("demo.orders.create", `{"lines":[{"sku":"widget","quantity":1}]}`)
	if err != nil {
		t.Fatal(err)
	}
	cancelled := created["order_id"].(string)
	if _, err := call("demo.orders.cancel", `{"order_id":"`+cancelled+`"}`); err != nil {
		t.Fatal(err)
	}
	pay := func(id string) string {
		return `{"order_id":"` + id + `","principal_id":"alice","amount":"12.50","currency":"EUR"}`
	}
	for _, tc := range []struct {
		name, order string
		wantErr     string
		wantStatus  int
	}{
		{name: "an open order is paid", order: "ord-1002"},
		{name: "paying it again is a conflict", order: "ord-1002", wantErr: "order_already_paid", wantStatus: 409},
		{name: "a shipped order was paid", order: "ord-1001", wantErr: "order_already_paid", wantStatus: 409},
		{name: "a cancelled order cannot be paid", order: cancelled, wantErr: "order_cancelled", wantStatus: 409},
		{name: "an unknown order", order: "ord-9", wantErr: "order_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := call("demo.orders.purchase", pay(tc.order))
			if tc.wantErr != "" {
				var he *handler.Error
				if !errors.As(err, &he) || he.Name != tc.wantErr || he.Status != tc.wantStatus {
					t.Fatalf("err = %v, want %s (status %d)", err, tc.wantErr, tc.wantStatus)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, _ := out["payment"].(map[string]any)
			if out["status"] != "paid" || p["amount"] != "12.50" || p["currency"] != "EUR" || p["principal_id"] != "alice" || p["paid_by"] != "agent-1" {
				t.Fatalf("purchase = %v", out)
			}
			got, err := call("demo.orders.get", `{"order_id":"`+tc.order+`"}`)
			if err != nil || got["status"] != "paid" {
				t.Fatalf("the order after PURCHASE = %v, %v", got, err)
			}
		})
	}
}

// TestTier2Handlers walks the demo's Tier 2 handlers: AUTHORIZE adds a
// grant to the order, TRANSFER moves the owner only from the current one
// and keeps the custody chain, REGISTER creates a customer per call, and
// the reindex procedure counts its runs.
func TestTier2Handlers(t *testing.T) {
	reg := handler.NewRegistry()
	demo.Register(reg)
	call := func(name, input string) (map[string]any, error) {
		t.Helper()
		f, ok := reg.Lookup(name)
		if !ok {
			t.Fatalf("%s is not registered", name)
		}
		res, err := f(context.Background(), &handler.Call{Input: []byte(input), Caller: handler.Caller{AgentID: "agent-1", Owner: "owner@example.test"}})
		if err != nil {
			return nil, err
		}
		var out map[string]any
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatal(err)
		}
		return out, nil
	}
	named := func(err error, name string, status int) bool {
		var he *handler.Error
		return errors.As(err, &he) && he.Name == name && he.Status == status
	}
	created, err := call("demo.orders.create", `{"customer_ref":"alice","lines":[{"sku":"widget","quantity":1}]}`)
	if err != nil || created["owner"] != "alice" {
		t.Fatalf("create = %v %v, want owner alice", created, err)
	}
	id := created["order_id"].(string)
	if own, _ := call("demo.orders.create", `{"lines":[{"sku":"widget","quantity":1}]}`); own["owner"] != "owner@example.test" {
		t.Fatalf("an order without customer_ref belongs to %v, want the agent's principal", own["owner"])
	}

	g, err := call("demo.orders.authorize", `{"order_id":"`+id+`","subject":"bob","scope":["orders:read"],"ttl":60}`)
	if err != nil || g["subject"] != "bob" || g["granted_by"] != "agent-1" || g["expires_at"] == "" {
		t.Fatalf("authorize = %v %v", g, err)
	}
	if _, err := call("demo.orders.authorize", `{"order_id":"nope","subject":"bob","scope":["orders:read"]}`); !named(err, "order_not_found", 0) {
		t.Fatalf("authorize of an unknown order: %v", err)
	}

	for _, tc := range []struct {
		name, input, wantOwner, wantErr string
		wantStatus                      int
	}{
		{"the owner transfers", `{"order_id":"` + id + `","from_principal":"alice","to_principal":"bob"}`, "bob", "", 0},
		{"a stale owner is a conflict", `{"order_id":"` + id + `","from_principal":"alice","to_principal":"carol"}`, "", "owner_mismatch", 409},
		{"the new owner transfers on", `{"order_id":"` + id + `","from_principal":"bob","to_principal":"carol"}`, "carol", "", 0},
		{"an unknown order", `{"order_id":"nope","from_principal":"a","to_principal":"b"}`, "", "order_not_found", 0},
	} {
		out, err := call("demo.orders.transfer", tc.input)
		if tc.wantErr != "" {
			if !named(err, tc.wantErr, tc.wantStatus) {
				t.Errorf("%s: err = %v, want %s %d", tc.name, err, tc.wantErr, tc.wantStatus)
			}
			continue
		}
		if err != nil || out["owner"] != tc.wantOwner {
			t.Errorf("%s: = %v %v, want owner %s", tc.name, out, err, tc.wantOwner)
		}
	}
	o, _ := call("demo.orders.get", `{"order_id":"`+id+`"}`)
	if custody, _ := o["custody"].([]any); len(custody) != 2 || len(o["grants"].([]any)) != 1 {
		t.Fatalf("order = %v, want two custody entries and one grant", o)
	}

	a, _ := call("demo.customers.register", `{"entity_type":"customer","data":{"name":"Ada"}}`)
	b, _ := call("demo.customers.register", `{"entity_type":"customer","data":{"name":"Ada"}}`)
	if a["customer_id"] == nil || a["customer_id"] == b["customer_id"] || a["registered_by"] != "agent-1" {
		t.Fatalf("register = %v and %v, want two customers", a, b)
	}

	for want := 1.0; want <= 2; want++ {
		r, err := call("demo.procedures.reindex", `{"status":"open"}`)
		if err != nil || r["runs"] != want || r["orders_indexed"].(float64) < 1 {
			t.Fatalf("reindex = %v %v, want run %v", r, err, want)
		}
	}
}
