package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
)

// merchantManifest is the suite's Merchant Manifest Document in the form
// an operator might write it, and its RFC 8785 form by hand: the
// fingerprint is the SHA-256 of the latter.
const (
	merchantManifest = "{\n  \"status\": \"active\",\n  \"merchant_id\": \"shop.example.test\",\n" +
		"  \"display_name\": \"Demo order desk\",\n  \"accepted_currencies\": [\"USD\", \"EUR\", \"GBP\"],\n  \"version\": 1.0\n}\n"
	merchantManifestJCS = `{"accepted_currencies":["USD","EUR","GBP"],"display_name":"Demo order desk","merchant_id":"shop.example.test","status":"active","version":1}`
)

// TestCommerce drives the demo PURCHASE /orders/{order_id}/payment over AGTP
// against the suite as processes, with policysvc configured as a merchant (a
// manifest file) and the purchase amount read from the body for
// Budget-Limit: core assertions 112 and 113 (458), companions assertions 25
// (scope; 262 per docs/decisions.md#D-scope-262) and 26 (456 before any side
// effect), and the merchant members of the Attribution-Record.
func TestCommerce(t *testing.T) {
	dir := t.TempDir()
	manifest := filepath.Join(dir, "merchant.json")
	policy := filepath.Join(dir, "policy.json")
	options := fmt.Sprintf(`{
		"budget": {"costs": [{"method": "PURCHASE", "path": "/orders/{order_id}/payment", "amount_field": "amount", "currency_field": "currency"}]},
		"merchant": {"manifest_file": %q}}`, manifest)
	for name, content := range map[string]string{manifest: merchantManifest, policy: options} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := Start(t, Options{ServiceEnv: map[string][]string{"policysvc": {"AGTP_POLICY_FILE=" + policy}}})
	buyer := c.registerAgent(t, "commerce-buyer", "orders:read", "orders:write", "payments:purchase")
	browser := c.registerAgent(t, "commerce-browser", "orders:read", "orders:write")
	keys := c.signingKeys(t)

	sum := sha256.Sum256([]byte(merchantManifestJCS))
	fingerprint := hex.EncodeToString(sum[:])
	const merchantID = "shop.example.test"

	// The served document is what an agent verifies before buying.
	t.Run("DESCRIBE /merchant serves the document whose canonical SHA-256 is the fingerprint", func(t *testing.T) {
		resp := c.roundTrip(t, request(t, "DESCRIBE", "/merchant"))
		if resp.Status != 200 {
			t.Fatalf("DESCRIBE /merchant = %d %s", resp.Status, resp.Body)
		}
		var m struct {
			MerchantID          string          `json:"merchant_id"`
			ManifestFingerprint string          `json:"manifest_fingerprint"`
			Status              string          `json:"status"`
			Manifest            json.RawMessage `json:"manifest"`
		}
		if err := json.Unmarshal(resp.Body, &m); err != nil {
			t.Fatal(err)
		}
		canonical, err := jcs.Canonicalize(m.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		got := sha256.Sum256(canonical)
		if m.MerchantID != merchantID || m.Status != "active" || m.ManifestFingerprint != fingerprint ||
			hex.EncodeToString(got[:]) != fingerprint || string(canonical) != merchantManifestJCS {
			t.Fatalf("DESCRIBE /merchant = %s; want %s, active, fingerprint %s of %s", resp.Body, merchantID, fingerprint, merchantManifestJCS)
		}
	})

	newOrder := func(t *testing.T) string {
		t.Helper()
		resp, body := c.call(t, buyer, "CREATE", "/orders", `{"lines":[{"sku":"widget","quantity":1}]}`,
			agtp.HeaderIdempotencyKey, "create-"+t.Name())
		result, _ := body["result"].(map[string]any)
		id, _ := result["order_id"].(string)
		if resp.Status != 200 || id == "" {
			t.Fatalf("CREATE /orders = %d %s", resp.Status, resp.Body)
		}
		return id
	}
	orderStatus := func(t *testing.T, id string) string {
		t.Helper()
		resp, body := c.call(t, buyer, "QUERY", "/orders/"+id, "")
		if resp.Status != 200 {
			t.Fatalf("QUERY /orders/%s = %d %s", id, resp.Status, resp.Body)
		}
		result, _ := body["result"].(map[string]any)
		s, _ := result["status"].(string)
		return s
	}
	body := func(id, amount, currency string) string {
		return fmt.Sprintf(`{"principal_id":"alice@example.test","amount":%q,"currency":%q,"order_id":%q}`, amount, currency, id)
	}
	n := 0
	purchase := func(t *testing.T, agent, id, payload string, headers ...string) (*agtp.Response, map[string]any) {
		t.Helper()
		n++
		return c.call(t, agent, "PURCHASE", "/orders/"+id+"/payment", payload,
			append([]string{agtp.HeaderIdempotencyKey, fmt.Sprintf("purchase-%d", n)}, headers...)...)
	}
	verified := []string{agtp.HeaderMerchantID, merchantID, agtp.HeaderMerchantManifestFingerprint, fingerprint}
	record := func(t *testing.T, resp *agtp.Response) attribution.Payload {
		t.Helper()
		rec, err := attribution.Verify(resp.Header.Get(agtp.HeaderAttributionRecord), attribution.VerifyOptions{Keys: keys})
		if err != nil {
			t.Fatalf("Attribution-Record does not verify: %v", err)
		}
		return rec.Payload
	}

	// Core 112, 113: every counterparty failure is 458, and nothing is paid.
	rawSum := sha256.Sum256([]byte(merchantManifest))
	for _, tc := range []struct {
		name    string
		headers []string
	}{
		{"core 112: PURCHASE without Merchant-ID is 458", []string{agtp.HeaderMerchantManifestFingerprint, fingerprint}},
		{"core 112: PURCHASE without Merchant-Manifest-Fingerprint is 458", []string{agtp.HeaderMerchantID, merchantID}},
		{"core 113: PURCHASE with the fingerprint of the uncanonicalized file is 458", []string{agtp.HeaderMerchantID, merchantID, agtp.HeaderMerchantManifestFingerprint, hex.EncodeToString(rawSum[:])}},
		{"core 113: PURCHASE with a stale fingerprint is 458", []string{agtp.HeaderMerchantID, merchantID, agtp.HeaderMerchantManifestFingerprint, fmt.Sprintf("%064x", 1)}},
		{"PURCHASE naming another merchant is 458", []string{agtp.HeaderMerchantID, "other.example.test", agtp.HeaderMerchantManifestFingerprint, fingerprint}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newOrder(t)
			resp, eb := purchase(t, buyer, id, body(id, "12.50", "USD"), tc.headers...)
			if resp.Status != agtp.StatusCounterpartyUnverified || eb["reason"] != "counterparty-unverified" {
				t.Fatalf("PURCHASE = %d %s, want 458 counterparty-unverified", resp.Status, resp.Body)
			}
			if p := record(t, resp); p.Status != 458 || p.MerchantID != "" || p.MerchantFingerprint != "" {
				t.Fatalf("record of the refusal = %+v, want status 458 and no merchant", p)
			}
			if s := orderStatus(t, id); s != "open" {
				t.Fatalf("order %s is %s after a refused PURCHASE", id, s)
			}
		})
	}

	// Companions 25: scope is Authority-Scope's 262
	// (docs/decisions.md#D-scope-262), not 455.
	for _, tc := range []struct {
		name    string
		agent   string
		headers []string
	}{
		{"companions 25: an agent without payments:purchase gets 262 and nothing is paid", browser, nil},
		{"companions 25: an Authority-Scope claim without payments:purchase gets 262 and nothing is paid", buyer, []string{agtp.HeaderAuthorityScope, "orders:read, orders:write"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newOrder(t)
			resp, eb := purchase(t, tc.agent, id, body(id, "12.50", "USD"), append(append([]string{}, verified...), tc.headers...)...)
			if resp.Status != agtp.StatusAuthorizationRequired || eb["reason"] != "scope-required" || eb["scope"] != "payments:purchase" {
				t.Fatalf("PURCHASE = %d %s, want 262 scope-required naming payments:purchase", resp.Status, resp.Body)
			}
			if s := orderStatus(t, id); s != "open" {
				t.Fatalf("order %s is %s after a PURCHASE without scope", id, s)
			}
		})
	}

	// Companions 26: the amount in the body against Budget-Limit, before
	// the handler runs.
	for _, tc := range []struct {
		name, limit, amount, currency string
		wantReason, wantUnit          string
	}{
		{name: "companions 26: an amount over the Budget-Limit is 456 and nothing is paid", limit: "USD=10.00", amount: "12.50", currency: "USD", wantReason: "budget-exceeded", wantUnit: "USD"},
		{name: "an amount in a currency the Budget-Limit does not allow is 456", limit: "USD=100.00", amount: "1.00", currency: "EUR", wantReason: "budget-exceeded", wantUnit: "EUR"},
		{name: "a malformed Budget-Limit is 400", limit: "USD=ten", amount: "1.00", currency: "USD", wantReason: "invalid-budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newOrder(t)
			resp, eb := purchase(t, buyer, id, body(id, tc.amount, tc.currency), append(append([]string{}, verified...), agtp.HeaderBudgetLimit, tc.limit)...)
			want := agtp.StatusBudgetExceeded
			if tc.wantReason == "invalid-budget" {
				want = agtp.StatusBadRequest
			}
			if resp.Status != want || eb["reason"] != tc.wantReason || (tc.wantUnit != "" && eb["unit"] != tc.wantUnit) {
				t.Fatalf("PURCHASE = %d %s, want %d %s (unit %s)", resp.Status, resp.Body, want, tc.wantReason, tc.wantUnit)
			}
			if s := orderStatus(t, id); s != "open" {
				t.Fatalf("order %s is %s after a refused PURCHASE", id, s)
			}
		})
	}

	t.Run("a verified PURCHASE within budget pays the order and its record names the merchant", func(t *testing.T) {
		id := newOrder(t)
		claims := base64.RawURLEncoding.EncodeToString([]byte(`{"jti":"intent-7f3a","sub":"alice@example.test","amount":"12.50"}`))
		intent := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"EdDSA","typ":"JWT"}`)) + "." + claims + ".c2lnbmF0dXJl"
		payload := body(id, "12.50", "USD")
		headers := append(append([]string{}, verified...), agtp.HeaderBudgetLimit, "USD=20.00", agtp.HeaderIntentAssertion, intent)
		req := withJSON(request(t, "PURCHASE", "/orders/"+id+"/payment",
			append([]string{agtp.HeaderAgentID, buyer, agtp.HeaderIdempotencyKey, "pay-" + id}, headers...)...), payload)
		resp := c.roundTrip(t, req)
		if resp.Status != 200 {
			t.Fatalf("PURCHASE = %d %s", resp.Status, resp.Body)
		}
		var envelope struct {
			Result struct {
				Status  string `json:"status"`
				Payment struct {
					Amount      string `json:"amount"`
					Currency    string `json:"currency"`
					PrincipalID string `json:"principal_id"`
					PaidBy      string `json:"paid_by"`
				} `json:"payment"`
			} `json:"result"`
		}
		if err := json.Unmarshal(resp.Body, &envelope); err != nil {
			t.Fatal(err)
		}
		out := envelope.Result
		if out.Status != "paid" || out.Payment.Amount != "12.50" || out.Payment.Currency != "USD" ||
			out.Payment.PrincipalID != "alice@example.test" || out.Payment.PaidBy != buyer {
			t.Fatalf("PURCHASE body = %s", resp.Body)
		}
		if s := orderStatus(t, id); s != "paid" {
			t.Fatalf("order %s is %s after PURCHASE", id, s)
		}
		p := record(t, resp)
		if p.Status != 200 || p.Method != "PURCHASE" || p.AgentID != buyer || p.MerchantID != merchantID ||
			p.MerchantFingerprint != fingerprint || p.IntentAssertionJTI != "intent-7f3a" {
			t.Fatalf("record = %+v, want PURCHASE by %s naming %s, %s and intent-7f3a", p, buyer, merchantID, fingerprint)
		}

		// The replay of the same key is verified again and names the
		// merchant again; the order is paid once.
		replay := c.roundTrip(t, withJSON(request(t, "PURCHASE", "/orders/"+id+"/payment",
			append([]string{agtp.HeaderAgentID, buyer, agtp.HeaderIdempotencyKey, "pay-" + id}, headers...)...), payload))
		if replay.Status != 200 || replay.Header.Get(agtp.HeaderIdempotentReplayed) != "true" || string(replay.Body) != string(resp.Body) {
			t.Fatalf("replay = %d %v %s", replay.Status, replay.Header, replay.Body)
		}
		if p := record(t, replay); p.MerchantID != merchantID || p.MerchantFingerprint != fingerprint {
			t.Fatalf("replay record = %+v", p)
		}

		// Paying again under a new key is the order's conflict, not a
		// second payment.
		again, eb := purchase(t, buyer, id, payload, verified...)
		if again.Status != 409 || eb["reason"] != "order_already_paid" {
			t.Fatalf("second PURCHASE = %d %s, want 409 order_already_paid", again.Status, again.Body)
		}
	})

	t.Run("without Budget-Limit no budget applies", func(t *testing.T) {
		id := newOrder(t)
		resp, _ := purchase(t, buyer, id, body(id, "999.99", "GBP"), verified...)
		if resp.Status != 200 {
			t.Fatalf("PURCHASE = %d %s", resp.Status, resp.Body)
		}
		if p := record(t, resp); p.MerchantID != merchantID || p.IntentAssertionJTI != "" {
			t.Fatalf("record = %+v, want the merchant and no intent assertion", p)
		}
	})
}
