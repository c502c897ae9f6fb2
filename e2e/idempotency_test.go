package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestIdempotencyOutcomeUnknown: a CREATE whose handler ran while auditsvc
// was down has no stored outcome. Its retry with the same Idempotency-Key,
// once auditsvc is back, must not create a second order: it is 409
// idempotency-outcome-unknown until the operator resolves the key. After
// RELEASE the retry runs; after APPLIED it stays refused. An idempotent
// endpoint's request runs again without the operator.
func TestIdempotencyOutcomeUnknown(t *testing.T) {
	c := Start(t, Options{})
	buyer := c.registerAgent(t, "idem-buyer", "orders:read", "orders:write")
	policy := policyv1.NewPolicyServiceClient(c.Dial(t, "policysvc"))
	const order = `{"customer_ref":"idem","lines":[{"sku":"widget","quantity":1}]}`
	create := func(t *testing.T, key string) (*agtp.Response, map[string]any) {
		t.Helper()
		return c.call(t, buyer, "CREATE", "/orders", order, agtp.HeaderIdempotencyKey, key)
	}
	resolve := func(t *testing.T, key string, r policyv1.IdempotencyResolution) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := policy.ResolveIdempotencyOutcome(ctx, &policyv1.ResolveIdempotencyOutcomeRequest{
			AgentId: buyer, IdempotencyKey: key, Resolution: r, Note: "checked the order desk"})
		if err != nil || out.GetPreviousState() != policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_UNKNOWN {
			t.Fatalf("ResolveIdempotencyOutcome(%s, %v) = %v, %v; want it resolved from unknown", key, r, out, err)
		}
	}
	before := ordersBy(t, c, buyer)

	// The handlers run; their Attribution-Records cannot be stored.
	c.Stop("auditsvc", syscall.SIGKILL)
	lost := map[string]map[string]any{}
	for _, key := range []string{"order-lost-1", "order-lost-2"} {
		resp, body := create(t, key)
		if resp.Status != agtp.StatusUnavailable || body["reason"] != "audit-unavailable" {
			t.Fatalf("CREATE %s with auditsvc down = %d %s, want 503 audit-unavailable", key, resp.Status, resp.Body)
		}
		lost[key] = body
	}
	read := c.roundTrip(t, request(t, "QUERY", "/orders/ord-1001", agtp.HeaderAgentID, buyer, agtp.HeaderIdempotencyKey, "read-lost-1"))
	if read.Status != agtp.StatusUnavailable {
		t.Fatalf("QUERY with auditsvc down = %d %s", read.Status, read.Body)
	}
	c.Restart(t, "auditsvc")
	// The front door reconnects on its own; until then answers are 503.
	testkit.WaitFor(t, 30*time.Second, "the front door to store records again", func() bool {
		return c.roundTrip(t, request(t, "DISCOVER", "/")).Status == agtp.StatusOK
	})
	if n := ordersBy(t, c, buyer); n != before+2 {
		t.Fatalf("%d orders created while auditsvc was down, want 2 (the handlers ran)", n-before)
	}

	t.Run("the retry is refused and creates nothing", func(t *testing.T) {
		for _, key := range []string{"order-lost-1", "order-lost-2"} {
			resp, body := create(t, key)
			explanation, _ := body["explanation"].(string)
			if resp.Status != agtp.StatusConflict || body["reason"] != "idempotency-outcome-unknown" ||
				!strings.Contains(explanation, "new Idempotency-Key") || !strings.Contains(explanation, "operator") {
				t.Fatalf("retry of %s = %d %s, want 409 idempotency-outcome-unknown saying what to do", key, resp.Status, resp.Body)
			}
		}
		if resp, body := c.call(t, buyer, "CREATE", "/orders", `{"lines":[{"sku":"gizmo","quantity":9}]}`, agtp.HeaderIdempotencyKey, "order-lost-1"); resp.Status != agtp.StatusConflict || body["reason"] != "idempotency-key-reused" {
			t.Fatalf("another order under the key = %d %s, want 409 idempotency-key-reused", resp.Status, resp.Body)
		}
		if n := ordersBy(t, c, buyer); n != before+2 {
			t.Fatalf("the retries created %d orders", n-before-2)
		}
		// The 503 said so.
		for key, body := range lost {
			if body["outcome"] != "unknown" || !strings.Contains(fmt.Sprint(body["explanation"]), "idempotency-outcome-unknown") {
				t.Fatalf("the 503 of %s = %v, want outcome unknown and what a retry gets", key, body)
			}
		}
	})

	t.Run("an idempotent endpoint's request runs again", func(t *testing.T) {
		resp := c.roundTrip(t, request(t, "QUERY", "/orders/ord-1001", agtp.HeaderAgentID, buyer, agtp.HeaderIdempotencyKey, "read-lost-1"))
		if resp.Status != agtp.StatusOK {
			t.Fatalf("QUERY retry = %d %s", resp.Status, resp.Body)
		}
	})

	t.Run("after the operator's RELEASE the retry runs, once", func(t *testing.T) {
		resolve(t, "order-lost-1", policyv1.IdempotencyResolution_IDEMPOTENCY_RESOLUTION_RELEASE)
		resp, body := create(t, "order-lost-1")
		result, _ := body["result"].(map[string]any)
		if resp.Status != agtp.StatusOK || result["order_id"] == nil {
			t.Fatalf("retry after RELEASE = %d %s", resp.Status, resp.Body)
		}
		again, _ := create(t, "order-lost-1")
		if again.Status != agtp.StatusOK || again.Header.Get(agtp.HeaderIdempotentReplayed) != "true" || string(again.Body) != string(resp.Body) {
			t.Fatalf("the next retry = %d %s, want the replay", again.Status, again.Body)
		}
		if n := ordersBy(t, c, buyer); n != before+3 {
			t.Fatalf("%d orders, want %d", n-before, 3)
		}
	})

	t.Run("after the operator's APPLIED the retry stays refused", func(t *testing.T) {
		resolve(t, "order-lost-2", policyv1.IdempotencyResolution_IDEMPOTENCY_RESOLUTION_APPLIED)
		resp, body := create(t, "order-lost-2")
		if resp.Status != agtp.StatusConflict || body["reason"] != "idempotency-outcome-applied" {
			t.Fatalf("retry after APPLIED = %d %s", resp.Status, resp.Body)
		}
		if n := ordersBy(t, c, buyer); n != before+3 {
			t.Fatalf("%d orders, want %d", n-before, 3)
		}
	})
}

// reservations is an HTTPS upstream that times out on the first call of
// each Idempotency-Key and answers the rest, the same reservation for the
// same key, as an upstream that de-duplicates does.
type reservations struct {
	mu    sync.Mutex
	calls []http.Header
	made  map[string]string
}

func (u *reservations) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.calls = append(u.calls, r.Header.Clone())
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		key = r.Header.Get("X-Hold-Key")
	}
	id, seen := u.made[key]
	if !seen {
		id = fmt.Sprintf("r-%d", len(u.made)+1)
		u.made[key] = id
	}
	u.mu.Unlock()
	if !seen {
		if r.URL.Path == "/holds" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"reservation_id":%q}`, id)
}

func (u *reservations) seen() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.calls...)
}

// reservationEndpoint is a non-idempotent external_service endpoint on
// the reservations upstream.
func reservationEndpoint(path, addr, extra string) string {
	return `method: CREATE
path: ` + path + `
description: Reserves a room with the booking system.
namespace: bookings
semantic:
  intent: Reserve a room with the booking system.
  actor: agent
  outcome: The room is reserved and the reservation is returned.
  capability: creation
  confidence: 0.9
  impact: reversible
  is_idempotent: false
input_schema:
  type: object
  properties:
    room: {type: string}
  required: [room]
  additionalProperties: false
output_schema:
  type: object
  properties:
    reservation_id: {type: string}
  required: [reservation_id]
errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
handler:
  type: external_service
  url: https://` + addr + path + `
  method: POST
  timeout_seconds: 1
` + extra + `required_scopes: ["orders:write"]
`
}

// TestTransientUpstreamFailureIsNotReplayed: an external upstream that
// times out (or answers 503) once gets the request's Idempotency-Key and
// fails the call with 504 (502), which is not stored under the key: the
// retry with the same key runs, the upstream recognises it by the key, and
// only the success is replayed after.
func TestTransientUpstreamFailureIsNotReplayed(t *testing.T) {
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert(devpki.AGTPServer), pki.Key(devpki.AGTPServer))
	if err != nil {
		t.Fatal(err)
	}
	upstream := &reservations{made: map[string]string{}}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: upstream, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	addr := "localhost:" + port
	dir := demoEndpointsDir(t, map[string]string{
		"reservations.yaml": reservationEndpoint("/reservations", addr, ""),
		"holds.yaml":        reservationEndpoint("/holds", addr, "  idempotency_header: X-Hold-Key\n"),
	})
	c := Start(t, Options{ServiceEnv: map[string][]string{
		"catalogsvc": {"AGTP_ENDPOINTS_DIR=" + dir},
		"frontdoor":  {"AGTP_UPSTREAM_CA_FILE=" + pki.CA()},
	}})
	agent := c.registerAgent(t, "idem-traveller", "orders:read", "orders:write")

	for _, tc := range []struct {
		path, key, header string
		status            int
		reason            string
	}{
		{"/reservations", "resv-1", "Idempotency-Key", http.StatusGatewayTimeout, "upstream_timeout"},
		{"/holds", "hold-1", "X-Hold-Key", http.StatusBadGateway, "upstream_error"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			calls := len(upstream.seen())
			reserve := func() (*agtp.Response, map[string]any) {
				return c.call(t, agent, "CREATE", tc.path, `{"room":"r-12"}`, agtp.HeaderIdempotencyKey, tc.key)
			}
			resp, body := reserve()
			if resp.Status != tc.status || body["reason"] != tc.reason || body["error"] != tc.reason {
				t.Fatalf("first call = %d %s, want %d %s", resp.Status, resp.Body, tc.status, tc.reason)
			}
			resp, body = reserve()
			result, _ := body["result"].(map[string]any)
			if resp.Status != agtp.StatusOK || result["reservation_id"] == nil || resp.Header.Get(agtp.HeaderIdempotentReplayed) != "" {
				t.Fatalf("retry with the same key = %d %s, want the call run again", resp.Status, resp.Body)
			}
			replay, _ := reserve()
			if replay.Status != agtp.StatusOK || replay.Header.Get(agtp.HeaderIdempotentReplayed) != "true" || string(replay.Body) != string(resp.Body) {
				t.Fatalf("third call = %d %s, want the replay of the success", replay.Status, replay.Body)
			}
			seen := upstream.seen()[calls:]
			if len(seen) != 2 {
				t.Fatalf("the upstream was called %d times, want 2 (the timed-out call and the retry)", len(seen))
			}
			for i, h := range seen {
				if got := h.Get(tc.header); got != tc.key {
					t.Fatalf("upstream call %d: %s = %q, want %q", i+1, tc.header, got, tc.key)
				}
				if h.Get("Agent-ID") != "" {
					t.Fatalf("upstream call %d carries Agent-ID", i+1)
				}
			}
			var b map[string]any
			_ = json.Unmarshal(replay.Body, &b)
			if r, _ := b["result"].(map[string]any); r["reservation_id"] != result["reservation_id"] {
				t.Fatalf("replayed reservation %v, want %v", r["reservation_id"], result["reservation_id"])
			}
		})
	}
}
