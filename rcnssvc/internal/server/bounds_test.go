//go:build unix

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// proposalWithInput is the order summary proposal with its input_schema
// replaced.
func proposalWithInput(input string) map[string]any {
	ep := orderSummaryEndpoint()
	ep["input_schema"] = json.RawMessage(input)
	return map[string]any{"endpoint": ep}
}

func summaryInput(extraProps string, extra ...string) string {
	s := `{"type":"object","additionalProperties":false,"required":["order_id"],"properties":{"order_id":{"type":"string"}` + extraProps + `}`
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

// A proposed schema beyond the bounds of catalogsvc/endpoint is 400
// schema-invalid naming the bound, before it is compiled or as soon as
// it is, at a small cost; each of these cost seconds to minutes of CPU
// and GiBs before the bounds.
func TestProposeSchemaBombsRefused(t *testing.T) {
	e := newEnv(t, envConfig{})
	var multipleOf, chain strings.Builder
	for i := range 60 {
		fmt.Fprintf(&multipleOf, `,"m%d":{"multipleOf":1e-999999}`, i)
	}
	for i := range 21 {
		fmt.Fprintf(&chain, `"d%d":{"allOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+1)
	}
	chain.WriteString(`"d21":{"type":"string"}`)
	for _, tc := range []struct{ name, input, want string }{
		{"21 KB pattern", summaryInput(`,"x":{"type":"string","pattern":"` + strings.Repeat("a{1000}", 3000) + `"}`), "more than 1024"},
		{"60 × multipleOf 1e-999999", summaryInput(multipleOf.String()), "closer to zero than a 64-bit float"},
		{"not 1,500 deep", summaryInput(`,"x":` + strings.Repeat(`{"not":`, 1500) + `{}` + strings.Repeat(`}`, 1500)), "deeper than 64 levels"},
		{"$defs chain of 21", summaryInput(`,"x":{"$ref":"#/$defs/d0"}`, `"$defs":{`+chain.String()+`}`), "more than 10000 subschemas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var resp *rcnsv1.ProposeResponse
			var b map[string]any
			cpu, alloc := testkit.Cost(t, func() { resp, b = e.propose(reader(), proposalWithInput(tc.input), "") })
			t.Logf("cost %v CPU, %.1f MiB allocated", cpu, float64(alloc)/(1<<20))
			if resp.GetStatus() != 400 || b["reason"] != "schema-invalid" {
				t.Fatalf("got %d %v", resp.GetStatus(), b)
			}
			v, _ := json.Marshal(b["violations"])
			if !strings.Contains(string(v), tc.want) || !strings.Contains(string(v), `"field":"input_schema"`) {
				t.Fatalf("violations %s lack %q", v, tc.want)
			}
			if cpu > 2*time.Second || alloc > 256<<20 {
				t.Fatalf("cost %v CPU, %d MiB", cpu, alloc>>20)
			}
		})
	}
	// An ordinary schema with a pattern and numbers is still accepted.
	resp, b := e.propose(reader(), proposalWithInput(summaryInput(`,"max_sentences":{"type":"integer","minimum":1,"maximum":1e3},"style":{"type":"string","pattern":"^[a-z]{1,16}$"}`)), "")
	if resp.GetStatus() != 263 {
		t.Fatalf("ordinary schema: %d %v", resp.GetStatus(), b)
	}
}

// Compilation cannot be interrupted; a proposal whose evaluation deadline
// has passed does not start compiling.
func TestProposeCompileAfterDeadline(t *testing.T) {
	e := newEnv(t, envConfig{opts: func(o *Options) { o.Propose.AsyncAfter = 0; o.Propose.EvaluationTimeout = time.Nanosecond }})
	raw, _ := json.Marshal(orderSummary())
	_, err := e.client.Propose(context.Background(), &rcnsv1.ProposeRequest{Caller: reader(), Parameters: string(raw)})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
}
