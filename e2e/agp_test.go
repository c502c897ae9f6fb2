package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/testkit"
)

// agpClient is an HTTP-only agent: it speaks AGP over HTTPS with an API key.
type agpClient struct {
	t    *testing.T
	base string
	hc   *http.Client
	key  string
}

// agpResp is one AGP answer.
type agpResp struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

func (r *agpResp) str(path ...string) string {
	var v any = r.json
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

func (a *agpClient) do(method, path, body string, headers ...string) *agpResp {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.key != "" {
		req.Header.Set("X-Api-Key", a.key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := &agpResp{status: resp.StatusCode, header: resp.Header, body: b}
	if err := json.Unmarshal(b, &out.json); err != nil {
		a.t.Fatalf("%s %s: body %q is not a JSON object: %v", method, path, b, err)
	}
	return out
}

func (a *agpClient) with(key string) *agpClient { c := *a; c.key = key; return &c }

// TestAGP drives the AGP binding with a real HTTPS client against the
// suite as processes (the AGP companions assertions of e2e/README.md;
// docs/agp.md).
func TestAGP(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.json")
	// SUMMARIZE /documents is limited per agent to 2 a minute; nothing but
	// the rate-limit subtest calls it.
	if err := os.WriteFile(policy, []byte(`{"rate_limits":{"endpoints":[
		{"method":"SUMMARIZE","path":"/documents","per_agent":true,"rate":{"limit":2,"period":60000000000}}]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Start(t, Options{ServiceEnv: map[string][]string{
		"policysvc": {"AGTP_POLICY_FILE=" + policy, "AGTP_AGP_EXECUTE_POLICY=strict", "AGTP_AGP_MAX_EXECUTE_AMOUNT=5000"},
	}})
	buyer := c.registerAgent(t, "agp-buyer", "orders:read", "orders:write", "documents:read")
	other := c.registerAgent(t, "agp-other", "orders:read", "orders:write")
	reader := c.registerAgent(t, "agp-reader", "orders:read")

	keys := agpv1.NewAgpServiceClient(c.Dial(t, "policysvc"))
	mint := func(agent string, scopes ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := keys.CreateApiKey(ctx, &agpv1.CreateApiKeyRequest{Label: "e2e", AgentId: agent, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetSecret()
	}
	full := []string{"discover", "query", "execute"}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.Admin.Pool()}}}
	anon := &agpClient{t: t, base: "https://" + c.Procs["frontdoor"].HTTPSAddr, hc: hc}
	a := anon.with(mint(buyer, full...))
	b := anon.with(mint(other, full...))
	queryOnly := anon.with(mint(buyer, "query"))
	r := anon.with(mint(reader, full...))
	jwks := c.signingKeys(t)

	// signed checks that an AGP answer carries a verifiable
	// Attribution-Record on the expected chain that covers its body.
	signed := func(t *testing.T, res *agpResp, agent string) *attribution.Record {
		t.Helper()
		jws := res.header.Get("Attribution-Record")
		rec, err := attribution.Verify(jws, attribution.VerifyOptions{Keys: jwks})
		if err != nil {
			t.Fatalf("Attribution-Record does not verify: %v (%v)", err, res.header)
		}
		sum := sha256.Sum256(res.body)
		if rec.Payload.AgentID != agent || rec.Payload.Status != res.status || rec.Payload.ResultHash != hex.EncodeToString(sum[:]) {
			t.Fatalf("record %+v does not describe the answer (agent %s, status %d)", rec.Payload, agent, res.status)
		}
		if res.header.Get("Audit-ID") != attribution.AuditID(jws) {
			t.Fatalf("Audit-ID %s is not the record's", res.header.Get("Audit-ID"))
		}
		return rec
	}
	// agpError checks AGP §5.2's error body (companions 49).
	agpError := func(t *testing.T, res *agpResp, status int, code string) {
		t.Helper()
		if res.status != status || res.str("code") != code || res.str("error") == "" {
			t.Fatalf("got %d %s, want %d %s", res.status, res.body, status, code)
		}
		if rid := res.header.Get("X-Request-Id"); rid == "" || res.str("requestId") != rid {
			t.Fatalf("requestId %q, X-Request-Id %q", res.str("requestId"), rid)
		}
	}
	createBody := func(qty int, extra string) string {
		return `{"businessId":"orders","request":{"method":"CREATE","path":"/orders","parameters":{"lines":[{"sku":"widget","quantity":` + strconv.Itoa(qty) + `}]}` + extra + `}}`
	}
	prepare := func(t *testing.T, cl *agpClient, body string) string {
		t.Helper()
		res := cl.do("POST", "/agp/execute/prepare", body)
		if res.status != 200 || res.str("confirmationToken") == "" || res.str("expiresAt") == "" || res.str("summary") == "" || res.str("policy") != "strict" {
			t.Fatalf("prepare = %d %s", res.status, res.body)
		}
		exp, err := time.Parse(time.RFC3339, res.str("expiresAt"))
		if d := time.Until(exp); err != nil || d < 4*time.Minute || d > 5*time.Minute+5*time.Second {
			t.Fatalf("token expires at %s (in %v), want 5 minutes", res.str("expiresAt"), d)
		}
		return res.str("confirmationToken")
	}

	t.Run("health and the public directory need no key", func(t *testing.T) {
		h := anon.do("GET", "/health", "")
		if h.status != 200 || h.str("status") != "ok" {
			t.Fatalf("health = %d %s", h.status, h.body)
		}
		dir := anon.do("GET", "/agp/businesses?category=NAMESPACE&platform=AGTP&q=ORD", "")
		list, _ := dir.json["businesses"].([]any)
		if dir.status != 200 || len(list) != 1 || list[0].(map[string]any)["id"] != "orders" {
			t.Fatalf("directory filtered case-insensitively = %d %s", dir.status, dir.body)
		}
		signed(t, dir, "") // the server's chain: anonymous
	})

	t.Run("no key, a bad key and a missing scope are refused and audited", func(t *testing.T) {
		res := anon.do("POST", "/agp/discover", `{"businessId":"orders"}`, "X-Request-Id", "e2e-req-1")
		agpError(t, res, 401, "UNAUTHORIZED")
		if res.header.Get("X-Request-Id") != "e2e-req-1" {
			t.Errorf("client X-Request-Id not echoed: %q", res.header.Get("X-Request-Id"))
		}
		signed(t, res, "")
		agpError(t, anon.with("agp_not-a-key").do("POST", "/agp/query", `{"businessId":"orders","request":{"path":"/orders"}}`), 401, "UNAUTHORIZED")
		res = queryOnly.do("POST", "/agp/discover", `{"businessId":"orders"}`)
		agpError(t, res, 403, "FORBIDDEN")
		if !strings.Contains(res.str("message"), "discover") {
			t.Errorf("403 does not name the missing scope: %s", res.body)
		}
		signed(t, res, buyer) // attributed to the key's agent
		agpError(t, queryOnly.do("POST", "/agp/execute", createBody(1, "")), 403, "FORBIDDEN")
		// The AGTP scopes of the key's agent still apply: 262 becomes 403.
		// Policy answers before the confirmation token is looked at.
		tok := prepare(t, r, createBody(1, ""))
		res = r.do("POST", "/agp/execute", createBody(1, ""), "X-Confirmation-Token", tok)
		agpError(t, res, 403, "FORBIDDEN")
		if !strings.Contains(res.str("message"), "orders:write") {
			t.Errorf("AGTP scope refusal does not name the scope: %s", res.body)
		}
		signed(t, res, reader)
	})

	t.Run("Authorization: Bearer works as well as X-Api-Key", func(t *testing.T) {
		res := anon.do("POST", "/agp/discover", `{"businessId":"orders"}`, "Authorization", "Bearer "+a.key)
		if res.status != 200 {
			t.Fatalf("bearer discover = %d %s", res.status, res.body)
		}
	})

	var discoverTx string
	t.Run("discover lists the business's endpoints as capabilities", func(t *testing.T) {
		res := a.do("POST", "/agp/discover", `{"businessId":"orders"}`)
		if res.status != 200 || res.str("status") != "succeeded" || res.str("data", "business", "id") != "orders" {
			t.Fatalf("discover = %d %s", res.status, res.body)
		}
		if _, err := uuid.Parse(res.str("transactionId")); err != nil {
			t.Fatalf("transactionId %q is not a UUID", res.str("transactionId"))
		}
		discoverTx = res.str("transactionId")
		eps, _ := res.json["data"].(map[string]any)["endpoints"].(map[string]any)
		get, _ := eps["QUERY /orders/{order_id}"].(map[string]any)
		create, _ := eps["CREATE /orders"].(map[string]any)
		if get["operation"] != "query" || create["operation"] != "execute" || get["authRequired"] != true {
			t.Fatalf("endpoints %v", eps)
		}
		signed(t, res, buyer)
		agpError(t, a.do("POST", "/agp/discover", `{"businessId":"no-such-shop"}`), 400, "BUSINESS_NOT_FOUND")
		agpError(t, a.do("POST", "/agp/discover", `{}`), 400, "VALIDATION_ERROR")
	})

	t.Run("query runs the endpoint's handler", func(t *testing.T) {
		res := a.do("POST", "/agp/query", `{"businessId":"orders","request":{"path":"/orders/ord-1001"}}`)
		if res.status != 200 || res.str("status") != "succeeded" || res.str("data", "order_id") != "ord-1001" {
			t.Fatalf("query = %d %s", res.status, res.body)
		}
		signed(t, res, buyer)
		agpError(t, a.do("POST", "/agp/query", createBody(1, "")), 400, "OPERATION_NOT_SUPPORTED")
		agpError(t, a.do("POST", "/agp/query", `{"businessId":"orders","request":{"path":"/nowhere"}}`), 400, "CAPABILITY_NOT_FOUND")
		agpError(t, a.do("POST", "/agp/query", `{"businessId":"documents","request":{"path":"/orders/ord-1001"}}`), 400, "CAPABILITY_NOT_FOUND")
		bad := a.do("POST", "/agp/query", `{"businessId":"orders","request":{"path":"/orders/ord-1001","parameters":{"colour":"red"}}}`)
		agpError(t, bad, 400, "VALIDATION_ERROR")
		if d, _ := bad.json["details"].(map[string]any); d["violations"] == nil {
			t.Errorf("schema violations not in details: %s", bad.body)
		}
	})

	var orderTx, orderAudit string
	t.Run("strict policy: execute needs a prepared token, used once", func(t *testing.T) {
		orders := func() int {
			t.Helper()
			res := a.do("POST", "/agp/query", `{"businessId":"orders","request":{"path":"/orders","parameters":{"limit":100}}}`)
			list, ok := res.json["data"].(map[string]any)["orders"].([]any)
			if res.status != 200 || !ok {
				t.Fatalf("list orders = %d %s", res.status, res.body)
			}
			return len(list)
		}
		before := orders()
		agpError(t, a.do("POST", "/agp/execute", createBody(2, "")), 403, "CONFIRMATION_REQUIRED")
		if after := orders(); after != before {
			t.Fatalf("a refused execute ran its handler: %d orders, was %d", after, before)
		}
		tok := prepare(t, a, createBody(2, ""))
		// The same request with its keys in another order matches the token.
		reordered := `{"request":{"parameters":{"lines":[{"quantity":2,"sku":"widget"}]},"path":"/orders","method":"CREATE"},"businessId":"orders"}`
		res := a.do("POST", "/agp/execute", reordered, "X-Confirmation-Token", tok, "Idempotency-Key", "agp-order-1")
		if res.status != 200 || res.str("status") != "succeeded" || res.str("data", "status") != "open" {
			t.Fatalf("execute = %d %s", res.status, res.body)
		}
		orderTx, orderAudit = res.str("transactionId"), res.header.Get("Audit-ID")
		signed(t, res, buyer)

		// A retry (same key, same body, the consumed token) is the stored answer.
		again := a.do("POST", "/agp/execute", reordered, "X-Confirmation-Token", tok, "Idempotency-Key", "agp-order-1")
		if again.status != 200 || again.header.Get("X-Idempotent-Replayed") != "true" || !bytes.Equal(again.body, res.body) {
			t.Fatalf("retry = %d replayed=%q %s, want %s", again.status, again.header.Get("X-Idempotent-Replayed"), again.body, res.body)
		}
		if again.header.Get("Audit-ID") == orderAudit {
			t.Error("the replay reused the Audit-ID")
		}
		signed(t, again, buyer)
		// The token itself is spent.
		spent := a.do("POST", "/agp/execute", reordered, "X-Confirmation-Token", tok, "Idempotency-Key", "agp-order-2")
		agpError(t, spent, 403, "CONFIRMATION_INVALID")
	})

	t.Run("a mismatched token is refused and not used up", func(t *testing.T) {
		tok := prepare(t, a, createBody(4, ""))
		res := a.do("POST", "/agp/execute", createBody(5, ""), "X-Confirmation-Token", tok)
		agpError(t, res, 403, "CONFIRMATION_MISMATCH")
		if res.str("message") != "Confirmation token does not match this execute request." {
			t.Errorf("message %q", res.str("message"))
		}
		if ok := a.do("POST", "/agp/execute", createBody(4, ""), "X-Confirmation-Token", tok); ok.status != 200 {
			t.Fatalf("the right body after a mismatch = %d %s", ok.status, ok.body)
		}
		// Another caller cannot use someone's token.
		tok = prepare(t, a, createBody(6, ""))
		agpError(t, b.do("POST", "/agp/execute", createBody(6, ""), "X-Confirmation-Token", tok), 403, "CONFIRMATION_INVALID")
	})

	t.Run("strict ceiling refuses a larger amount even with a token", func(t *testing.T) {
		body := createBody(1, `,"amount_cents":6000`)
		tok := prepare(t, a, body)
		agpError(t, a.do("POST", "/agp/execute", body, "X-Confirmation-Token", tok), 403, "AMOUNT_EXCEEDS_LIMIT")
	})

	t.Run("an Idempotency-Key reused with another body is 409; another caller's same key is independent", func(t *testing.T) {
		tok := prepare(t, a, createBody(7, ""))
		agpError(t, a.do("POST", "/agp/execute", createBody(7, ""), "X-Confirmation-Token", tok, "Idempotency-Key", "agp-order-1"), 409, "IDEMPOTENCY_KEY_REUSED")
		// The refused request did not consume the token: policy answered first.
		if res := a.do("POST", "/agp/execute", createBody(7, ""), "X-Confirmation-Token", tok); res.status != 200 {
			t.Fatalf("token after the 409 = %d %s", res.status, res.body)
		}
		tokB := prepare(t, b, createBody(2, ""))
		res := b.do("POST", "/agp/execute", createBody(2, ""), "X-Confirmation-Token", tokB, "Idempotency-Key", "agp-order-1")
		if res.status != 200 || res.header.Get("X-Idempotent-Replayed") != "" || res.str("transactionId") == orderTx {
			t.Fatalf("other caller, same key = %d %s", res.status, res.body)
		}
		signed(t, res, other)
	})

	t.Run("status: the owner reads the record, anyone else gets the same 404", func(t *testing.T) {
		res := a.do("GET", "/agp/status/"+orderTx, "")
		if res.status != 200 || res.str("id") != orderTx || res.str("operation") != "execute" || res.str("status") != "succeeded" ||
			res.str("businessId") != "orders" || res.str("result", "status") != "open" || res.str("auditId") != orderAudit {
			t.Fatalf("owner status = %d %s", res.status, res.body)
		}
		signed(t, res, buyer)
		if d := a.do("GET", "/agp/status/"+discoverTx, ""); d.status != 200 || d.str("operation") != "discover" {
			t.Fatalf("discover's record = %d %s", d.status, d.body)
		}
		stranger := b.do("GET", "/agp/status/"+orderTx, "")
		agpError(t, stranger, 404, "TRANSACTION_NOT_FOUND")
		unknown := b.do("GET", "/agp/status/"+uuid.NewString(), "")
		agpError(t, unknown, 404, "TRANSACTION_NOT_FOUND")
		if stranger.str("error") != unknown.str("error") || stranger.str("message") != unknown.str("message") {
			t.Errorf("another owner's record is told apart from a missing one: %s vs %s", stranger.body, unknown.body)
		}
		agpError(t, anon.do("GET", "/agp/status/"+orderTx, ""), 401, "UNAUTHORIZED")
	})

	t.Run("over the REST gateway the operation and the execute policy read as enum names beside the first release's strings", func(t *testing.T) {
		// docs/operations.md, "Enums and documents".
		path := "/v1/agp/agents/" + buyer + "/transactions/"
		code, got := restJSON(t, c, devpki.Admin, "GET", path+orderTx, "")
		tx, _ := got["transaction"].(map[string]any)
		if code != http.StatusOK || tx["agpOperation"] != "AGP_OPERATION_EXECUTE" || tx["operation"] != "execute" || tx["state"] != "TRANSACTION_STATUS_SUCCEEDED" {
			t.Fatalf("GET %s%s = %d %v", path, orderTx, code, got)
		}
		// A client of the first release sends the operation as a string
		// only; a number the enum does not declare is refused.
		oldTx := uuid.NewString()
		if code, got := restJSON(t, c, "frontdoor", "POST", "/v1/agp/transactions",
			`{"transaction":{"id":"`+oldTx+`","agentId":"`+buyer+`","operation":"query","status":"failed"}}`); code != http.StatusOK {
			t.Fatalf("PUT of a first-release record = %d %v", code, got)
		}
		code, got = restJSON(t, c, devpki.Admin, "GET", path+oldTx, "")
		if tx, _ := got["transaction"].(map[string]any); code != http.StatusOK || tx["agpOperation"] != "AGP_OPERATION_QUERY" || tx["operation"] != "query" {
			t.Fatalf("GET %s%s = %d %v", path, oldTx, code, got)
		}
		if code, got := restJSON(t, c, "frontdoor", "POST", "/v1/agp/transactions",
			`{"transaction":{"id":"`+uuid.NewString()+`","agentId":"`+buyer+`","agpOperation":9,"state":"TRANSACTION_STATUS_FAILED"}}`); code != http.StatusBadRequest {
			t.Fatalf("PUT with an undeclared operation = %d %v, want 400", code, got)
		}
		hash := strings.Repeat("ab", 32)
		code, got = restJSON(t, c, "frontdoor", "POST", "/v1/agp/confirmations", `{"agentId":"`+buyer+`","businessId":"orders","requestSha256":"`+hash+`"}`)
		if code != http.StatusOK || got["executePolicy"] != "EXECUTE_POLICY_STRICT" || got["policy"] != "strict" || got["token"] == nil {
			t.Fatalf("POST /v1/agp/confirmations = %d %v", code, got)
		}
		code, got = restJSON(t, c, "frontdoor", "POST", "/v1/agp/confirmations:consume", `{"agentId":"`+buyer+`","businessId":"orders","requestSha256":"`+hash+`"}`)
		if code != http.StatusOK || got["allowed"] == true || got["executePolicy"] != "EXECUTE_POLICY_STRICT" || got["policy"] != "strict" {
			t.Fatalf("POST /v1/agp/confirmations:consume = %d %v", code, got)
		}
	})

	t.Run("AGP records are on the caller's chain and visible through INSPECT", func(t *testing.T) {
		got := c.roundTrip(t, request(t, "INSPECT", "/?target=audit&audit_id="+orderAudit, agtp.HeaderAgentID, buyer))
		if got.Status != 200 || !strings.Contains(string(got.Body), buyer) {
			t.Fatalf("INSPECT audit = %d %s", got.Status, got.Body)
		}
		head := c.roundTrip(t, request(t, "INSPECT", "/?target=chain_head&agent_id="+buyer, agtp.HeaderAgentID, buyer))
		if head.Status != 200 {
			t.Fatalf("INSPECT chain_head = %d %s", head.Status, head.Body)
		}
		// An AGTP request by the same agent continues the same chain.
		q := c.roundTrip(t, request(t, "QUERY", "/orders/ord-1001", agtp.HeaderAgentID, buyer))
		rec, err := attribution.Verify(q.Header.Get(agtp.HeaderAttributionRecord), attribution.VerifyOptions{Keys: jwks})
		// The INSPECT itself was the caller's, so its record is the head the
		// QUERY follows.
		if err != nil || rec.Payload.PreviousAuditID != head.Header.Get(agtp.HeaderAuditID) {
			t.Fatalf("the AGTP record's previous_audit_id %v does not follow the AGP records' head %s (%v)", rec, head.Body, err)
		}
	})

	t.Run("a revoked key is refused on the very next request", func(t *testing.T) {
		// The operator's own watch shows each change leaving policysvc.
		wctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		watch, err := keys.WatchKeyEvents(wctx, &agpv1.WatchKeyEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		nextEvent := func(t *testing.T) *agpv1.WatchKeyEventsResponse {
			t.Helper()
			type res struct {
				ev  *agpv1.WatchKeyEventsResponse
				err error
			}
			ch := make(chan res, 1)
			go func() { ev, err := watch.Recv(); ch <- res{ev, err} }()
			select {
			case r := <-ch:
				if r.err != nil {
					t.Fatalf("key watch: %v", r.err)
				}
				return r.ev
			case <-time.After(2 * time.Second):
				t.Fatal("no key event within 2s")
			}
			return nil
		}
		if first := nextEvent(t); !first.GetSubscribed() {
			t.Fatalf("first watch message %v, want subscribed", first)
		}
		// The same stream over policysvc's REST gateway (client certificate
		// required), one JSON object a line.
		cert, err := tls.LoadX509KeyPair(c.PKI.Cert(devpki.Admin), c.PKI.Key(devpki.Admin))
		if err != nil {
			t.Fatal(err)
		}
		restReq, err := http.NewRequestWithContext(wctx, "GET", "https://"+c.Procs["policysvc"].HTTPAddr+"/v1/agp/keys:watch", nil)
		if err != nil {
			t.Fatal(err)
		}
		restResp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS13, RootCAs: c.Admin.Pool(), Certificates: []tls.Certificate{cert},
		}}}).Do(restReq)
		if err != nil {
			t.Fatal(err)
		}
		defer restResp.Body.Close()
		restLines := bufio.NewScanner(restResp.Body)
		// restEvent reads the next line: {"result": WatchKeyEventsResponse}.
		restEvent := func(t *testing.T) (subscribed bool, change, keyID string) {
			t.Helper()
			ch := make(chan string, 1)
			go func() {
				if restLines.Scan() {
					ch <- restLines.Text()
				}
				close(ch)
			}()
			var line string
			select {
			case line = <-ch:
			case <-time.After(2 * time.Second):
				t.Fatal("no line on the REST key watch within 2s")
			}
			var v struct {
				Result struct {
					Subscribed bool   `json:"subscribed"`
					Change     string `json:"change"`
					KeyID      string `json:"keyId"`
				} `json:"result"`
			}
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("REST watch line %q: %v", line, err)
			}
			return v.Result.Subscribed, v.Result.Change, v.Result.KeyID
		}
		if sub, _, _ := restEvent(t); restResp.StatusCode != 200 || !sub {
			t.Fatalf("REST watch = %d, first message not subscribed", restResp.StatusCode)
		}
		var revoked []string
		admin := anon.with(mint(buyer, "admin"))
		for _, tc := range []struct {
			name   string
			revoke func(t *testing.T, id string)
			// viaThisFrontDoor: the front door that revoked the key drops it
			// itself; any other learns it from the watch.
			viaThisFrontDoor bool
		}{
			{"revoked through policysvc, not through this front door", func(t *testing.T, id string) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if _, err := keys.RevokeApiKey(ctx, &agpv1.RevokeApiKeyRequest{Id: id}); err != nil {
					t.Fatal(err)
				}
			}, false},
			{"revoked through this front door's DELETE /keys/{id}", func(t *testing.T, id string) {
				if res := admin.do("DELETE", "/keys/"+id, ""); res.status != 200 || res.json["revoked"] != true {
					t.Fatalf("DELETE /keys/%s = %d %s", id, res.status, res.body)
				}
			}, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				created, err := keys.CreateApiKey(ctx, &agpv1.CreateApiKeyRequest{Label: "e2e revoke", AgentId: buyer, Scopes: full})
				if err != nil {
					t.Fatal(err)
				}
				id, k := created.GetKey().GetId(), anon.with(created.GetSecret())
				// Used twice: the second answer comes from the front door's
				// key cache, which before the watch kept a revoked key
				// working for its whole TTL.
				for range 2 {
					if res := k.do("POST", "/agp/discover", `{"businessId":"orders"}`); res.status != 200 {
						t.Fatalf("discover with a fresh key = %d %s", res.status, res.body)
					}
				}
				start := time.Now()
				tc.revoke(t, id)
				var ev *agpv1.WatchKeyEventsResponse
				if !tc.viaThisFrontDoor {
					ev = nextEvent(t)
					t.Logf("revocation to event on a watch: %v", time.Since(start))
					applied := "key_id=" + id + " change=" + agpv1.ApiKeyChange_API_KEY_CHANGE_REVOKED.String()
					testkit.WaitFor(t, 2*time.Second, "the front door to apply the revocation", func() bool {
						return strings.Contains(c.Procs["frontdoor"].Logs(), applied)
					})
				}
				res := k.do("POST", "/agp/discover", `{"businessId":"orders"}`)
				agpError(t, res, 401, "UNAUTHORIZED")
				t.Logf("revocation to refusal: %v", time.Since(start))
				if ev == nil {
					ev = nextEvent(t)
				}
				sum := sha256.Sum256([]byte(created.GetSecret()))
				if ev.GetChange() != agpv1.ApiKeyChange_API_KEY_CHANGE_REVOKED || ev.GetKeyId() != id || ev.GetAgentId() != buyer ||
					len(ev.GetKeySha256()) != 1 || ev.GetKeySha256()[0] != hex.EncodeToString(sum[:]) {
					t.Fatalf("key event %v, want the revocation of %s", ev, id)
				}
				revoked = append(revoked, id)
			})
		}
		for _, id := range revoked {
			if sub, change, keyID := restEvent(t); sub || keyID != id || change != agpv1.ApiKeyChange_API_KEY_CHANGE_REVOKED.String() {
				t.Errorf("REST watch: %s of %q, want the revocation of %s", change, keyID, id)
			}
		}
	})

	t.Run("an admin key manages the keys of its own agent only", func(t *testing.T) {
		admin := anon.with(mint(buyer, "admin"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		keysOf := func(t *testing.T, agent string) []*agpv1.ApiKey {
			t.Helper()
			r, err := keys.ListApiKeys(ctx, &agpv1.ListApiKeysRequest{AgentId: agent})
			if err != nil {
				t.Fatal(err)
			}
			return r.GetKeys()
		}
		othersKey, err := keys.CreateApiKey(ctx, &agpv1.CreateApiKeyRequest{Label: "e2e other", AgentId: other, Scopes: full})
		if err != nil {
			t.Fatal(err)
		}
		before := keysOf(t, other)
		for _, tc := range []struct{ name, method, path, body string }{
			{"mint a key for another agent", "POST", "/keys", `{"label":"stolen","agentId":"` + other + `","scopes":["admin","execute"]}`},
			{"list another agent's keys", "GET", "/keys?agentId=" + other, ""},
			{"revoke another agent's key", "DELETE", "/keys/" + othersKey.GetKey().GetId(), ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := admin.do(tc.method, tc.path, tc.body)
				agpError(t, res, 403, "AGENT_MISMATCH")
				after := keysOf(t, other)
				if len(after) != len(before) {
					t.Fatalf("agent %s has %d keys after the refusal, had %d", other, len(after), len(before))
				}
				for i := range after {
					if after[i].GetId() != before[i].GetId() || strings.Join(after[i].GetScopes(), " ") != strings.Join(before[i].GetScopes(), " ") {
						t.Fatalf("agent %s's keys changed: %v, were %v", other, after, before)
					}
				}
				if res := anon.with(othersKey.GetSecret()).do("GET", "/keys/me", ""); res.status != 200 || res.str("agentId") != other {
					t.Fatalf("the other agent's key after the refusal = %d %s", res.status, res.body)
				}
			})
		}

		created := admin.do("POST", "/keys", `{"label":"e2e own","agentId":"`+buyer+`","scopes":["discover"]}`)
		if created.status != 201 || created.str("agentId") != buyer || created.str("key") == "" {
			t.Fatalf("mint a key for its own agent = %d %s", created.status, created.body)
		}
		own := anon.with(created.str("key"))
		if res := own.do("POST", "/agp/discover", `{"businessId":"orders"}`); res.status != 200 {
			t.Fatalf("discover with the minted key = %d %s", res.status, res.body)
		}
		list := admin.do("GET", "/keys", "")
		listed, _ := list.json["keys"].([]any)
		found := false
		for _, k := range listed {
			m := k.(map[string]any)
			if m["agentId"] != buyer {
				t.Fatalf("GET /keys listed a key of %v", m["agentId"])
			}
			found = found || m["id"] == created.str("id")
		}
		if list.status != 200 || !found {
			t.Fatalf("GET /keys = %d %s, want the minted key among its agent's", list.status, list.body)
		}
		if res := admin.do("DELETE", "/keys/"+created.str("id"), ""); res.status != 200 || res.json["revoked"] != true {
			t.Fatalf("revoke its own agent's key = %d %s", res.status, res.body)
		}
		agpError(t, own.do("POST", "/agp/discover", `{"businessId":"orders"}`), 401, "UNAUTHORIZED")

		t.Run("a key an operator made global manages another agent's keys", func(t *testing.T) {
			gk, err := keys.CreateApiKey(ctx, &agpv1.CreateApiKeyRequest{Label: "e2e ops", AgentId: buyer, Scopes: []string{"admin"}, Global: true})
			if err != nil {
				t.Fatal(err)
			}
			global := anon.with(gk.GetSecret())
			if me := global.do("GET", "/keys/me", ""); me.status != 200 || me.json["global"] != true {
				t.Fatalf("GET /keys/me = %d %s, want a global key", me.status, me.body)
			}
			minted := global.do("POST", "/keys", `{"label":"e2e for other","agentId":"`+other+`","scopes":["discover"]}`)
			if minted.status != 201 || minted.str("agentId") != other || minted.json["global"] != false {
				t.Fatalf("mint for another agent = %d %s", minted.status, minted.body)
			}
			if res := anon.with(minted.str("key")).do("POST", "/agp/discover", `{"businessId":"orders"}`); res.status != 200 {
				t.Fatalf("discover with the key minted for %s = %d %s", other, res.status, res.body)
			} else {
				signed(t, res, other)
			}
			listed := global.do("GET", "/keys?agentId="+other, "")
			ids := []string{}
			for _, k := range listed.json["keys"].([]any) {
				ids = append(ids, k.(map[string]any)["id"].(string))
			}
			if listed.status != 200 || !slices.Contains(ids, minted.str("id")) || !slices.Contains(ids, othersKey.GetKey().GetId()) {
				t.Fatalf("GET /keys?agentId=%s = %d %s", other, listed.status, listed.body)
			}
			if res := global.do("DELETE", "/keys/"+othersKey.GetKey().GetId(), ""); res.status != 200 {
				t.Fatalf("revoke another agent's key = %d %s", res.status, res.body)
			}
			agpError(t, anon.with(othersKey.GetSecret()).do("GET", "/keys/me", ""), 401, "UNAUTHORIZED")
		})
	})

	t.Run("rate limits are policysvc's, with X-RateLimit headers", func(t *testing.T) {
		body := `{"businessId":"documents","request":{"method":"SUMMARIZE","path":"/documents","parameters":{"text":"One. Two. Three."}}}`
		first := a.do("POST", "/agp/query", body)
		if first.status != 200 || first.header.Get("X-RateLimit-Limit") != "2" || first.header.Get("X-RateLimit-Remaining") != "1" {
			t.Fatalf("first = %d %s %v", first.status, first.body, first.header)
		}
		if reset, err := strconv.ParseInt(first.header.Get("X-RateLimit-Reset"), 10, 64); err != nil || reset < time.Now().Unix() {
			t.Errorf("X-RateLimit-Reset %q is not a future Unix time", first.header.Get("X-RateLimit-Reset"))
		}
		if second := a.do("POST", "/agp/query", body); second.status != 200 || second.header.Get("X-RateLimit-Remaining") != "0" {
			t.Fatalf("second = %d %v", second.status, second.header)
		}
		third := a.do("POST", "/agp/query", body)
		agpError(t, third, 429, "RATE_LIMITED")
		if ra, _ := third.json["retryAfter"].(float64); ra < 1 || third.header.Get("X-RateLimit-Remaining") != "0" || third.header.Get("Retry-After") == "" {
			t.Fatalf("429 = %s %v", third.body, third.header)
		}
		// The limit is per agent: another caller is not affected.
		if res := b.do("POST", "/agp/query", body); res.status == 429 {
			t.Fatalf("another agent was limited: %s", res.body)
		}
	})
}

// TestAGPListenerPresentsTheAGTPCertificate runs the front door with an
// AGTP server certificate from a CA of its own, apart from the suite CA,
// as a deployment with a public certificate does. The public HTTPS
// listener (AGP, the public documents) must present that certificate, and
// follow its rotation, and serve none of the internal APIs' REST routes;
// those are on the admin listener, which presents the front door's service
// certificate and admits only client certificates from the suite CA.
func TestAGPListenerPresentsTheAGTPCertificate(t *testing.T) {
	public, err := devpki.Ensure(t.TempDir(), "rotated")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "agtp-server.pem"), filepath.Join(dir, "agtp-server-key.pem")
	// place renames a complete file into place, as an operator's rotation does.
	place := func(t *testing.T, from, to string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(to+".tmp", to); err != nil {
			t.Fatal(err)
		}
	}
	place(t, public.Key(devpki.AGTPServer), keyFile)
	place(t, public.Cert(devpki.AGTPServer), certFile)
	c := Start(t, Options{ServiceEnv: map[string][]string{
		"frontdoor": {"AGTP_SERVER_CERT_FILE=" + certFile, "AGTP_SERVER_KEY_FILE=" + keyFile},
	}})
	fd := c.Procs["frontdoor"]
	publicRoots := x509.NewCertPool()
	if b, err := os.ReadFile(public.CA()); err != nil || !publicRoots.AppendCertsFromPEM(b) {
		t.Fatalf("public CA %s: %v", public.CA(), err)
	}
	leafOf := func(t *testing.T, file string) []byte {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		if block == nil {
			t.Fatalf("%s: no PEM block", file)
		}
		return block.Bytes
	}
	// getFrom GETs path from addr and returns the response with its body.
	getFrom := func(addr string, roots *x509.CertPool, cert *tls.Certificate, path string) (*http.Response, []byte, error) {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		// A transport per request: every request does a full handshake, so
		// it sees the certificate served now.
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + path)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, body, err
	}
	get := func(roots *x509.CertPool, cert *tls.Certificate, path string) (*http.Response, error) {
		resp, _, err := getFrom(fd.HTTPSAddr, roots, cert, path)
		return resp, err
	}
	// agtpLeaf is the certificate the AGTP listener presents.
	agtpLeaf := func(t *testing.T) []byte {
		t.Helper()
		conn, err := tls.Dial("tcp", fd.AGTPAddr, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: publicRoots, NextProtos: []string{agtp.ALPN}})
		if err != nil {
			t.Fatalf("AGTP handshake trusting the public CA: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}

	t.Run("a client trusting only the AGTP certificate's CA gets that certificate", func(t *testing.T) {
		resp, err := get(publicRoots, nil, "/health")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /health = %d", resp.StatusCode)
		}
		if !bytes.Equal(resp.TLS.PeerCertificates[0].Raw, leafOf(t, certFile)) {
			t.Fatalf("HTTPS leaf %q is not the AGTP server certificate", resp.TLS.PeerCertificates[0].Subject)
		}
		if !bytes.Equal(agtpLeaf(t), leafOf(t, certFile)) {
			t.Fatal("the AGTP listener presents another certificate")
		}
	})

	t.Run("the internal service certificate is not presented", func(t *testing.T) {
		_, err := get(c.Admin.Pool(), nil, "/health")
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Fatalf("trusting only the suite CA: %v, want the certificate refused as of an unknown authority", err)
		}
	})

	admin, err := tls.LoadX509KeyPair(c.PKI.Cert(devpki.Admin), c.PKI.Key(devpki.Admin))
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := tls.LoadX509KeyPair(public.Cert(devpki.Admin), public.Key(devpki.Admin))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the public listener serves no internal API", func(t *testing.T) {
		// One route of each internal API the gateway serves.
		routes := []string{
			"/v1/catalog/methods", "/v1/identity/agents", "/v1/policy/merchant", "/v1/agp/keys",
			"/v1/audit/jwks", "/v1/rcns/proposals/p-1", "/v1/escalations",
		}
		for _, path := range routes {
			for _, cert := range []*tls.Certificate{nil, &admin} {
				resp, body, err := getFrom(fd.HTTPSAddr, publicRoots, cert, path)
				if err != nil {
					t.Fatalf("GET %s (suite client certificate %t): %v", path, cert != nil, err)
				}
				if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "its own gateway") {
					t.Errorf("GET %s (suite client certificate %t) = %d %s, want 404 naming the services' own gateways", path, cert != nil, resp.StatusCode, body)
				}
			}
		}
	})

	t.Run("each service's gateway serves its routes to the identities its table admits", func(t *testing.T) {
		suiteRoots := c.Admin.Pool()
		system, err := tls.LoadX509KeyPair(c.PKI.Cert(devpki.InternalSystem), c.PKI.Key(devpki.InternalSystem))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			service, path string
			cert          *tls.Certificate
			want          int
		}{
			{"catalogsvc", "/v1/catalog/methods", &admin, http.StatusOK},
			{"identitysvc", "/v1/identity/agents", &admin, http.StatusOK},
			{"policysvc", "/v1/agp/keys", &admin, http.StatusOK},
			{"auditsvc", "/v1/audit/jwks", &system, http.StatusOK},
			// Escalations are answered by operators; a reporting system
			// may list them but key management is not its business.
			{"policysvc", "/v1/escalations", &system, http.StatusOK},
			{"identitysvc", "/v1/identity/agents:watch", &system, http.StatusForbidden},
		} {
			resp, body, err := getFrom(c.Procs[tc.service].HTTPAddr, suiteRoots, tc.cert, tc.path)
			if err != nil || resp.StatusCode != tc.want {
				t.Fatalf("GET %s on %s's gateway: %v %v %s, want %d", tc.path, tc.service, resp, err, body, tc.want)
			}
		}
		for _, tc := range []struct {
			name    string
			cert    *tls.Certificate
			refusal string
		}{
			{"without a client certificate", nil, "certificate required"},
			{"with a client certificate from another CA", &foreign, "unknown certificate authority"},
		} {
			if resp, _, err := getFrom(c.Procs["catalogsvc"].HTTPAddr, suiteRoots, tc.cert, "/v1/catalog/methods"); err == nil || !strings.Contains(err.Error(), tc.refusal) {
				t.Errorf("catalogsvc gateway %s: %v %v, want the handshake refused (%s)", tc.name, resp, err, tc.refusal)
			}
		}
	})

	t.Run("a rotation of the AGTP certificate reaches the HTTPS side", func(t *testing.T) {
		// Key first, then certificate: in between the pair does not load
		// and the old one keeps serving.
		place(t, public.Key("rotated"), keyFile)
		place(t, public.Cert("rotated"), certFile)
		want := leafOf(t, public.Cert("rotated"))
		testkit.WaitFor(t, 10*time.Second, "the rotated certificate on the HTTPS side", func() bool {
			resp, err := get(publicRoots, nil, "/health")
			return err == nil && bytes.Equal(resp.TLS.PeerCertificates[0].Raw, want)
		})
		if !bytes.Equal(agtpLeaf(t), want) {
			t.Fatal("the AGTP listener did not rotate with the HTTPS side")
		}
	})
}

// stockClient is written to the AGP reference SDK (agp-gateway-protocol
// §22.1): discover, query, prepare, execute with confirmationToken and
// idempotencyKey options sent as headers (§22.3), status. Its requests
// are adapter objects; it knows nothing of AGTP methods or paths.
type stockClient struct{ c *agpClient }

type executeOptions struct{ confirmationToken, idempotencyKey string }

func (s stockClient) post(path string, v any, headers ...string) *agpResp {
	s.c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		s.c.t.Fatal(err)
	}
	return s.c.do("POST", path, string(b), headers...)
}

func (s stockClient) discover(businessID string) *agpResp {
	return s.post("/agp/discover", map[string]any{"businessId": businessID})
}

func (s stockClient) query(businessID string, request map[string]any) *agpResp {
	return s.post("/agp/query", map[string]any{"businessId": businessID, "request": request})
}

func (s stockClient) prepare(businessID string, request map[string]any) *agpResp {
	return s.post("/agp/execute/prepare", map[string]any{"businessId": businessID, "request": request})
}

func (s stockClient) execute(businessID string, request map[string]any, o executeOptions) *agpResp {
	var h []string
	if o.confirmationToken != "" {
		h = append(h, "X-Confirmation-Token", o.confirmationToken)
	}
	if o.idempotencyKey != "" {
		h = append(h, "Idempotency-Key", o.idempotencyKey)
	}
	return s.post("/agp/execute", map[string]any{"businessId": businessID, "request": request}, h...)
}

func (s stockClient) status(transactionID string) *agpResp {
	return s.c.do("GET", "/agp/status/"+transactionID, "")
}

// TestAGPStockClient runs the AGP SDK's own example flow (§21.4:
// discover, query, prepare, execute with confirmation and idempotency,
// status) against the demo orders business, whose endpoints declare how
// an adapter's request reaches them (docs/agp.md "Adapter requests"),
// under the confirm policy. Every answer's transaction is read back the
// moment the answer arrives.
func TestAGPStockClient(t *testing.T) {
	c := Start(t, Options{ServiceEnv: map[string][]string{"policysvc": {"AGTP_AGP_EXECUTE_POLICY=confirm"}}})
	buyer := c.registerAgent(t, "agp-sdk-buyer", "orders:read", "orders:write")
	keys := agpv1.NewAgpServiceClient(c.Dial(t, "policysvc"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	k, err := keys.CreateApiKey(ctx, &agpv1.CreateApiKeyRequest{Label: "sdk", AgentId: buyer, Scopes: []string{"discover", "query", "execute"}})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.Admin.Pool()}}}
	client := stockClient{&agpClient{t: t, base: "https://" + c.Procs["frontdoor"].HTTPSAddr, hc: hc, key: k.GetSecret()}}
	const businessID = "orders"

	// recorded reads the transaction of an answer at once: the record is
	// stored before the answer leaves, so it is there with the status the
	// answer reported.
	recorded := func(t *testing.T, res *agpResp, op, status string) map[string]any {
		t.Helper()
		id := res.str("transactionId")
		if id == "" {
			d, _ := res.json["details"].(map[string]any)
			id, _ = d["transactionId"].(string)
		}
		st := client.status(id)
		if st.status != 200 || st.str("id") != id || st.str("operation") != op || st.str("status") != status || st.str("businessId") != businessID {
			t.Fatalf("status of %s right after the answer = %d %s, want %s %s", id, st.status, st.body, op, status)
		}
		return st.json
	}

	t.Run("discover: capabilities in AGP's shape", func(t *testing.T) {
		res := client.discover(businessID)
		if res.status != 200 || res.str("status") != "succeeded" {
			t.Fatalf("discover = %d %s", res.status, res.body)
		}
		caps, _ := res.json["data"].(map[string]any)["capabilities"].(map[string]any)
		for _, op := range []string{"discover", "query", "execute"} {
			cp, _ := caps[op].(map[string]any)
			if len(cp) != 5 || cp["operation"] != op || cp["method"] == "" || cp["endpoint"] == "" || cp["authRequired"] != true || cp["description"] == "" {
				t.Errorf("capabilities.%s = %v, want {operation, method, endpoint, authRequired, description}", op, cp)
			}
		}
		recorded(t, res, "discover", "succeeded")
	})

	t.Run("query: a filter, then one order", func(t *testing.T) {
		res := client.query(businessID, map[string]any{"status": "shipped"})
		list, _ := res.json["data"].(map[string]any)["orders"].([]any)
		if res.status != 200 || len(list) == 0 {
			t.Fatalf("query = %d %s", res.status, res.body)
		}
		for _, o := range list {
			if o.(map[string]any)["status"] != "shipped" {
				t.Fatalf("the filter did not reach the endpoint: %s", res.body)
			}
		}
		recorded(t, res, "query", "succeeded")
		one := client.query(businessID, map[string]any{"orderId": "ord-1001"})
		if one.status != 200 || one.str("data", "order_id") != "ord-1001" {
			t.Fatalf("query one = %d %s", one.status, one.body)
		}
	})

	order := map[string]any{"items": []any{map[string]any{"productId": "widget", "quantity": 1}}, "amount_cents": 2995}
	var orderID string
	t.Run("prepare, execute with confirmation and idempotency, status", func(t *testing.T) {
		prep := client.prepare(businessID, order)
		token := prep.str("confirmationToken")
		if prep.status != 200 || token == "" || prep.str("expiresAt") == "" || !strings.Contains(prep.str("summary"), "2995") {
			t.Fatalf("prepare = %d %s", prep.status, prep.body)
		}
		refused := client.execute(businessID, order, executeOptions{idempotencyKey: "order-steak-abc123"})
		if refused.status != 403 || refused.str("code") != "CONFIRMATION_REQUIRED" {
			t.Fatalf("execute without a token = %d %s", refused.status, refused.body)
		}
		res := client.execute(businessID, order, executeOptions{confirmationToken: token, idempotencyKey: "order-steak-abc123"})
		orderID = res.str("data", "order_id")
		if res.status != 200 || res.str("status") != "succeeded" || orderID == "" {
			t.Fatalf("execute = %d %s", res.status, res.body)
		}
		rec := recorded(t, res, "execute", "succeeded")
		in, _ := rec["input"].(map[string]any)["request"].(map[string]any)
		if result, _ := rec["result"].(map[string]any); result["order_id"] != orderID || in["amount_cents"] == nil || in["items"] == nil {
			t.Fatalf("record %v: want the SDK request as input and the order as result", rec)
		}
		again := client.execute(businessID, order, executeOptions{confirmationToken: token, idempotencyKey: "order-steak-abc123"})
		if again.status != 200 || again.str("transactionId") != res.str("transactionId") || again.header.Get("X-Idempotent-Replayed") != "true" {
			t.Fatalf("replay = %d %s", again.status, again.body)
		}
	})

	t.Run("a request no endpoint takes is a failed transaction", func(t *testing.T) {
		res := client.execute(businessID, map[string]any{"status": "open"}, executeOptions{})
		if res.status != 400 || res.str("code") != "CAPABILITY_NOT_FOUND" {
			t.Fatalf("execute = %d %s", res.status, res.body)
		}
		rec := recorded(t, res, "execute", "failed")
		if rec["error"] == nil {
			t.Fatalf("failed record has no error: %v", rec)
		}
	})

	t.Run("cancel: a matched action selects the endpoint", func(t *testing.T) {
		cancelReq := map[string]any{"action": "cancel", "orderId": orderID, "reason": "changed my mind"}
		token := client.prepare(businessID, cancelReq).str("confirmationToken")
		res := client.execute(businessID, cancelReq, executeOptions{confirmationToken: token, idempotencyKey: "cancel-" + orderID})
		if res.status != 200 || res.str("data", "status") != "cancelled" {
			t.Fatalf("cancel = %d %s", res.status, res.body)
		}
		if got := client.query(businessID, map[string]any{"orderId": orderID}); got.str("data", "status") != "cancelled" {
			t.Fatalf("order after cancel: %s", got.body)
		}
	})
}
