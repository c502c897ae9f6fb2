//go:build unix

package pipeline_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/testkit"
)

func wantCheapRequest(t *testing.T, f func()) {
	t.Helper()
	cpu, alloc := testkit.Cost(t, f)
	t.Logf("cost %v CPU, %.1f MiB allocated", cpu, float64(alloc)/(1<<20))
	if cpu > 2*time.Second || alloc > 256<<20 {
		t.Fatalf("cost %v CPU, %d MiB allocated", cpu, alloc>>20)
	}
}

// digestContract is a contract for SUMMARIZE /digest whose endpoint has
// the given input_schema.
func digestContract(t *testing.T, input string) *rcnsv1.Contract {
	t.Helper()
	def, err := json.Marshal(map[string]any{
		"method": "SUMMARIZE", "path": "/digest", "description": "Summarizes the notes.",
		"semantic": map[string]any{"intent": "Summarize the notes.", "actor": "agent", "outcome": "The caller holds a summary.",
			"capability": "analysis", "confidence": 0.5, "impact": "informational", "is_idempotent": true},
		"input_schema": json.RawMessage(input), "output_schema": map[string]any{"type": "object"},
		"errors": []string{"composition_failed"}, "handler": map[string]any{"type": "composition", "recipe": "digest"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &rcnsv1.Contract{SynthesisId: "syn-1", Method: "SUMMARIZE", Path: "/digest", Endpoint: string(def),
		Recipe: `{"recipe_name":"digest","recipe_version":"1","steps":[{"method":"QUERY","path":"/notes/{note_id}"}]}`}
}

func contractFixture(t *testing.T, c *rcnsv1.Contract) *stageFixture {
	return newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.rcns = &testkit.RCNSStub{GetContractF: func(context.Context, *rcnsv1.GetContractRequest) (*rcnsv1.GetContractResponse, error) {
			return &rcnsv1.GetContractResponse{Contract: c}, nil
		}}
	})
}

// A contract's endpoint is compiled on its first call, not on each.
func TestContractEndpointCompiledOnce(t *testing.T) {
	f := contractFixture(t, digestContract(t, `{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":false}`))
	compiles := pipeline.CountContractCompiles(f.p)
	for range 3 {
		resp, body := f.do(t, stageRequest("SUMMARIZE", "/digest", `{"n":"x"}`, agtp.HeaderContractSynthesized, "syn-1"))
		wantAnswer(t, resp, body, agtp.StatusUnprocessable, "input-invalid")
	}
	if n := compiles.Load(); n != 1 {
		t.Fatalf("compiled %d times", n)
	}
}

// A contract stored before the schema bounds, whose endpoint would cost
// seconds and GiBs to compile on every call, is refused at once.
func TestContractBombEndpointRefused(t *testing.T) {
	bomb := `{"type":"object","properties":{"n":` + strings.Repeat(`{"not":`, 1500) + `{}` + strings.Repeat(`}`, 1500) + `},"additionalProperties":false}`
	f := contractFixture(t, digestContract(t, bomb))
	for range 2 {
		wantCheapRequest(t, func() {
			resp, body := f.do(t, stageRequest("SUMMARIZE", "/digest", `{"n":1}`, agtp.HeaderContractSynthesized, "syn-1"))
			wantAnswer(t, resp, body, agtp.StatusServerError, "synthesis-error")
		})
	}
}

// A body number longer than 64 characters or beyond a 64-bit float is
// 400 invalid-body, before the input is validated; ordinary numbers are
// validated as before.
func TestBodyNumberBounds(t *testing.T) {
	f := newStageFixture(t, nil)
	many := `{"limit":1,"x":[` + strings.TrimSuffix(strings.Repeat(`{"quantity":1e999999},`, 60), ",") + `]}`
	for _, tc := range []struct {
		name, body string
		status     int
		reason     string
		explains   string
	}{
		{"60 × 1e999999", many, agtp.StatusBadRequest, "invalid-body", "beyond the range of a 64-bit float"},
		{"1e-999999", `{"limit":1e-999999}`, agtp.StatusBadRequest, "invalid-body", "closer to zero"},
		{"65 digits", `{"limit":1` + strings.Repeat("0", 64) + `}`, agtp.StatusBadRequest, "invalid-body", "65 characters long"},
		{"an ordinary integer", `{"limit":5}`, agtp.StatusOK, "", ""},
		{"an exponent within range", `{"limit":5e0}`, agtp.StatusOK, "", ""},
		{"not an integer", `{"limit":2.5}`, agtp.StatusUnprocessable, "input-invalid", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCheapRequest(t, func() {
				resp, body := f.do(t, stageRequest("QUERY", "/notes/n1", tc.body))
				if resp.Status != tc.status || tc.reason != "" && body["reason"] != tc.reason {
					t.Fatalf("answer %d %s", resp.Status, resp.Body)
				}
				if ex, _ := body["explanation"].(string); !strings.Contains(ex, tc.explains) || tc.explains != "" && !strings.HasPrefix(ex, "the body is refused: the number at /") {
					t.Fatalf("explanation %q", ex)
				}
			})
		})
	}
}
