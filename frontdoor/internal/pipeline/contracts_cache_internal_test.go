package pipeline

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
)

// The contract endpoint cache compiles a definition once, keeps the most
// recently used within its entry and byte bounds, and keeps no failure.
func TestEndpointCache(t *testing.T) {
	compiled := map[string]int{}
	c := &endpointCache{maxEntries: 3, maxBytes: 100, compile: func(def []byte) (*endpoint.Endpoint, error) {
		compiled[string(def)]++
		if string(def) == "bad" {
			return nil, errors.New("does not compile")
		}
		return &endpoint.Endpoint{JSON: def}, nil
	}}
	get := func(def string) {
		t.Helper()
		ep, err := c.get([]byte(def))
		if def == "bad" {
			if err == nil {
				t.Fatal("a bad definition compiled")
			}
			return
		}
		if err != nil || string(ep.JSON) != def {
			t.Fatalf("get(%s) = %v, %v", def, ep, err)
		}
	}
	for range 3 {
		get("a")
		get("bad")
	}
	if compiled["a"] != 1 || compiled["bad"] != 3 {
		t.Fatalf("compiled %v", compiled)
	}
	// Entries: b, c, d push a out.
	for _, d := range []string{"b", "c", "d", "a"} {
		get(d)
	}
	if compiled["a"] != 2 || c.order.Len() != 3 {
		t.Fatalf("compiled %v, %d entries", compiled, c.order.Len())
	}
	// Bytes: a 60-byte and a 50-byte definition do not fit together.
	big1, big2 := fmt.Sprintf("%060d", 1), fmt.Sprintf("%050d", 2)
	get(big1)
	get(big2)
	if c.bytes > 100 || c.order.Len() != 1 {
		t.Fatalf("%d bytes in %d entries", c.bytes, c.order.Len())
	}
	get(big2)
	if compiled[big2] != 1 {
		t.Fatalf("compiled %v", compiled)
	}
}
