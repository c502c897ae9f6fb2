package demo_test

import (
	"testing"

	"github.com/agtpsuite/agtp/rcnssvc/demo"
)

func TestDemoPatternsLoad(t *testing.T) {
	ps, err := demo.Patterns()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"order-summary": "/orders/{order_id}", "order-digest": "/order-digest"}
	if len(ps) != len(want) {
		t.Fatalf("got %d patterns, want %d", len(ps), len(want))
	}
	for _, p := range ps {
		if want[p.RecipeName] != p.PathExact || p.Method != "SUMMARIZE" {
			t.Errorf("pattern %s: %s %s", p.RecipeName, p.Method, p.PathExact)
		}
	}
}
