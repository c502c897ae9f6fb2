package pipeline

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/frontdoor/internal/builtin"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

func TestTier2Record(t *testing.T) {
	long := strings.Repeat("p", maxRecordedPrincipal+1)
	for _, tc := range []struct {
		name, method, path, input string
		check                     func(p attribution.Payload) bool
	}{
		{"TRANSFER names both principals", "TRANSFER", "/orders/o-1", `{"order_id":"o-1","from_principal":"alice","to_principal":"bob"}`,
			func(p attribution.Payload) bool {
				return p.FromPrincipal == "alice" && p.ToPrincipal == "bob" && p.ProcedureID == ""
			}},
		{"an overlong principal is recorded by its hash", "TRANSFER", "/orders/o-1", `{"from_principal":"` + long + `","to_principal":"bob"}`,
			func(p attribution.Payload) bool {
				return strings.HasPrefix(p.FromPrincipal, "sha256:") && len(p.FromPrincipal) == 71
			}},
		{"RUN names the procedure and its input, credentials redacted", "RUN", "/procedures/reindex-orders", `{"status":"open","opts":{"api_key":"s3cret","n":1}}`,
			func(p attribution.Payload) bool {
				return p.ProcedureID == "/procedures/reindex-orders" && string(p.RunInput) == `{"opts":{"api_key":"[redacted]","n":1},"status":"open"}`
			}},
		{"a credential nested 100 levels deep is redacted too", "RUN", "/procedures/p", `{"opts":` + nestedJSON(100, `{"password":"s3cret"}`) + `}`,
			func(p attribution.Payload) bool {
				return strings.Contains(string(p.RunInput), `{"password":"[redacted]"}`) && !strings.Contains(string(p.RunInput), "s3cret")
			}},
		{"an overlong RUN input is recorded by its hash", "RUN", "/procedures/p", `{"blob":"` + strings.Repeat("b", maxRecordedRunInput) + `"}`,
			func(p attribution.Payload) bool { return strings.HasPrefix(string(p.RunInput), `{"sha256":"`) }},
		{"other methods get no Tier 2 members", "CREATE", "/orders", `{"from_principal":"alice"}`,
			func(p attribution.Payload) bool { return p.FromPrincipal == "" && p.RunInput == nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := &exchange{req: &agtp.Request{Path: tc.path}, input: []byte(tc.input), inputMethod: tc.method}
			var p attribution.Payload
			tier2Record(x, &p)
			if !tc.check(p) {
				t.Fatalf("payload = %+v (run_input %s)", p, p.RunInput)
			}
		})
	}
}

func TestRetryRecordLinksTheOriginalTask(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    *exchange
		want string
	}{
		{"the RETRY's own record", &exchange{inputMethod: "RETRY", input: []byte(`{"original_task_id":"t-0"}`)}, "t-0"},
		{"the re-run's record", &exchange{ctx: builtin.WithRetryOf(context.Background(), "t-9"), inputMethod: "CREATE", input: []byte(`{}`)}, "t-9"},
		{"another request", &exchange{ctx: context.Background(), inputMethod: "CREATE", input: []byte(`{"original_task_id":"t-0"}`)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p attribution.Payload
			retryRecord(tc.x, &p)
			var got string
			if raw, ok := p.Extra[recordOriginalTaskID]; ok {
				_ = json.Unmarshal(raw, &got)
			}
			if got != tc.want {
				t.Fatalf("original_task_id = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestIntentAssertionJTI(t *testing.T) {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	header := enc(`{"alg":"EdDSA","typ":"JWT"}`)
	jwt := func(claims string) string { return header + "." + enc(claims) + ".c2ln" }
	for _, tc := range []struct {
		name, value, want string
	}{
		{"a JWT with a jti", jwt(`{"jti":"intent-42","sub":"p"}`), "intent-42"},
		{"an unsecured JWT (empty signature) with a jti", header + "." + enc(`{"jti":"x"}`) + ".", "x"},
		{"no header", "", ""},
		{"not three parts", header + "." + enc(`{"jti":"x"}`), ""},
		{"payload not base64url", header + ".!!!.sig", ""},
		{"payload not JSON", header + "." + enc("jti") + ".sig", ""},
		{"no jti", jwt(`{"sub":"p"}`), ""},
		{"numeric jti", jwt(`{"jti":42}`), ""},
		{"empty jti", jwt(`{"jti":""}`), ""},
		{"control character in jti", jwt(`{"jti":"a\nb"}`), ""},
		{"overlong jti", jwt(`{"jti":"` + strings.Repeat("j", 257) + `"}`), ""},
		{"jti at the bound", jwt(`{"jti":"` + strings.Repeat("j", 256) + `"}`), strings.Repeat("j", 256)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := intentAssertionJTI(tc.value); got != tc.want {
				t.Fatalf("intentAssertionJTI = %q, want %q", got, tc.want)
			}
		})
	}
}

// A panic in a stage becomes 500 internal-error for the record stage to
// sign and chain, instead of escaping to the transport's unsigned one.
func TestDecidePanicIsA500(t *testing.T) {
	p := &Pipeline{Deps: Deps{Log: slog.New(slog.DiscardHandler)}} // no catalog store: wire panics
	x := &exchange{ctx: context.Background(), req: &agtp.Request{Method: "QUERY", Path: "/notes"}}
	resp := p.decideRecovered(x)
	if resp.Status != agtp.StatusServerError || x.rejection != transport.ReasonInternalError {
		t.Fatalf("answer = %d %s (%s)", resp.Status, resp.Body, x.rejection)
	}
}
