package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/policysvc/internal/server"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
)

const paymentPath = "/orders/{order_id}/payment"

// testMerchant is a merchant identity the budget tests pass.
var testMerchant = server.MerchantOptions{MerchantID: "m.example.test", ManifestFingerprint: strings.Repeat("c", 64)}

// purchaseRequest is a PURCHASE to testMerchant whose input is body, with
// a Budget-Limit.
func purchaseRequest(limit, body string) *policyv1.AuthorizeRequest {
	r := request(agentA)
	r.Method, r.PathTemplate, r.BudgetLimit, r.InputJson = "PURCHASE", paymentPath, limit, []byte(body)
	r.MerchantId, r.MerchantManifestFingerprint = testMerchant.MerchantID, testMerchant.ManifestFingerprint
	return r
}

// TestBudgetFromBody checks costs read from the request: the amount a
// PURCHASE asks for against its Budget-Limit (companions assertion 26),
// and the 400s for amounts that cannot be read.
func TestBudgetFromBody(t *testing.T) {
	c := serve(t, newRedis(t), server.Options{Budget: server.BudgetOptions{Costs: []server.EndpointCost{
		{Method: "PURCHASE", Path: paymentPath, AmountField: "amount", CurrencyField: "currency"},
		{Method: "EXECUTE", Path: "/jobs", AmountField: "limits.tokens", Unit: "tokens"},
	}}, Merchant: testMerchant}, nil)
	job := func(limit, body string) *policyv1.AuthorizeRequest {
		r := request(agentA)
		r.PathTemplate, r.BudgetLimit, r.InputJson = "/jobs", limit, []byte(body)
		return r
	}
	for _, tc := range []struct {
		name       string
		req        *policyv1.AuthorizeRequest
		wantStatus int32
		wantReason string
		wantDetail map[string]string
	}{
		{name: "amount under the limit passes", req: purchaseRequest("USD=20.00", `{"order_id":"o","amount":"12.50","currency":"USD"}`)},
		{name: "amount equal to the limit passes", req: purchaseRequest("USD=12.50", `{"amount":"12.50","currency":"USD"}`)},
		{name: "amount over the limit is 456", req: purchaseRequest("USD=10.00", `{"amount":"12.50","currency":"USD"}`),
			wantStatus: 456, wantReason: "budget-exceeded", wantDetail: map[string]string{"unit": "USD", "cost": "12.50"}},
		{name: "a cent over is 456", req: purchaseRequest("USD=12.49", `{"amount":"12.5","currency":"USD"}`),
			wantStatus: 456, wantReason: "budget-exceeded"},
		{name: "financial limit in the same currency applies", req: purchaseRequest("financial=5.00USD", `{"amount":"12.50","currency":"usd"}`),
			wantStatus: 456, wantReason: "budget-exceeded"},
		{name: "a JSON number amount is read exactly", req: purchaseRequest("USD=12.50", `{"amount":12.51,"currency":"USD"}`),
			wantStatus: 456, wantReason: "budget-exceeded"},
		{name: "a spend in a currency the limit does not name is 456", req: purchaseRequest("USD=1000.00", `{"amount":"1.00","currency":"EUR"}`),
			wantStatus: 456, wantReason: "budget-exceeded", wantDetail: map[string]string{"unit": "EUR"}},
		{name: "a limit without money leaves money unconstrained", req: purchaseRequest("tokens=10", `{"amount":"999.00","currency":"GBP"}`)},
		{name: "without a Budget-Limit the amount is not read", req: purchaseRequest("", `{"amount":"lots"}`)},
		{name: "missing amount is 400", req: purchaseRequest("USD=20.00", `{"currency":"USD"}`),
			wantStatus: 400, wantReason: "invalid-amount", wantDetail: map[string]string{"field": "amount"}},
		{name: "three decimals is 400", req: purchaseRequest("USD=20.00", `{"amount":"12.505","currency":"USD"}`),
			wantStatus: 400, wantReason: "invalid-amount", wantDetail: map[string]string{"field": "amount"}},
		{name: "negative amount is 400", req: purchaseRequest("USD=20.00", `{"amount":"-5.00","currency":"USD"}`),
			wantStatus: 400, wantReason: "invalid-amount"},
		{name: "exponent is 400", req: purchaseRequest("USD=20.00", `{"amount":1e1,"currency":"USD"}`),
			wantStatus: 400, wantReason: "invalid-amount"},
		{name: "an amount smuggling a second element is 400", req: purchaseRequest("USD=20.00", `{"amount":"1.00, USD=0","currency":"USD"}`),
			wantStatus: 400, wantReason: "invalid-amount"},
		{name: "an object amount is 400", req: purchaseRequest("USD=20.00", `{"amount":{"value":"1"},"currency":"USD"}`),
			wantStatus: 400, wantReason: "invalid-amount"},
		{name: "unregistered currency is 400", req: purchaseRequest("USD=20.00", `{"amount":"1.00","currency":"JPY"}`),
			wantStatus: 400, wantReason: "invalid-amount", wantDetail: map[string]string{"field": "currency"}},
		{name: "missing currency is 400", req: purchaseRequest("USD=20.00", `{"amount":"1.00"}`),
			wantStatus: 400, wantReason: "invalid-amount", wantDetail: map[string]string{"field": "currency"}},
		{name: "no input is 400", req: purchaseRequest("USD=20.00", ``),
			wantStatus: 400, wantReason: "invalid-amount"},
		{name: "input that is not an object is 400", req: purchaseRequest("USD=20.00", `["amount"]`),
			wantStatus: 400, wantReason: "invalid-amount"},
		{name: "a malformed Budget-Limit is 400 invalid-budget first", req: purchaseRequest("USD=lots", `{"amount":"1.00","currency":"USD"}`),
			wantStatus: 400, wantReason: "invalid-budget"},
		{name: "fixed unit from a nested member passes", req: job("tokens=500", `{"limits":{"tokens":400}}`)},
		{name: "fixed unit from a nested member over the limit is 456", req: job("tokens=500", `{"limits":{"tokens":"501"}}`),
			wantStatus: 456, wantReason: "budget-exceeded", wantDetail: map[string]string{"unit": "tokens", "cost": "501"}},
		{name: "fractional tokens are 400", req: job("tokens=500", `{"limits":{"tokens":"1.5"}}`),
			wantStatus: 400, wantReason: "invalid-amount", wantDetail: map[string]string{"field": "limits.tokens"}},
		{name: "another endpoint is not costed", req: func() *policyv1.AuthorizeRequest {
			r := purchaseRequest("USD=1.00", `{"amount":"100.00","currency":"USD"}`)
			r.PathTemplate = "/orders"
			return r
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := authorize(t, c, tc.req)
			if tc.wantStatus == 0 {
				wantAllow(t, resp)
				return
			}
			wantDenial(t, resp, tc.wantStatus, tc.wantReason)
			for k, v := range tc.wantDetail {
				if got := resp.GetDenial().GetDetails()[k]; got != v {
					t.Errorf("detail %s = %q, want %q (%v)", k, got, v, resp.GetDenial().GetDetails())
				}
			}
		})
	}

	// The input is bounded: a larger one is a malformed call.
	_, err := c.Authorize(context.Background(), purchaseRequest("USD=1.00", `{"amount":"1","pad":"`+strings.Repeat("x", 1<<20)+`"}`))
	wantCode(t, err, codes.InvalidArgument, "invalid-policy-request")
}

// merchantDoc is a Merchant Manifest Document written in a non-canonical
// form, and its RFC 8785 form by hand.
const (
	merchantDoc          = "{\n  \"status\": \"active\",\n  \"merchant_id\": \"merchant.example.test\",\n  \"rails\": [1.0, \"card\"],\n  \"name\": \"\u00e9tal\"\n}\n"
	merchantDocCanonical = `{"merchant_id":"merchant.example.test","name":"étal","rails":[1,"card"],"status":"active"}`
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestMerchantManifestFile checks the fingerprint of a manifest file (the
// SHA-256 of its canonical form), the merchant in an allowed PURCHASE's
// decision, and GetMerchant.
func TestMerchantManifestFile(t *testing.T) {
	file := writeFile(t, "merchant.json", merchantDoc)
	want := sha256Hex(merchantDocCanonical)
	c := serve(t, newRedis(t), server.Options{Merchant: server.MerchantOptions{ManifestFile: file}}, nil)

	m, err := c.GetMerchant(context.Background(), &policyv1.GetMerchantRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !m.GetConfigured() || m.GetMerchantId() != "merchant.example.test" || m.GetManifestFingerprint() != want ||
		m.GetStatus() != "active" || m.GetManifest() != merchantDocCanonical {
		t.Fatalf("GetMerchant = %+v, want merchant.example.test %s and the canonical document", m, want)
	}
	//lint:ignore SA1019 the first release's field is still filled for its clients
	if string(m.GetManifestJson()) != merchantDocCanonical {
		t.Fatalf("GetMerchant = %+v, want merchant.example.test %s and the canonical document", m, want)
	}

	purchase := func(id, fp string) *policyv1.AuthorizeRequest {
		r := request(agentA)
		r.Method, r.PathTemplate, r.MerchantId, r.MerchantManifestFingerprint = "PURCHASE", paymentPath, id, fp
		return r
	}
	for _, tc := range []struct {
		name   string
		req    *policyv1.AuthorizeRequest
		allows bool
	}{
		{name: "the canonical form's fingerprint passes", req: purchase("merchant.example.test", want), allows: true},
		{name: "in upper case it passes", req: purchase("merchant.example.test", strings.ToUpper(want)), allows: true},
		{name: "the raw file's fingerprint is 458", req: purchase("merchant.example.test", sha256Hex(merchantDoc))},
		{name: "no fingerprint is 458", req: purchase("merchant.example.test", "")},
		{name: "no Merchant-ID is 458", req: purchase("", want)},
		{name: "another merchant is 458", req: purchase("other.example.test", want)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := authorize(t, c, tc.req)
			if !tc.allows {
				wantDenial(t, resp, 458, "counterparty-unverified")
				if resp.GetMerchantId() != "" || resp.GetMerchantFingerprint() != "" {
					t.Fatalf("a refused PURCHASE names the merchant %q %q", resp.GetMerchantId(), resp.GetMerchantFingerprint())
				}
				return
			}
			wantAllow(t, resp)
			if resp.GetMerchantId() != "merchant.example.test" || resp.GetMerchantFingerprint() != want {
				t.Fatalf("allowed PURCHASE names merchant %q %q, want merchant.example.test %s", resp.GetMerchantId(), resp.GetMerchantFingerprint(), want)
			}
		})
	}

	// A refusal after the merchant check (here the missing Idempotency-Key)
	// does not name the merchant either.
	r := purchase("merchant.example.test", want)
	r.IdempotencyKeyRequired = true
	resp := authorize(t, c, r)
	wantDenial(t, resp, 400, "idempotency-key-required")
	if resp.GetMerchantId() != "" {
		t.Fatalf("a refused PURCHASE names the merchant %q", resp.GetMerchantId())
	}
	// Other methods are not checked and name no merchant.
	if resp := authorize(t, c, request(agentA)); resp.GetMerchantId() != "" {
		t.Fatalf("EXECUTE names the merchant %q", resp.GetMerchantId())
	}
}

func TestMerchantStaticFingerprintAndUnconfigured(t *testing.T) {
	fp := strings.Repeat("AB", 32)
	c := serve(t, newRedis(t), server.Options{Merchant: server.MerchantOptions{MerchantID: "m.example.test", ManifestFingerprint: fp}}, nil)
	m, err := c.GetMerchant(context.Background(), &policyv1.GetMerchantRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !m.GetConfigured() || m.GetManifestFingerprint() != strings.ToLower(fp) || m.GetManifest() != "" {
		t.Fatalf("GetMerchant = %+v, want the lowercase fingerprint and no document", m)
	}

	none := serve(t, newRedis(t), server.Options{}, nil)
	m, err = none.GetMerchant(context.Background(), &policyv1.GetMerchantRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m.GetConfigured() || m.GetMerchantId() != "" {
		t.Fatalf("GetMerchant without a merchant = %+v", m)
	}
	r := request(agentA)
	r.Method, r.MerchantId, r.MerchantManifestFingerprint = "PURCHASE", "m.example.test", strings.Repeat("a", 64)
	wantDenial(t, authorize(t, none, r), 458, "counterparty-unverified")
}

func TestCommerceOptionsRefused(t *testing.T) {
	rdb := newRedis(t) // New does no Redis I/O; one server serves every case
	doc := writeFile(t, "m.json", merchantDoc)
	noID := writeFile(t, "noid.json", `{"name":"x"}`)
	for _, tc := range []struct {
		name string
		opts server.Options
	}{
		{"cost and amount_field", server.Options{Budget: server.BudgetOptions{Costs: []server.EndpointCost{{Cost: "USD=1", AmountField: "amount", Unit: "USD"}}}}},
		{"amount_field without a unit", server.Options{Budget: server.BudgetOptions{Costs: []server.EndpointCost{{AmountField: "amount"}}}}},
		{"currency_field and unit", server.Options{Budget: server.BudgetOptions{Costs: []server.EndpointCost{{AmountField: "amount", CurrencyField: "c", Unit: "USD"}}}}},
		{"unregistered unit", server.Options{Budget: server.BudgetOptions{Costs: []server.EndpointCost{{AmountField: "amount", Unit: "JPY"}}}}},
		{"empty member name", server.Options{Budget: server.BudgetOptions{Costs: []server.EndpointCost{{AmountField: "a..b", Unit: "USD"}}}}},
		{"unit without amount_field", server.Options{Budget: server.BudgetOptions{Costs: []server.EndpointCost{{Cost: "USD=1", Unit: "USD"}}}}},
		{"file and fingerprint", server.Options{Merchant: server.MerchantOptions{MerchantID: "m", ManifestFile: doc, ManifestFingerprint: strings.Repeat("a", 64)}}},
		{"merchant id alone", server.Options{Merchant: server.MerchantOptions{MerchantID: "m"}}},
		{"missing file", server.Options{Merchant: server.MerchantOptions{ManifestFile: filepath.Join(t.TempDir(), "absent.json")}}},
		{"file that is not an object", server.Options{Merchant: server.MerchantOptions{ManifestFile: writeFile(t, "arr.json", `["x"]`)}}},
		{"file with duplicate members", server.Options{Merchant: server.MerchantOptions{MerchantID: "m", ManifestFile: writeFile(t, "dup.json", `{"a":1,"a":2}`)}}},
		{"file larger than 1 MiB", server.Options{Merchant: server.MerchantOptions{MerchantID: "m", ManifestFile: writeFile(t, "big.json", `{"a":"`+strings.Repeat("x", 1<<20)+`"}`)}}},
		{"no merchant id anywhere", server.Options{Merchant: server.MerchantOptions{ManifestFile: noID}}},
		{"merchant id differing from the file's", server.Options{Merchant: server.MerchantOptions{MerchantID: "other", ManifestFile: doc}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := server.New(rdb, discard, tc.opts); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
	// The merchant ID may be given with the file when they agree.
	if _, err := server.New(rdb, discard, server.Options{Merchant: server.MerchantOptions{MerchantID: "merchant.example.test", ManifestFile: doc}}); err != nil {
		t.Fatalf("agreeing merchant_id: %v", err)
	}
}
