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
