package pipeline

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/services/agtp"
)

func TestRefuseFreeForm(t *testing.T) {
	run := &endpoint.Endpoint{Def: &endpoint.Definition{Method: "RUN"}}
	execute := &endpoint.Endpoint{Def: &endpoint.Definition{Method: "EXECUTE"}}
	for _, tc := range []struct {
		name   string
		ep     *endpoint.Endpoint
		query  string
		body   string
		member string
	}{
		{"a RUN with named parameters passes", run, "", `{"status":"open","options":{"dry_run":true}}`, ""},
		{"a top-level command", run, "", `{"command":"rm -rf /"}`, "command"},
		{"a nested script", run, "", `{"input":{"steps":[{"Script":"x"}]}}`, "Script"},
		{"an exec in the query", run, "exec=ls", `{}`, "exec"},
		{"a free-form member on another method is not RUN's rule", execute, "", `{"code":"x"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := &exchange{req: &agtp.Request{}}
			var body map[string]any
			if err := json.Unmarshal([]byte(tc.body), &body); err != nil {
				t.Fatal(err)
			}
			q, _ := url.ParseQuery(tc.query)
			resp := refuseFreeForm(x, tc.ep, q, body)
			if tc.member == "" {
				if resp != nil {
					t.Fatalf("refused: %d %s", resp.Status, resp.Body)
				}
				return
			}
			if resp == nil || resp.Status != agtp.StatusUnprocessable || !strings.Contains(string(resp.Body), `"reason":"`+ReasonFreeFormExecution+`"`) ||
				!strings.Contains(string(resp.Body), `"member":"`+tc.member+`"`) {
				t.Fatalf("resp = %+v, want 422 %s naming %s", resp, ReasonFreeFormExecution, tc.member)
			}
		})
	}
}

func TestRequestKey(t *testing.T) {
	for _, tc := range []struct {
		name, method, header, input string
		hasHeader                   bool
		wantKey                     string
		wantPresent                 bool
		wantStatus                  int
	}{
		{"REGISTER: the parameter is the key", "REGISTER", "", `{"idempotency_key":"k1"}`, false, "k1", true, 0},
		{"REGISTER: a blank header yields to the parameter", "REGISTER", "", `{"idempotency_key":"k1"}`, true, "k1", true, 0},
		{"REGISTER: header and the same parameter", "REGISTER", "k1", `{"idempotency_key":"k1"}`, true, "k1", true, 0},
		{"REGISTER: header and another parameter is 400", "REGISTER", "k1", `{"idempotency_key":"k2"}`, true, "", false, 400},
		{"REGISTER: no key at all", "REGISTER", "", `{}`, false, "", false, 0},
		{"another method ignores the parameter", "CREATE", "", `{"idempotency_key":"k1"}`, false, "", false, 0},
		{"another method keeps the header", "CREATE", "h", `{"idempotency_key":"k1"}`, true, "h", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := &exchange{req: &agtp.Request{}}
			if tc.hasHeader {
				x.req.Header.Set(agtp.HeaderIdempotencyKey, tc.header)
			}
			key, present, resp := requestKey(x, tc.method, []byte(tc.input))
			if tc.wantStatus != 0 {
				if resp == nil || resp.Status != tc.wantStatus || !strings.Contains(string(resp.Body), ReasonIdempotencyKeyMismatch) {
					t.Fatalf("resp = %+v, want %d %s", resp, tc.wantStatus, ReasonIdempotencyKeyMismatch)
				}
				return
			}
			if resp != nil || key != tc.wantKey || present != tc.wantPresent {
				t.Fatalf("requestKey = %q %v %+v, want %q %v", key, present, resp, tc.wantKey, tc.wantPresent)
			}
		})
	}
}

func TestGrantScopes(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string
		ok   bool
	}{
		{`["orders:read","orders:write"]`, "orders:read, orders:write", true},
		{`"orders:read, orders:write"`, "orders:read, orders:write", true},
		{`[]`, "", false},
		{`""`, "", false},
		{`["Orders"]`, "", false},
		{`42`, "", false},
		{``, "", false},
	} {
		set, ok := grantScopes(json.RawMessage(tc.raw))
		if ok != tc.ok || (ok && set.String() != tc.want) {
			t.Errorf("grantScopes(%s) = %v %v, want %q %v", tc.raw, set, ok, tc.want, tc.ok)
		}
	}
}

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
