package e2e

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	catalogdemo "github.com/agtpsuite/agtp/catalogsvc/demo"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/identitysvc/identitydoc"
	"github.com/agtpsuite/agtp/services/agtp"
)

// TestConformanceExtra checks over the wire the numbered conformance
// assertions ("core N", "api N", "companions N") that TestAGTPOverTheWire
// does not, against the in-process suite. e2e/README.md maps every assertion
// to its test.
func TestConformanceExtra(t *testing.T) {
	c := Start(t, Options{InProcess: true})
	addr := c.Procs["frontdoor"].AGTPAddr
	buyer := c.registerAgent(t, "extra-buyer", "orders:read", "orders:write", "documents:read", "reports:run")

	t.Run("core 1: a plaintext connection never gets an AGTP/1.0 response line", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, _ = conn.Write([]byte("AGTP/1.0 DISCOVER /\r\nContent-Length: 0\r\n\r\n"))
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		b, _ := io.ReadAll(conn)
		if strings.Contains(string(b), "AGTP/1.0") {
			t.Fatalf("plaintext answered: %q", b)
		}
	})

	t.Run("core 2: a ClientHello capped at TLS 1.2 fails the handshake", func(t *testing.T) {
		cfg := agtp.ClientTLSConfig("localhost", c.Admin.Pool())
		cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		if conn, err := tls.Dial("tcp", addr, cfg); err == nil {
			conn.Close()
			t.Fatal("TLS 1.2 handshake succeeded")
		}
	})

	t.Run("core 3: a TLS 1.3 handshake succeeds and validates against the trust anchor", func(t *testing.T) {
		conn, err := tls.Dial("tcp", addr, agtp.ClientTLSConfig("localhost", c.Admin.Pool()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		st := conn.ConnectionState()
		if st.Version != tls.VersionTLS13 || len(st.VerifiedChains) == 0 {
			t.Fatalf("version %x, %d verified chains", st.Version, len(st.VerifiedChains))
		}
		// A client with another trust anchor refuses the server.
		other := agtp.ClientTLSConfig("localhost", nil)
		if conn, err := tls.Dial("tcp", addr, other); err == nil {
			conn.Close()
			t.Fatal("the server certificate validated against the system roots")
		}
	})

	t.Run("core 5-8, 12-14, 34-35: wire form of every kind of response, write side left open", func(t *testing.T) {
		conn := c.dialAGTP(t)
		seen := map[string]bool{}
		for _, raw := range []string{
			"AGTP/1.0 DISCOVER /\r\n\r\n",
			"AGTP/1.0 FROBNICATE /orders\r\nContent-Length: 0\r\n\r\n",
			"AGTP/1.0 query /orders\r\n\r\n",
			"AGTP/1.0 QUERY /nothing-here\r\n\r\n",
			"AGTP/1.0 SUMMARIZE /orders\r\n\r\n",
			"AGTP/1.0 QUERY /orders/ord-1001\r\n\r\n",
			"AGTP/1.0 QUERY /orders?limit=1000\r\nAgent-ID: " + buyer + "\r\n\r\n",
			"AGTP/1.0 QUERY /orders/ord-1001\r\nAgent-ID: " + buyer + "\r\nAuthority-Scope: documents:read\r\n\r\n",
			"AGTP/1.0 QUERY /orders/ord-9999\r\nAgent-ID: " + buyer + "\r\n\r\n",
			"AGTP/1.0 QUERY /orders/ord-1001\r\nAgent-ID: " + buyer + "\r\n\r\n",
		} {
			r := rawRoundTrip(t, conn, raw)
			checkWireForm(t, r)
			id := r.header.Get(agtp.HeaderResponseID)
			if r.header.Get(agtp.HeaderServerID) == "" || id == "" || seen[id] {
				t.Fatalf("%q: Server-ID %q, Response-ID %q (seen before: %v)", raw, r.header.Get(agtp.HeaderServerID), id, seen[id])
			}
			seen[id] = true
		}
		// A 400 that closes the connection has the same form.
		r := rawRoundTrip(t, c.dialAGTP(t), "AGTP/1.0 QUERY /orders#x\r\n\r\n")
		checkWireForm(t, r)
		if r.status != 400 || r.header.Get(agtp.HeaderServerID) == "" || seen[r.header.Get(agtp.HeaderResponseID)] {
			t.Fatalf("400: %d %v", r.status, r.header)
		}
	})

	t.Run("core 9: a partial body gets no answer until the rest arrives, then exactly one", func(t *testing.T) {
		conn := c.dialAGTP(t)
		body := `{"text":"One. Two. Three."}`
		head := fmt.Sprintf("AGTP/1.0 SUMMARIZE /documents\r\nContent-Type: application/vnd.agtp+json\r\nContent-Length: %d\r\n\r\n", len(body))
		if _, err := conn.conn.Write([]byte(head + body[:10])); err != nil {
			t.Fatal(err)
		}
		_ = conn.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.br.ReadByte(); !isTimeout(err) {
			t.Fatalf("answered before the body was complete: %v", err)
		}
		if _, err := conn.conn.Write([]byte(body[10:])); err != nil {
			t.Fatal(err)
		}
		r := readRaw(t, conn)
		if r.status != 200 || !strings.Contains(string(r.body), `"summary"`) {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		_ = conn.conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := conn.br.ReadByte(); !isTimeout(err) {
			t.Fatalf("a second response or a close followed: %v", err)
		}
	})

	t.Run("core 10: two requests written back to back get two responses in order", func(t *testing.T) {
		conn := c.dialAs(t, buyer)
		two := "AGTP/1.0 QUERY /orders/ord-1001\r\nAgent-ID: " + buyer + "\r\nTask-ID: first\r\n\r\n" +
			"AGTP/1.0 DISCOVER /\r\nTask-ID: second\r\n\r\n"
		if _, err := conn.conn.Write([]byte(two)); err != nil {
			t.Fatal(err)
		}
		a, b := readRaw(t, conn), readRaw(t, conn)
		if a.header.Get(agtp.HeaderTaskID) != "first" || b.header.Get(agtp.HeaderTaskID) != "second" || a.status != 200 || b.status != 200 {
			t.Fatalf("got %d %q then %d %q", a.status, a.header.Get(agtp.HeaderTaskID), b.status, b.header.Get(agtp.HeaderTaskID))
		}
	})

	t.Run("core 11: the connection is still usable 5 s after a response", func(t *testing.T) {
		conn := c.dialAGTP(t)
		if r := conn.do(request(t, "DISCOVER", "/")); r.Status != 200 {
			t.Fatalf("first: %d", r.Status)
		}
		time.Sleep(5 * time.Second)
		if r := conn.do(request(t, "DISCOVER", "/")); r.Status != 200 {
			t.Fatalf("second: %d", r.Status)
		}
	})

	t.Run("core 15-23, 28: malformed request lines", func(t *testing.T) {
		for _, tc := range []struct {
			name, raw string
			status    int
			reason    string
		}{
			{"15 # in the target", "AGTP/1.0 QUERY /a#b\r\n\r\n", 400, agtp.ReasonInvalidRequestLine},
			{"16 # in the query", "AGTP/1.0 QUERY /a?x=#\r\n\r\n", 400, agtp.ReasonInvalidRequestLine},
			{"17 HTTP order", "QUERY /a AGTP/1.0\r\n\r\n", 400, agtp.ReasonInvalidRequestLine},
			{"18 version AGTP/2.0", "AGTP/2.0 QUERY /a\r\n\r\n", 400, agtp.ReasonInvalidRequestLine},
			{"20 target without /", "AGTP/1.0 QUERY a/b\r\n\r\n", 400, agtp.ReasonInvalidRequestLine},
			{"21 two spaces", "AGTP/1.0  QUERY /a\r\n\r\n", 400, agtp.ReasonInvalidRequestLine},
			{"22 a body without Content-Length", "AGTP/1.0 SUMMARIZE /documents\r\nContent-Type: application/vnd.agtp+json\r\n\r\n{}", 400, agtp.ReasonContentLengthRequired},
			{"23 Transfer-Encoding chunked", "AGTP/1.0 SUMMARIZE /documents\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, agtp.ReasonTransferEncodingUnsupported},
			{"28 experimental X-NOPE", "AGTP/1.0 X-NOPE /orders\r\n\r\n", 459, agtp.ReasonMethodInvalid},
			// docs/decisions.md#D-request-target overrides 19: no target
			// means "/".
			{"19 no target is /", "AGTP/1.0 DISCOVER\r\n\r\n", 200, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := rawRoundTrip(t, c.dialAGTP(t), tc.raw)
				if r.status != tc.status {
					t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
				}
				if tc.reason != "" && !strings.Contains(string(r.body), `"reason":"`+tc.reason+`"`) {
					t.Fatalf("body %s lacks reason %s", r.body, tc.reason)
				}
			})
		}
	})

	t.Run("core 24-26: method names as path segments", func(t *testing.T) {
		leak := c.roundTrip(t, request(t, "QUERY", "/documents/execute"))
		if leak.Status != 460 || errorBody(t, leak)["segment"] != "execute" {
			t.Fatalf("24: %d %s", leak.Status, leak.Body)
		}
		if r := c.roundTrip(t, request(t, "QUERY", "/documents?x=execute")); r.Status == 460 {
			t.Fatalf("25: %d %s", r.Status, r.Body)
		}
		if r := c.roundTrip(t, request(t, "QUERY", "/documents/Query")); r.Status != 460 {
			t.Fatalf("26: %d %s", r.Status, r.Body)
		}
	})

	t.Run("core 29: no floor method ever gets 459", func(t *testing.T) {
		conn := c.dialAGTP(t)
		for _, m := range agtp.FloorMethods() {
			for _, p := range []string{"/", "/nothing-here"} {
				if r := conn.do(request(t, m, p)); r.Status == 459 {
					t.Errorf("%s %s: 459 %s", m, p, r.Body)
				}
			}
		}
	})

	t.Run("core 33: Supported-Methods includes QUOTE when DESCRIBE lists it", func(t *testing.T) {
		conn := c.dialAGTP(t)
		first := conn.do(request(t, "DESCRIBE", "/"))
		supported := strings.Split(first.Header.Get(agtp.HeaderSupportedMethods), ",")
		for i := range supported {
			supported[i] = strings.TrimSpace(supported[i])
		}
		var describe struct {
			Methods []string `json:"methods"`
		}
		if err := json.Unmarshal(first.Body, &describe); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(describe.Methods, "QUOTE") || !slices.Contains(supported, "QUOTE") {
			t.Fatalf("DESCRIBE methods %v, Supported-Methods %v", describe.Methods, supported)
		}
	})

	t.Run("core 38-39: alg none records have an empty signature; previous_audit_id is 64 hex", func(t *testing.T) {
		wire := c.roundTrip(t, request(t, "query", "/orders"))
		rec, err := attribution.Parse(wire.Header.Get(agtp.HeaderAttributionRecord))
		if err != nil || rec.Alg != "none" || !strings.HasSuffix(wire.Header.Get(agtp.HeaderAttributionRecord), ".") {
			t.Fatalf("38: %q %v", wire.Header.Get(agtp.HeaderAttributionRecord), err)
		}
		hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
		for _, r := range []*agtp.Response{wire, c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, buyer))} {
			rec, err := attribution.Parse(r.Header.Get(agtp.HeaderAttributionRecord))
			if err != nil || !hex64.MatchString(rec.Payload.PreviousAuditID) {
				t.Fatalf("39: previous_audit_id %q %v", rec.Payload.PreviousAuditID, err)
			}
		}
	})

	t.Run("core 41, 43: Task-ID and Agent-ID come back only when sent", func(t *testing.T) {
		with := c.roundTrip(t, request(t, "DISCOVER", "/", agtp.HeaderTaskID, "t-1"))
		without := c.roundTrip(t, request(t, "DISCOVER", "/"))
		if with.Header.Get(agtp.HeaderTaskID) != "t-1" || without.Header.Has(agtp.HeaderTaskID) {
			t.Fatalf("41: with %q, without %v", with.Header.Get(agtp.HeaderTaskID), without.Header.Has(agtp.HeaderTaskID))
		}
		if without.Header.Has(agtp.HeaderAgentID) {
			t.Fatalf("43: anonymous request got Agent-ID %q", without.Header.Get(agtp.HeaderAgentID))
		}
	})

	t.Run("core 45-46: Trust-Tier, Verification-Path and Trust-Warning on an addressed agent", func(t *testing.T) {
		r := c.roundTrip(t, request(t, "DESCRIBE", "/agents/extra-buyer"))
		if r.Status != 200 {
			t.Fatalf("DESCRIBE = %d %s", r.Status, r.Body)
		}
		tier := r.Header.Get(agtp.HeaderTrustTier)
		if !slices.Contains([]string{"1", "2", "3"}, tier) {
			t.Fatalf("45: Trust-Tier %q", tier)
		}
		if vp, ok := r.Header.Lookup(agtp.HeaderVerificationPath); ok && !slices.Contains([]string{"dns-anchored", "log-anchored", "hybrid", "org-asserted"}, vp) {
			t.Fatalf("45: Verification-Path %q", vp)
		}
		// registerAgent makes a Tier 2 (org-asserted) agent, which carries a warning.
		if tier != "2" || !r.Header.Has(agtp.HeaderTrustWarning) {
			t.Fatalf("46: tier %s, Trust-Warning %q", tier, r.Header.Get(agtp.HeaderTrustWarning))
		}
		registerTier3(t, c, "X-extra-lab")
		r3 := c.roundTrip(t, request(t, "DESCRIBE", "/agents/X-extra-lab"))
		if r3.Status != 200 || r3.Header.Get(agtp.HeaderTrustTier) != "3" || r3.Header.Has(agtp.HeaderTrustWarning) {
			t.Fatalf("46: tier 3 agent: %d Trust-Tier %q Trust-Warning %q", r3.Status, r3.Header.Get(agtp.HeaderTrustTier), r3.Header.Get(agtp.HeaderTrustWarning))
		}
	})

	t.Run("core 47: the Authorization value is never echoed", func(t *testing.T) {
		const secret = "conformance-secret-token-7f3a"
		r := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, buyer, agtp.HeaderAuthorization, "Bearer "+secret))
		for _, f := range r.Header {
			if strings.Contains(f.Value, secret) {
				t.Fatalf("header %s carries the token", f.Name)
			}
		}
		rec, err := attribution.Parse(r.Header.Get(agtp.HeaderAttributionRecord))
		if err != nil || strings.Contains(string(rec.RawPayload), secret) || strings.Contains(string(r.Body), secret) {
			t.Fatalf("record or body carries the token: %v", err)
		}
	})

	t.Run("core 48-49: reserved and unknown request headers change nothing", func(t *testing.T) {
		plain := c.roundTrip(t, request(t, "QUERY", "/orders/ord-1001", agtp.HeaderAgentID, buyer))
		reserved := c.roundTrip(t, request(t, "QUERY", "/orders/ord-1001", agtp.HeaderAgentID, buyer, "Priority", "normal", "TTL", "5000", agtp.HeaderBudgetLimit, "tokens=10"))
		foo := c.roundTrip(t, request(t, "QUERY", "/orders/ord-1001", agtp.HeaderAgentID, buyer, "X-Foo", "bar"))
		if plain.Status != 200 || reserved.Status != 200 || foo.Status != 200 || string(foo.Body) != string(plain.Body) {
			t.Fatalf("plain %d, reserved %d %s, X-Foo %d %s", plain.Status, reserved.Status, reserved.Body, foo.Status, foo.Body)
		}
	})

	t.Run("core 52: whitespace around commas in Authority-Scope does not matter", func(t *testing.T) {
		a := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, buyer, agtp.HeaderAuthorityScope, "orders:read,documents:read"))
		b := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, buyer, agtp.HeaderAuthorityScope, "orders:read ,  documents:read"))
		if a.Status != 200 || a.Status != b.Status {
			t.Fatalf("%d and %d", a.Status, b.Status)
		}
	})

	t.Run("core 55-56, companions 34, 36: one side effect per key, keys scoped by agent", func(t *testing.T) {
		other := c.registerAgent(t, "extra-other-buyer", "orders:read", "orders:write")
		create := func(agent string) *agtp.Response {
			return c.roundTrip(t, withJSON(request(t, "CREATE", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderIdempotencyKey, "extra-shared-key"),
				`{"lines":[{"sku":"gizmo","quantity":1}]}`))
		}
		first, again, theirs := create(buyer), create(buyer), create(other)
		if first.Status != 200 || again.Status != 200 || string(again.Body) != string(first.Body) {
			t.Fatalf("55: %d %s then %d %s", first.Status, first.Body, again.Status, again.Body)
		}
		if theirs.Status != 200 || theirs.Header.Has(agtp.HeaderIdempotentReplayed) || string(theirs.Body) == string(first.Body) {
			t.Fatalf("56: another agent's request with the key = %d %s", theirs.Status, theirs.Body)
		}
		if n := ordersBy(t, c, buyer); n != 1 {
			t.Fatalf("55: %d orders created by the replayed request, want 1", n)
		}
	})

	t.Run("core 59: a suspended caller gets 503 naming its lifecycle state", func(t *testing.T) {
		agent := c.registerAgent(t, "extra-suspended", "orders:read")
		lifecycle(t, c, "DEACTIVATE", agent, "maintenance")
		r := waitStatus(t, c, 503, request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent))
		if !strings.Contains(string(r.Body), `"suspended"`) {
			t.Fatalf("503 body %s does not name the state", r.Body)
		}
	})

	t.Run("core 6.1.8.1: a suspended target answers 503, a retired one 410; its status sub-resource still answers", func(t *testing.T) {
		agent := c.registerAgent(t, "extra-target", "orders:read")
		lifecycle(t, c, "DEACTIVATE", agent, "maintenance")
		r := waitStatus(t, c, 503, request(t, "DESCRIBE", "/agents/extra-target"))
		if !strings.Contains(string(r.Body), `"agent-suspended"`) || !strings.Contains(string(r.Body), `"suspended"`) {
			t.Fatalf("503 body %s does not give the reason and the state", r.Body)
		}
		if st := c.roundTrip(t, request(t, "DESCRIBE", "/agents/extra-target/status")); st.Status != 200 || !strings.Contains(string(st.Body), "suspended") {
			t.Fatalf("status sub-resource of a suspended agent: %d %s", st.Status, st.Body)
		}
		lifecycle(t, c, "REVOKE", agent, "retired")
		r = waitStatus(t, c, 410, request(t, "DESCRIBE", "/agents/"+agent))
		if !strings.Contains(string(r.Body), `"revoked_at"`) {
			t.Fatalf("410 body %s does not say when the agent was retired", r.Body)
		}
	})

	t.Run("core 65-73: identity documents over DESCRIBE", func(t *testing.T) {
		r := c.roundTrip(t, request(t, "DESCRIBE", "/agents/extra-buyer"))
		if ct := r.Header.Get(agtp.HeaderContentType); ct != "application/vnd.agtp.identity+json" && ct != agtp.MediaTypeJSON {
			t.Fatalf("71: Content-Type %q", ct)
		}
		var doc map[string]any
		if err := json.Unmarshal(r.Body, &doc); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"agtp_version", "document_type", "document_version", "agent_id", "name", "description",
			"principal", "principal_id", "issuer", "issued_at", "updated_at", "status", "methods", "capabilities",
			"scopes_accepted", "trust_score"} {
			if _, ok := doc[f]; !ok {
				t.Errorf("65: %s missing", f)
			}
		}
		if doc["document_type"] != "agtp-identity" || doc["agent_id"] != buyer {
			t.Fatalf("65: %v", doc)
		}
		issued, _ := time.Parse(time.RFC3339, fmt.Sprint(doc["issued_at"]))
		updated, _ := time.Parse(time.RFC3339, fmt.Sprint(doc["updated_at"]))
		if score, _ := doc["trust_score"].(float64); issued.IsZero() || updated.Before(issued) || score < 0 || score > 1 {
			t.Fatalf("66: issued %v updated %v score %v", doc["issued_at"], doc["updated_at"], doc["trust_score"])
		}
		if !slices.Contains([]any{"active", "suspended", "retired", "deprecated"}, doc["status"]) {
			t.Fatalf("67: status %v", doc["status"])
		}
		methods, _ := doc["methods"].([]any)
		for _, m := range agtp.FloorMethods() {
			if !slices.Contains(methods, any(m)) {
				t.Errorf("68: methods lack %s", m)
			}
		}
		_, warn := doc["trust_warning"]
		if _, expl := doc["trust_explanation"]; doc["trust_tier"] == 2.0 && !warn || warn && !expl {
			t.Fatalf("69: tier %v warning %v explanation %v", doc["trust_tier"], doc["trust_warning"], doc["trust_explanation"])
		}
		if _, signed := doc["manifest_signature"]; signed {
			if err := identitydoc.VerifyInline(r.Body); err != nil {
				t.Fatalf("70: %v", err)
			}
		}
		st := c.roundTrip(t, request(t, "DESCRIBE", "/agents/extra-buyer?format=status"))
		if st.Status != 200 || !strings.Contains(string(st.Body), `"lifecycle_state":"active"`) {
			t.Fatalf("72: format=status = %d %s", st.Status, st.Body)
		}
		cert := c.roundTrip(t, request(t, "DESCRIBE", "/agents/extra-buyer?format=certificate"))
		g, err := genesis.Load(cert.Body)
		if cert.Status != 200 || err != nil || g.ComputeAgentID() != buyer || len(g.Signature) == 0 {
			t.Fatalf("72-73: format=certificate = %d %v", cert.Status, err)
		}
	})

	t.Run("core 74-75: package extensions and unknown agents", func(t *testing.T) {
		for _, ext := range []string{".agent", ".nomo", ".agtp"} {
			r := c.roundTrip(t, request(t, "DESCRIBE", "/agents/extra-buyer"+ext))
			if r.Status/100 == 2 {
				t.Fatalf("74: %s answered %d %s", ext, r.Status, r.Body)
			}
		}
		if r := c.roundTrip(t, request(t, "DESCRIBE", "/agents/nobody-here")); r.Status != 404 {
			t.Fatalf("75: %d %s", r.Status, r.Body)
		}
	})

	t.Run("core 81: DESCRIBE / without capability_domains", func(t *testing.T) {
		r := c.roundTrip(t, request(t, "DESCRIBE", "/"))
		body := errorBody(t, r)
		for _, f := range []string{"methods", "modalities", "tools", "version", "budget_units_accepted", "zones_accepted"} {
			if _, ok := body[f]; !ok {
				t.Errorf("DESCRIBE lacks %s: %s", f, r.Body)
			}
		}
	})

	t.Run("core 85: INSPECT without target is 400", func(t *testing.T) {
		if r := c.roundTrip(t, request(t, "INSPECT", "/", agtp.HeaderAgentID, buyer)); r.Status != 400 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})

	t.Run("core 92: an EXECUTE result is an envelope with status and task_id", func(t *testing.T) {
		r := c.roundTrip(t, request(t, "EXECUTE", "/reports/sales-by-sku", agtp.HeaderAgentID, buyer, agtp.HeaderTaskID, "task-92"))
		body := errorBody(t, r)
		if r.Status != 200 || body["status"] != float64(r.Status) || body["task_id"] != "task-92" {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})

	t.Run("core 97-98: SUSPEND fields, distinct nonces, unknown session", func(t *testing.T) {
		conn := c.dialAs(t, buyer)
		sid := "sess-" + strings.Repeat("9e", 12)
		if r := conn.do(request(t, "QUERY", "/orders", agtp.HeaderAgentID, buyer, agtp.HeaderSessionID, sid)); r.Status != 200 {
			t.Fatalf("binding the session: %d %s", r.Status, r.Body)
		}
		nonces := map[string]bool{}
		for i := 0; i < 100; i++ {
			r := conn.do(withJSON(request(t, "SUSPEND", "/", agtp.HeaderAgentID, buyer), `{"session_id":"`+sid+`","reason":"awaiting_input"}`))
			body := errorBody(t, r)
			nonce, _ := body["resumption_nonce"].(string)
			raw, err := base64.RawURLEncoding.DecodeString(nonce)
			if r.Status != 200 || body["suspension_id"] == nil || body["session_id"] != sid || body["status"] != "suspended" || err != nil || len(raw) < 16 {
				t.Fatalf("97: SUSPEND %d = %d %s", i, r.Status, r.Body)
			}
			nonces[nonce] = true
			if r := conn.do(withJSON(request(t, "RESUME", "/", agtp.HeaderAgentID, buyer), `{"session_id":"`+sid+`","resumption_nonce":"`+nonce+`"}`)); r.Status != 200 {
				t.Fatalf("RESUME %d = %d %s", i, r.Status, r.Body)
			}
		}
		if len(nonces) != 100 {
			t.Fatalf("97: %d distinct nonces of 100", len(nonces))
		}
		unknown := conn.do(withJSON(request(t, "SUSPEND", "/", agtp.HeaderAgentID, buyer), `{"session_id":"sess-`+strings.Repeat("0d", 12)+`"}`))
		if unknown.Status != 404 {
			t.Fatalf("98: %d %s", unknown.Status, unknown.Body)
		}
	})

	t.Run("core 102-107: lifecycle methods over AGTP", func(t *testing.T) {
		agent := c.registerAgent(t, "extra-lifecycle", "orders:read")
		events := func() int {
			r := c.roundTrip(t, request(t, "INSPECT", "/?target=lifecycle&agent_id="+agent, agtp.HeaderAgentID, agent))
			var b struct {
				Events []struct {
					Format    string `json:"format"`
					EventType string `json:"event_type"`
				} `json:"events"`
			}
			if err := json.Unmarshal(r.Body, &b); err != nil || r.Status != 200 {
				t.Fatalf("INSPECT lifecycle = %d %s", r.Status, r.Body)
			}
			for _, e := range b.Events {
				if e.Format != "jws" && e.Format != "cose" {
					t.Fatalf("86: format %q", e.Format)
				}
			}
			return len(b.Events)
		}
		before := events()
		if b := lifecycle(t, c, "ACTIVATE", agent, ""); b["noop"] != true || events() != before {
			t.Fatalf("102: %v", b)
		}
		b := lifecycle(t, c, "DEACTIVATE", agent, "maintenance")
		if b["status"] != "suspended" || b["previous_status"] != "active" || b["event_type"] != "agent-lifecycle-suspended" || b["audit_id"] == nil {
			t.Fatalf("103: %v", b)
		}
		waitStatus(t, c, 503, request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent))
		if b := lifecycle(t, c, "REINSTATE", agent, "done"); b["status"] != "active" || b["event_type"] != "agent-lifecycle-reinstated" {
			t.Fatalf("104: %v", b)
		}
		waitStatus(t, c, 200, request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent))
		// 86: newest first.
		r := c.roundTrip(t, request(t, "INSPECT", "/?target=lifecycle&agent_id="+agent, agtp.HeaderAgentID, agent))
		if !regexp.MustCompile(`"event_type":"agent-lifecycle-reinstated".*"event_type":"agent-lifecycle-suspended"`).Match(r.Body) {
			t.Fatalf("86: lifecycle entries not newest first: %s", r.Body)
		}
		if b := lifecycle(t, c, "DEPRECATE", agent, "v2"); b["status"] != "deprecated" || b["event_type"] != "agent-lifecycle-deprecated" {
			t.Fatalf("107: %v", b)
		}
		waitStatus(t, c, 200, request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent))
		if b := lifecycle(t, c, "DEPRECATE", agent, "v2"); b["noop"] != true {
			t.Fatalf("107: second DEPRECATE %v", b)
		}
		if r := c.asIssuer(t, issuerOf(t, agent)).do(withJSON(request(t, "REVOKE", "/"), `{"agent_id":"`+agent+`"}`)); r.Status != 400 {
			t.Fatalf("105: REVOKE without reason = %d %s", r.Status, r.Body)
		}
		if b := lifecycle(t, c, "REVOKE", agent, "retired"); b["status"] != "retired" || b["event_type"] != "agent-genesis-revoked" {
			t.Fatalf("106: %v", b)
		}
		waitStatus(t, c, 410, request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent))
		if r := c.asIssuer(t, issuerOf(t, agent)).do(withJSON(request(t, "REINSTATE", "/"), `{"agent_id":"`+agent+`","reason":"x"}`)); r.Status != 422 {
			t.Fatalf("106: REINSTATE after REVOKE = %d %s", r.Status, r.Body)
		}
		if b := lifecycle(t, c, "REVOKE", agent, "again"); b["noop"] != true {
			t.Fatalf("106: second REVOKE %v", b)
		}
	})

	t.Run("api 39-40: body wins over the query; undeclared query keys are 422", func(t *testing.T) {
		r := c.roundTrip(t, withJSON(request(t, "QUERY", "/orders?limit=1", agtp.HeaderAgentID, buyer), `{"limit":2}`))
		var b struct {
			Result struct {
				Orders []any `json:"orders"`
			} `json:"result"`
		}
		if err := json.Unmarshal(r.Body, &b); err != nil || r.Status != 200 || len(b.Result.Orders) != 2 {
			t.Fatalf("39: %d %s", r.Status, r.Body)
		}
		if r := c.roundTrip(t, request(t, "QUERY", "/orders?colour=red", agtp.HeaderAgentID, buyer)); r.Status != 422 {
			t.Fatalf("40: %d %s", r.Status, r.Body)
		}
		// companions 10: percent-encoded query values arrive decoded
		// ("op%65n" is "open", the only spelling the schema's enum takes).
		if r := c.roundTrip(t, request(t, "QUERY", "/orders?status=op%65n", agtp.HeaderAgentID, buyer)); r.Status != 200 {
			t.Fatalf("companions 10: %d %s", r.Status, r.Body)
		}
	})

	t.Run("api 41-44: DISCOVER /methods and the directory", func(t *testing.T) {
		r := c.roundTrip(t, request(t, "DISCOVER", "/methods"))
		var items []map[string]any
		if err := json.Unmarshal(r.Body, &items); err != nil || r.Status != 200 {
			t.Fatalf("41: %d %s", r.Status, r.Body)
		}
		listed := map[string]string{}
		for _, it := range items {
			for _, f := range []string{"method", "path", "description", "tier"} {
				if _, ok := it[f]; !ok {
					t.Fatalf("41: item %v lacks %s", it, f)
				}
			}
			listed[fmt.Sprint(it["method"], " ", it["path"])] = fmt.Sprint(it["tier"])
		}
		if listed["DISCOVER /methods"] != "A" || listed["QUERY /orders/{order_id}"] != "B" {
			t.Fatalf("42: %v", listed)
		}
		var m struct {
			Endpoints []struct{ Method, Path string } `json:"endpoints"`
		}
		if err := json.Unmarshal(c.roundTrip(t, request(t, "DISCOVER", "/")).Body, &m); err != nil || len(m.Endpoints) == 0 {
			t.Fatalf("manifest: %v", err)
		}
		for _, e := range m.Endpoints {
			if _, ok := listed[e.Method+" "+e.Path]; !ok {
				t.Errorf("43: %s %s is in the manifest but not in DISCOVER /methods", e.Method, e.Path)
			}
		}
		dir := c.roundTrip(t, request(t, "DISCOVER", "/", agtp.HeaderAgentID, buyer))
		if !strings.Contains(string(dir.Body), `{"path":"/methods","tier":"A"}`) {
			t.Fatalf("44: %s", dir.Body)
		}
	})

	t.Run("api 46-48: DISCOVER /genesis, /agents and /patterns", func(t *testing.T) {
		g := c.roundTrip(t, request(t, "DISCOVER", "/genesis", agtp.HeaderAgentID, buyer))
		if id, err := genesis.ComputeAgentID(g.Body); g.Status != 200 || err != nil || id != buyer {
			t.Fatalf("46: %d %v %s", g.Status, err, g.Body)
		}
		var agents []map[string]any
		a := c.roundTrip(t, request(t, "DISCOVER", "/agents"))
		if err := json.Unmarshal(a.Body, &agents); err != nil || len(agents) == 0 {
			t.Fatalf("47: %d %s", a.Status, a.Body)
		}
		hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
		for _, e := range agents {
			if !hex64.MatchString(fmt.Sprint(e["agent_id"])) || e["name"] == nil || !slices.Contains([]any{1.0, 2.0, 3.0}, e["trust_tier"]) ||
				!slices.Contains([]any{"dns-anchored", "log-anchored", "hybrid", "org-asserted"}, e["verification_path"]) {
				t.Fatalf("47: entry %v", e)
			}
		}
		var pat struct {
			RCNSEnabled *bool            `json:"rcns_enabled"`
			Patterns    []map[string]any `json:"patterns"`
		}
		p := c.roundTrip(t, request(t, "DISCOVER", "/patterns"))
		if err := json.Unmarshal(p.Body, &pat); err != nil || pat.RCNSEnabled == nil || pat.Patterns == nil {
			t.Fatalf("48: %d %s", p.Status, p.Body)
		}
		for _, e := range pat.Patterns {
			_, exact := e["path_exact"]
			_, re := e["path_regex"]
			if e["recipe_name"] == nil || e["recipe_version"] == nil || e["method"] == nil || exact == re {
				t.Fatalf("48: pattern %v", e)
			}
		}
	})

	t.Run("api 54-64: the manifest served over the wire", func(t *testing.T) {
		var m map[string]any
		if err := json.Unmarshal(c.roundTrip(t, request(t, "DISCOVER", "/")).Body, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"agtp_version", "agtp_api_version", "document_version", "catalog_version"} {
			if _, ok := m[k].(string); !ok {
				t.Errorf("54: %s = %v", k, m[k])
			}
		}
		if sup, _ := m["catalog_versions_supported"].([]any); len(sup) != 1 || sup[0] != m["catalog_version"] {
			t.Errorf("54-55: catalog_versions_supported %v", m["catalog_versions_supported"])
		}
		eps, _ := m["endpoints"].([]any)
		methods := false
		kinds := map[string]bool{}
		for _, e := range eps {
			em := e.(map[string]any)
			for _, k := range []string{"method", "path", "description", "semantic", "input_schema", "output_schema", "errors", "handler"} {
				if _, ok := em[k]; !ok {
					t.Errorf("57: %v %v lacks %s", em["method"], em["path"], k)
				}
			}
			if h, _ := em["handler"].(map[string]any); len(h) != 1 || h["type"] == nil {
				t.Errorf("56: handler %v", em["handler"])
			}
			s, _ := em["semantic"].(map[string]any)
			conf, _ := s["confidence"].(float64)
			if _, ok := s["is_idempotent"].(bool); !ok || conf < 0 || conf > 1 || s["intent"] == nil || s["actor"] == nil || s["outcome"] == nil ||
				!slices.Contains([]any{"informational", "reversible", "irreversible"}, s["impact"]) || s["capability"] == nil {
				t.Errorf("58: %v %v semantic %v", em["method"], em["path"], s)
			}
			if in, _ := em["input_schema"].(map[string]any); in["type"] != "object" || in["additionalProperties"] != false {
				t.Errorf("59: %v %v input_schema %v", em["method"], em["path"], in)
			}
			methods = methods || em["method"] == "DISCOVER" && em["path"] == "/methods"
			errs, _ := em["errors"].([]any)
			switch h, _ := em["handler"].(map[string]any); h["type"] {
			case "composition":
				kinds["composition"] = true
				if !slices.Contains(errs, any("composition_failed")) {
					t.Errorf("60: composition %v %v errors %v", em["method"], em["path"], errs)
				}
			case "external_service":
				kinds["external_service"] = true
				for _, e := range []string{"upstream_timeout", "upstream_connection_error", "upstream_malformed_response", "upstream_authentication_failed", "upstream_error"} {
					if !slices.Contains(errs, any(e)) {
						t.Errorf("60: external service %v %v errors %v lack %s", em["method"], em["path"], errs, e)
					}
				}
			}
		}
		if !methods {
			t.Error("64: DISCOVER /methods missing")
		}
		if !kinds["composition"] || !kinds["external_service"] {
			t.Errorf("60: the demo manifest has no composition or no external_service endpoint: %v", kinds)
		}
		p, _ := m["policies"].(map[string]any)
		for _, k := range []string{"wildcards_accepted", "anonymous_discovery", "scope_required_for_invocation", "synthesis_enabled"} {
			if _, ok := p[k].(bool); !ok {
				t.Errorf("61: policies.%s = %v", k, p[k])
			}
		}
		if d, _ := p["max_synthesis_depth"].(float64); d < 1 {
			t.Errorf("61: max_synthesis_depth %v", p["max_synthesis_depth"])
		}
		if !slices.Contains([]any{"public", "authenticated", "private"}, m["agent_disclosure"]) {
			t.Errorf("62: agent_disclosure %v", m["agent_disclosure"])
		}
		if sig, ok := m["manifest_signature"]; ok && sig != nil && !regexp.MustCompile(`^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*$`).MatchString(fmt.Sprint(sig)) {
			t.Errorf("63: manifest_signature %v", sig)
		}
	})

	t.Run("api 66-67: schema violations are 422 before any side effect", func(t *testing.T) {
		agent := c.registerAgent(t, "extra-schema", "orders:write", "orders:read")
		extra := c.roundTrip(t, withJSON(request(t, "CREATE", "/orders", agtp.HeaderAgentID, agent), `{"lines":[{"sku":"gizmo","quantity":1}],"rush":true}`))
		missing := c.roundTrip(t, withJSON(request(t, "CREATE", "/orders", agtp.HeaderAgentID, agent), `{"customer_ref":"x"}`))
		if extra.Status != 422 || missing.Status != 422 || errorBody(t, missing)["violations"] == nil {
			t.Fatalf("66: %d %s; 67: %d %s", extra.Status, extra.Body, missing.Status, missing.Body)
		}
		if n := ordersBy(t, c, agent); n != 0 {
			t.Fatalf("66: %d orders created by refused requests", n)
		}
	})

	t.Run("api 70-71, companions 17: a deprecated endpoint warns on success and on failure", func(t *testing.T) {
		const want = "deprecated; successor=QUERY /orders/{order_id}; removed_in=2.0"
		ok := c.roundTrip(t, request(t, "FETCH", "/order-history/ord-1001", agtp.HeaderAgentID, buyer))
		failed := c.roundTrip(t, request(t, "FETCH", "/order-history/ord-9999", agtp.HeaderAgentID, buyer))
		if ok.Status != 200 || ok.Header.Get(agtp.HeaderEndpointWarning) != want {
			t.Fatalf("70: %d %q", ok.Status, ok.Header.Get(agtp.HeaderEndpointWarning))
		}
		if failed.Status != 422 || failed.Header.Get(agtp.HeaderEndpointWarning) != want {
			t.Fatalf("71: %d %q", failed.Status, failed.Header.Get(agtp.HeaderEndpointWarning))
		}
		if r := c.roundTrip(t, request(t, "QUERY", "/orders/ord-1001", agtp.HeaderAgentID, buyer)); r.Header.Has(agtp.HeaderEndpointWarning) || r.Header.Has(agtp.HeaderCatalogWarning) {
			t.Fatalf("api 9: a current endpoint carries a warning: %v", r.Header)
		}
	})

	t.Run("api 96, companions 21: an unknown Contract-Synthesized is 404", func(t *testing.T) {
		r := c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1001", agtp.HeaderAgentID, buyer, agtp.HeaderContractSynthesized, "syn_doesnotexist"))
		if r.Status != 404 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})

	t.Run("api 11: GET is handled as FETCH under the default aliases", func(t *testing.T) {
		get := c.roundTrip(t, request(t, "GET", "/order-history/ord-1001", agtp.HeaderAgentID, buyer))
		fetch := c.roundTrip(t, request(t, "FETCH", "/order-history/ord-1001", agtp.HeaderAgentID, buyer))
		if get.Status != 200 || get.Status != fetch.Status || string(get.Body) != string(fetch.Body) {
			t.Fatalf("GET %d %s, FETCH %d %s", get.Status, get.Body, fetch.Status, fetch.Body)
		}
	})

	t.Run("api 20-38, companions 1-3, 5: method and path grammar over the wire", func(t *testing.T) {
		conn := c.dialAs(t, buyer)
		for _, tc := range []struct {
			name, method, target string
			status               int
			segment              string
		}{
			{"api 20 /book/reserve names book", "QUERY", "/book/reserve", 460, "book"},
			{"api 21 case is ignored", "QUERY", "/rooms/Reserve", 460, "Reserve"},
			{"api 22 hyphen removed", "QUERY", "/re-serve", 460, "re-serve"},
			{"api 22 underscore removed", "QUERY", "/re_serve", 460, "re_serve"},
			{"api 23 floor verb as a segment", "QUERY", "/documents/execute", 460, "execute"},
			{"api 25 DISCOVER / is valid", "DISCOVER", "/", 200, ""},
			{"api 26 verb plus suffix is 404", "QUERY", "/booking", 404, ""},
			{"api 27 verb words in the query (OPEN is a catalog verb) are not checked", "QUERY", "/orders?status=open", 200, ""},
			{"api 29 leaking unregistered path is 460", "QUERY", "/nothing/book", 460, "book"},
			{"api 30 bad method and leaking path give 459", "FROBNICATE", "/book/reserve", 459, ""},
			{"api 38 extra segment is 404", "QUERY", "/orders/ord-1001/extra", 404, ""},
			{"companions 1 digit", "SEARCH2", "/orders", 459, ""},
			{"companions 1 underscore", "BOOK_TABLE", "/orders", 459, ""},
			{"companions 1 hyphen and lower case", "book-reservation", "/orders", 459, ""},
			{"companions 1 mixed case", "FindRestaurant", "/orders", 459, ""},
			{"companions 2 too short", "GO", "/orders", 459, ""},
			{"companions 2 too long", strings.Repeat("A", 33), "/orders", 459, ""},
			{"companions 3 unknown verb on an unknown path", "BOOKING", "/nowhere", 459, ""},
			{"companions 5 QUERY /cancel names cancel", "QUERY", "/cancel", 460, "cancel"},
		} {
			h := []string{agtp.HeaderAgentID, buyer}
			r := conn.do(request(t, tc.method, tc.target, h...))
			if r.Status != tc.status {
				t.Errorf("%s: %s %s = %d %s, want %d", tc.name, tc.method, tc.target, r.Status, r.Body, tc.status)
				continue
			}
			if tc.segment != "" && errorBody(t, r)["segment"] != tc.segment {
				t.Errorf("%s: segment %v, want %s", tc.name, errorBody(t, r)["segment"], tc.segment)
			}
		}
		r := conn.do(request(t, "SUMMARIZE", "/orders", agtp.HeaderAgentID, buyer))
		body := errorBody(t, r)
		allowed, _ := body["allowed_methods_for_path"].([]any)
		redirects, ok := body["redirects_for_path"].(map[string]any)
		if r.Status != 405 || !slices.Contains(allowed, any("QUERY")) || !ok || len(redirects) != 0 {
			t.Fatalf("api 32-34: %d %s", r.Status, r.Body)
		}
	})

	t.Run("core 101, api 89: every 464 carries RCNS-Attempt-Id; without Allow-RCNS an unknown pair is 404", func(t *testing.T) {
		negotiator := c.registerAgent(t, "extra-negotiator", "orders:read", "documents:read", "rcns:negotiate")
		r := c.roundTrip(t, request(t, "SUMMARIZE", "/nothing-here", agtp.HeaderAgentID, negotiator, agtp.HeaderAllowRCNS, "true"))
		if r.Status != 464 || r.Header.Get(agtp.HeaderRCNSAttemptID) == "" {
			t.Fatalf("101: %d %q %s", r.Status, r.Header.Get(agtp.HeaderRCNSAttemptID), r.Body)
		}
		if r := c.roundTrip(t, request(t, "SUMMARIZE", "/nothing-here", agtp.HeaderAgentID, negotiator)); r.Status != 404 {
			t.Fatalf("api 89: %d %s", r.Status, r.Body)
		}
	})

	t.Run("core 99: SUSPEND with another agent's synthesis_id is 403", func(t *testing.T) {
		proposer := c.registerAgent(t, "extra-proposer", "orders:read", "documents:read", "rcns:negotiate")
		gate := c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1002", agtp.HeaderAgentID, proposer, agtp.HeaderAllowRCNS, "true"))
		id, _ := errorBody(t, gate)["synthesis_id"].(string)
		if gate.Status != 461 || id == "" {
			t.Fatalf("gate = %d %s", gate.Status, gate.Body)
		}
		r := c.roundTrip(t, withJSON(request(t, "SUSPEND", "/", agtp.HeaderAgentID, buyer), `{"synthesis_id":"`+id+`"}`))
		if r.Status != 403 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})

	t.Run("companions 23-24: QUOTE estimates, is repeatable and runs nothing", func(t *testing.T) {
		before := ordersBy(t, c, buyer)
		quote := func() *agtp.Response {
			return c.roundTrip(t, withJSON(request(t, "QUOTE", "/", agtp.HeaderAgentID, buyer),
				`{"method":"CREATE","path":"/orders","parameters":{"lines":[{"sku":"gizmo","quantity":1}]}}`))
		}
		a, b := quote(), quote()
		var q struct {
			Result struct {
				Method        string                        `json:"method"`
				EstimatedCost map[string]map[string]float64 `json:"estimated_cost"`
				Confidence    *float64                      `json:"confidence"`
			} `json:"result"`
		}
		if err := json.Unmarshal(a.Body, &q); err != nil || a.Status != 200 || !a.Header.Has(agtp.HeaderCostEstimate) ||
			q.Result.Method != "CREATE" || q.Result.Confidence == nil || len(q.Result.EstimatedCost) == 0 {
			t.Fatalf("23: %d %s", a.Status, a.Body)
		}
		for unit, est := range q.Result.EstimatedCost {
			for _, k := range []string{"min", "expected", "max"} {
				if _, ok := est[k]; !ok {
					t.Fatalf("23: estimated_cost.%s lacks %s", unit, k)
				}
			}
		}
		if string(a.Body) != string(b.Body) || a.Header.Get(agtp.HeaderCostEstimate) != b.Header.Get(agtp.HeaderCostEstimate) {
			t.Fatalf("24: two identical QUOTEs differ: %s / %s", a.Body, b.Body)
		}
		if n := ordersBy(t, c, buyer); n != before {
			t.Fatalf("23: QUOTE created %d orders", n-before)
		}
	})

	t.Run("companions 40: a whitespace-only Idempotency-Key is ignored", func(t *testing.T) {
		agent := c.registerAgent(t, "extra-blank-key", "orders:read", "orders:write")
		for i := 0; i < 2; i++ {
			r := c.roundTrip(t, withJSON(request(t, "CREATE", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderIdempotencyKey, " \t "),
				`{"lines":[{"sku":"gizmo","quantity":1}]}`))
			if r.Status != 200 || r.Header.Has(agtp.HeaderIdempotentReplayed) {
				t.Fatalf("request %d: %d %s %v", i, r.Status, r.Body, r.Header)
			}
		}
		if n := ordersBy(t, c, agent); n != 2 {
			t.Fatalf("%d orders, want 2 (the blank key is no key)", n)
		}
	})

	t.Run("companions 50: no credentials is 401; a missing scope is 262 naming it", func(t *testing.T) {
		if r := c.roundTrip(t, request(t, "QUERY", "/orders")); r.Status != 401 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		r := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, buyer, agtp.HeaderAuthorityScope, "documents:read"))
		if r.Status != 262 || errorBody(t, r)["scope"] != "orders:read" || !strings.Contains(errorBody(t, r)["explanation"].(string), "orders:read") {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})

	t.Run("companions 53: the public directory lists only active agents", func(t *testing.T) {
		agent := c.registerAgent(t, "extra-hidden", "orders:read")
		listed := func() bool {
			return strings.Contains(string(c.roundTrip(t, request(t, "DISCOVER", "/agents")).Body), agent)
		}
		if !listed() {
			t.Fatal("an active agent is not listed")
		}
		lifecycle(t, c, "DEACTIVATE", agent, "hide")
		deadline := time.Now().Add(2 * time.Second)
		for listed() {
			if time.Now().After(deadline) {
				t.Fatal("a suspended agent is still listed")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("companions 4: HEAD and OPTIONS get 459; CONNECT and TRACE are catalog verbs", func(t *testing.T) {
		for _, m := range []string{"HEAD", "OPTIONS"} {
			if r := c.roundTrip(t, request(t, m, "/orders")); r.Status != 459 {
				t.Errorf("%s: %d %s", m, r.Status, r.Body)
			}
		}
		// The pinned catalog 1.0.0 lists CONNECT and TRACE, and
		// docs/decisions.md#D-pinned-catalog makes it authoritative
		// (docs/catalogsvc.md): they are admitted, so a path that exposes
		// other methods answers 405 and an unknown one 404.
		for _, m := range []string{"CONNECT", "TRACE"} {
			r := c.roundTrip(t, request(t, m, "/orders"))
			if r.Status != 405 || !slices.Contains(errorBody(t, r)["allowed_methods_for_path"].([]any), any("QUERY")) {
				t.Errorf("%s /orders: %d %s", m, r.Status, r.Body)
			}
			if r := c.roundTrip(t, request(t, m, "/nothing-here")); r.Status != 404 {
				t.Errorf("%s /nothing-here: %d %s", m, r.Status, r.Body)
			}
		}
	})

	t.Run("companions 24: QUOTE needs method and parameters (400); parameters the target refuses are 422", func(t *testing.T) {
		for _, tc := range []struct {
			body, reason string
			status       int
		}{
			{`{"path":"/orders","parameters":{}}`, "method-required", 400},
			{`{"method":"QUERY","parameters":{"status":"open"},"path":"/orders"}`, "", 200},
			{`{"method":"QUERY","path":"/orders"}`, "parameters-required", 400},
			{`{"method":"QUERY","path":"/orders","parameters":{"status":"lost"}}`, "quote-parameters-invalid", 422},
			{`{"method":"QUERY","path":"/orders?limit=1000","parameters":{}}`, "quote-parameters-invalid", 422},
			{`{"method":"QUERY","path":"/nothing-here","parameters":{}}`, "quote-target-unknown", 404},
		} {
			r := c.roundTrip(t, withJSON(request(t, "QUOTE", "/", agtp.HeaderAgentID, buyer), tc.body))
			if r.Status != tc.status || tc.reason != "" && errorBody(t, r)["reason"] != tc.reason {
				t.Errorf("QUOTE %s = %d %s, want %d %s", tc.body, r.Status, r.Body, tc.status, tc.reason)
			}
		}
	})

	t.Run("core 80: DISCOVER /agents candidates carry description, principal and relevance, best first", func(t *testing.T) {
		scout := c.registerAgent(t, "extra-scout", "reports:run")
		list := func(target string) []map[string]any {
			r := c.roundTrip(t, request(t, "DISCOVER", target))
			var out []map[string]any
			if err := json.Unmarshal(r.Body, &out); r.Status != 200 || err != nil {
				t.Fatalf("DISCOVER %s = %d %s", target, r.Status, r.Body)
			}
			return out
		}
		all := list("/agents")
		if len(all) < 2 {
			t.Fatalf("%d agents listed", len(all))
		}
		for _, e := range all {
			desc, _ := e["description"].(string)
			principal, _ := e["principal"].(string)
			if desc == "" || principal == "" || e["relevance"] != 1.0 {
				t.Fatalf("entry without criteria: %v", e)
			}
		}
		// Criteria rank: the scout matches both words, others at most one;
		// agents matching none are left out.
		ranked := list("/agents?criteria=" + url.QueryEscape("extra-scout reports"))
		if len(ranked) == 0 || ranked[0]["agent_id"] != scout || ranked[0]["relevance"] != 1.0 {
			t.Fatalf("ranked by criteria: %v", ranked)
		}
		for i, e := range ranked {
			rel, _ := e["relevance"].(float64)
			if rel <= 0 || i > 0 && rel > ranked[i-1]["relevance"].(float64) {
				t.Fatalf("relevance not positive and descending: %v", ranked)
			}
		}
		if one := list("/agents?max_results=1"); len(one) != 1 {
			t.Fatalf("max_results=1 listed %d", len(one))
		}
	})

	t.Run("core 63-64: the namespace document lists active agents only, total_active is their count, generated_at is fresh", func(t *testing.T) {
		hidden := c.registerAgent(t, "extra-ns-hidden", "orders:read")
		lifecycle(t, c, "DEACTIVATE", hidden, "not in the namespace")
		var ns struct {
			DocumentType string           `json:"document_type"`
			GeneratedAt  time.Time        `json:"generated_at"`
			TotalActive  *int             `json:"total_active"`
			Agents       []map[string]any `json:"agents"`
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			r := c.roundTrip(t, request(t, "DESCRIBE", "/agents"))
			if err := json.Unmarshal(r.Body, &ns); r.Status != 200 || err != nil || ns.DocumentType != "agtp-namespace" {
				t.Fatalf("DESCRIBE /agents = %d %s (%v)", r.Status, r.Body, err)
			}
			if !strings.Contains(string(r.Body), hidden) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("63: a suspended agent is still in the namespace document")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if ns.TotalActive == nil || *ns.TotalActive != len(ns.Agents) || len(ns.Agents) == 0 {
			t.Fatalf("63: total_active %v for %d entries", ns.TotalActive, len(ns.Agents))
		}
		listed := false
		for _, e := range ns.Agents {
			if !strings.EqualFold(fmt.Sprint(e["lifecycle_state"]), "active") {
				t.Fatalf("63: entry %v is not active", e)
			}
			listed = listed || e["canonical_id"] == buyer
		}
		if !listed {
			t.Fatal("63: an active agent is missing")
		}
		if age := time.Since(ns.GeneratedAt); ns.GeneratedAt.IsZero() || age > 300*time.Second || age < -5*time.Second {
			t.Fatalf("64: generated_at %v is %v old", ns.GeneratedAt, age)
		}
	})

	t.Run("core 95: CONFIRM with status maybe is 422 before the handler runs", func(t *testing.T) {
		r := c.roundTrip(t, withJSON(request(t, "CONFIRM", "/", agtp.HeaderAgentID, buyer), `{"target_id":"task-1","status":"maybe"}`))
		if r.Status != 422 || errorBody(t, r)["reason"] != "input-invalid" || !strings.Contains(string(r.Body), "/status") {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})

	t.Run("companions 18: every response carries AGTP-API-Version", func(t *testing.T) {
		for _, r := range []*agtp.Response{
			c.roundTrip(t, request(t, "DISCOVER", "/")),
			c.roundTrip(t, request(t, "QUERY", "/nothing-here")),
			c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, buyer)),
		} {
			if r.Header.Get(agtp.HeaderAPIVersion) == "" {
				t.Fatalf("%d without AGTP-API-Version: %v", r.Status, r.Header)
			}
		}
	})

	t.Run("companions 49: a client Request-ID is echoed and error bodies carry a machine code", func(t *testing.T) {
		r := c.roundTrip(t, request(t, "QUERY", "/nothing-here", agtp.HeaderRequestID, "req-49"))
		if r.Header.Get(agtp.HeaderRequestID) != "req-49" || errorBody(t, r)["reason"] == nil {
			t.Fatalf("%v %s", r.Header, r.Body)
		}
	})
}

// rawResponse is a response read byte by byte, so the wire form itself
// can be checked.
type rawResponse struct {
	line   string
	status int
	header agtp.Header
	body   []byte
	// contentLength is the Content-Length field as sent; -1 when absent.
	contentLength int
}

func rawRoundTrip(t *testing.T, conn *agtpConn, raw string) *rawResponse {
	t.Helper()
	_ = conn.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	return readRaw(t, conn)
}

func readRaw(t *testing.T, conn *agtpConn) *rawResponse {
	t.Helper()
	_ = conn.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := conn.br.ReadString('\n')
	if err != nil {
		t.Fatalf("status line: %v", err)
	}
	r := &rawResponse{line: line, contentLength: -1}
	if len(line) >= 12 {
		r.status, _ = strconv.Atoi(line[9:12])
	}
	for {
		l, err := conn.br.ReadString('\n')
		if err != nil {
			t.Fatalf("header: %v", err)
		}
		if l == "\r\n" {
			break
		}
		if !strings.HasSuffix(l, "\r\n") {
			t.Fatalf("header line %q does not end in CRLF", l)
		}
		name, value, ok := strings.Cut(strings.TrimSuffix(l, "\r\n"), ":")
		if !ok {
			t.Fatalf("header line %q", l)
		}
		r.header.Add(name, strings.TrimSpace(value))
		if strings.EqualFold(name, agtp.HeaderContentLength) {
			if r.contentLength, err = strconv.Atoi(strings.TrimSpace(value)); err != nil {
				t.Fatalf("Content-Length %q", value)
			}
		}
	}
	if r.contentLength > 0 {
		r.body = make([]byte, r.contentLength)
		if _, err := io.ReadFull(conn.br, r.body); err != nil {
			t.Fatalf("body: %v", err)
		}
	}
	return r
}

var responseLine = regexp.MustCompile(`^AGTP/1\.0 [0-9]{3} [\x20-\x7E\t]*\r\n$`)

// checkWireForm is core assertions 5-7 and 12-14 for one response.
func checkWireForm(t *testing.T, r *rawResponse) {
	t.Helper()
	if !responseLine.MatchString(r.line) {
		t.Fatalf("5: response line %q", r.line)
	}
	if r.contentLength != len(r.body) {
		t.Fatalf("6: Content-Length %d for %d body bytes", r.contentLength, len(r.body))
	}
	if r.header.Has(agtp.HeaderTransferEncoding) {
		t.Fatal("7: Transfer-Encoding in a response")
	}
	for _, retired := range []string{"AGTP-Version", "AGTP-Method", "AGTP-Status", "Server-Agent-ID", "Principal-ID"} {
		if r.header.Has(retired) {
			t.Fatalf("12: %s in a response", retired)
		}
	}
	if r.status == 204 && (r.header.Has(agtp.HeaderContentType) || r.contentLength != 0) {
		t.Fatal("13: 204 with Content-Type or a body")
	}
	if len(r.body) > 0 && r.header.Get(agtp.HeaderContentType) == "" {
		t.Fatalf("14: %d with a body and no Content-Type", r.status)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// lifecycle runs a lifecycle method on agent and returns its 200 body.
func lifecycle(t *testing.T, c *Cluster, method, agent, reason string) map[string]any {
	t.Helper()
	body := `{"agent_id":"` + agent + `"`
	if reason != "" {
		body += `,"reason":"` + reason + `"`
	}
	r := c.asIssuer(t, issuerOf(t, agent)).do(withJSON(request(t, method, "/"), body+"}"))
	if r.Status != 200 {
		t.Fatalf("%s = %d %s", method, r.Status, r.Body)
	}
	return errorBody(t, r)
}

// waitStatus repeats req until it gets status: lifecycle changes reach the
// front door's caller cache through identitysvc's watch.
func waitStatus(t *testing.T, c *Cluster, status int, req *agtp.Request) *agtp.Response {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		r := c.roundTrip(t, req.Clone())
		if r.Status == status {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s = %d %s, want %d", req.Method, req.Path, r.Status, r.Body, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// registerTier3 registers and activates an experimental (Tier 3) agent;
// its label must start with X- (core §6.1.9).
func registerTier3(t *testing.T, c *Cluster, name string) string {
	t.Helper()
	tmpl := agentTemplate(name, "orders:read")
	tmpl.TrustTier, tmpl.VerificationPath = genesis.TierExperimental, ""
	g, key := signGenesis(t, tmpl)
	return c.registerGenesis(t, name, g, key)
}

// ordersBy counts the demo orders created by agent among the 100 newest
// (headers are added to the QUERY).
func ordersBy(t *testing.T, c *Cluster, agent string, headers ...string) int {
	t.Helper()
	r := c.roundTrip(t, request(t, "QUERY", "/orders?limit=100", append([]string{agtp.HeaderAgentID, agent}, headers...)...))
	var b struct {
		Result struct {
			Orders []struct {
				CreatedBy string `json:"created_by"`
			} `json:"orders"`
		} `json:"result"`
	}
	if err := json.Unmarshal(r.Body, &b); err != nil || r.Status != 200 {
		t.Fatalf("QUERY /orders = %d %s", r.Status, r.Body)
	}
	n := 0
	for _, o := range b.Result.Orders {
		if o.CreatedBy == agent {
			n++
		}
	}
	return n
}

// TestConformanceManifestPolicies checks over the wire the manifest toggles
// that need a catalog configuration (api assertions 65 and 77, AGTP-API
// §8.7), against the suite as processes whose catalog reads an endpoints
// directory: the demo endpoints plus a _service.yaml that turns anonymous
// discovery off and explicit scopes on.
func TestConformanceManifestPolicies(t *testing.T) {
	dir := demoEndpointsDir(t, map[string]string{
		"_service.yaml": "policies:\n  anonymous_discovery: false\n  scope_required_for_invocation: true\n",
	})
	c := Start(t, Options{ServiceEnv: map[string][]string{"catalogsvc": {"AGTP_ENDPOINTS_DIR=" + dir}}})
	buyer := c.registerAgent(t, "policy-buyer", "orders:read", "orders:write", "documents:read")

	t.Run("api 65: anonymous discovery off is 262 anonymous-discovery-disabled", func(t *testing.T) {
		for _, tc := range []struct{ method, target string }{{"DISCOVER", "/"}, {"DISCOVER", "/methods"}, {"DISCOVER", "/agents"}, {"DESCRIBE", "/"}} {
			r := c.roundTrip(t, request(t, tc.method, tc.target))
			if r.Status != 262 || errorBody(t, r)["reason"] != "anonymous-discovery-disabled" {
				t.Errorf("anonymous %s %s = %d %s", tc.method, tc.target, r.Status, r.Body)
			}
		}
		// An identified caller still discovers; a non-discovery endpoint
		// keeps core's 401.
		if r := c.roundTrip(t, request(t, "DISCOVER", "/", agtp.HeaderAgentID, buyer)); r.Status != 200 || !strings.Contains(string(r.Body), `"directory"`) {
			t.Errorf("DISCOVER / with Agent-ID = %d %s", r.Status, r.Body)
		}
		if r := c.roundTrip(t, request(t, "QUERY", "/orders")); r.Status != 401 || errorBody(t, r)["reason"] != "agent-unauthenticated" {
			t.Errorf("anonymous QUERY /orders = %d %s", r.Status, r.Body)
		}
	})

	t.Run("api 77: scope_required_for_invocation refuses a scope-gated call without Authority-Scope, with no side effect", func(t *testing.T) {
		count := func() int {
			t.Helper()
			return ordersBy(t, c, buyer, agtp.HeaderAuthorityScope, "orders:read")
		}
		before := count()
		create := func(headers ...string) *agtp.Response {
			return c.roundTrip(t, withJSON(request(t, "CREATE", "/orders", append([]string{agtp.HeaderAgentID, buyer}, headers...)...), `{"lines":[{"sku":"gizmo","quantity":1}]}`))
		}
		r := create(agtp.HeaderIdempotencyKey, "policy-1")
		if r.Status != 262 || errorBody(t, r)["reason"] != "scope-required" || errorBody(t, r)["scope"] != "orders:write" {
			t.Fatalf("CREATE without Authority-Scope = %d %s", r.Status, r.Body)
		}
		if n := count(); n != before {
			t.Fatalf("the refused CREATE created %d orders", n-before)
		}
		if r := create(agtp.HeaderIdempotencyKey, "policy-2", agtp.HeaderAuthorityScope, "orders:write"); r.Status != 200 {
			t.Fatalf("CREATE with Authority-Scope = %d %s", r.Status, r.Body)
		}
		if n := count(); n != before+1 {
			t.Fatalf("%d orders created, want 1", n-before)
		}
		// An endpoint with no required_scopes is not scope-gated.
		if r := c.roundTrip(t, withJSON(request(t, "SUMMARIZE", "/documents", agtp.HeaderAgentID, buyer), `{"text":"One. Two."}`)); r.Status != 200 {
			t.Fatalf("SUMMARIZE /documents without Authority-Scope = %d %s", r.Status, r.Body)
		}
	})
}

// demoEndpointsDir is an endpoints directory for catalogsvc
// (AGTP_ENDPOINTS_DIR): the demo endpoints plus extra files by name, such
// as a _service.yaml.
func demoEndpointsDir(t *testing.T, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files, err := fs.ReadDir(catalogdemo.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(catalogdemo.FS, f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range extra {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
