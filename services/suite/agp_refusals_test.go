package suite

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/jcs"
	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/agtpsuite/agtp/services/testkit"
)

// What the record of a failed AGP transaction keeps of its input
// (docs/agp.md, "Transactions"): at most 4 KiB of its canonical form,
// which the stored JSON may escape to twice that; with the record's other
// members, a failed transaction's record stays under 10 KiB.
const (
	agpFailedInputPrefix = 4 << 10
	agpFailedRecordBytes = 10 << 10
)

// agpRefusalClient is the demo agent speaking AGP with its API key.
type agpRefusalClient struct {
	t    *testing.T
	base string
	key  string
	hc   *http.Client
}

type agpAnswer struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (a agpAnswer) code() string { s, _ := a.body["code"].(string); return s }

func (a agpAnswer) transactionID() string {
	d, _ := a.body["details"].(map[string]any)
	id, _ := d["transactionId"].(string)
	return id
}

func (a agpAnswer) remaining() int {
	n, err := strconv.Atoi(a.header.Get("X-RateLimit-Remaining"))
	if err != nil {
		return -1
	}
	return n
}

// do makes an AGP request with the client's key.
func (c *agpRefusalClient) do(method, path, body string) agpAnswer {
	c.t.Helper()
	return c.send(method, path, body)
}

// send makes an AGP request with extra headers (name, value pairs) and
// the client's key, unless key overrides it.
func (c *agpRefusalClient) send(method, path, body string, headers ...string) agpAnswer {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("X-Api-Key", c.key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := agpAnswer{status: resp.StatusCode, header: resp.Header, raw: b}
	_ = json.Unmarshal(b, &a.body)
	return a
}

// txKeys are the AGP transaction records in Redis, with their sizes.
func txKeys(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	out := map[string]int64{}
	iter := rdb.Scan(ctx, 0, "*:agp:tx:*", 1000).Iterator()
	for iter.Next(ctx) {
		n, err := rdb.StrLen(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[iter.Val()] = n
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// recordBytes is the size of the stored record of one transaction.
func recordBytes(t *testing.T, rdb *redis.Client, id string) int64 {
	t.Helper()
	for k, n := range txKeys(t, rdb) {
		if strings.HasSuffix(k, ":agp:tx:"+id) {
			return n
		}
	}
	t.Fatalf("no record of transaction %s in Redis", id)
	return 0
}

// startAGPSuite starts the suite with the policy options policyJSON and
// returns the demo agent's AGP client, once the demo business is served,
// and the suite's Redis.
func startAGPSuite(t *testing.T, policyJSON string) (*agpRefusalClient, *redis.Client) {
	t.Helper()
	rds := testkit.StartRedis(t)
	s := startTestSuite(t, Config{RedisURL: rds.URL(), LookupEnv: mapEnv(map[string]string{"AGTP_POLICY_FILE": writePolicyFile(t, policyJSON)})})
	c := demoAGPClient(t, s)
	return c, rds.Client(t)
}

// demoAGPClient is the demo agent's AGP client of s, once the demo
// business is in the public directory (anonymous, so waiting spends none
// of the agent's limits).
func demoAGPClient(t *testing.T, s *Suite) *agpRefusalClient {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(s.StateDir(), "demo-agent", "agp-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := keyfile.CertPool(s.Layout().CA())
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}}}
	t.Cleanup(hc.CloseIdleConnections)
	c := &agpRefusalClient{t: t, base: "https://" + s.HTTPSAddr(), key: strings.TrimSpace(string(key)), hc: hc}
	anon := &agpRefusalClient{t: t, base: c.base, hc: hc}
	testkit.WaitFor(t, 30*time.Second, "the demo business in the directory", func() bool {
		return strings.Contains(string(anon.do("GET", "/agp/businesses", "").raw), `"orders"`)
	})
	return c
}

// The requests of these tests: a query of an unknown business, and one
// whose input the demo's QUERY /orders/{order_id} refuses (it has no
// member blob), each carrying blob in its parameters.
func agpUnknown(blob string) string {
	return `{"businessId":"no-such-business","request":{"method":"QUERY","path":"/x","parameters":{"blob":"` + blob + `"}}}`
}

func agpInvalid(blob string) string {
	return `{"businessId":"orders","request":{"method":"QUERY","path":"/orders/ord-1001","parameters":{"blob":"` + blob + `"}}}`
}

// agpValidRead is a query the demo business answers.
const agpValidRead = `{"businessId":"orders","request":{"orderId":"ord-1001"}}`

// agpBig is ~900 KiB of parameter.
func agpBig() string { return strings.Repeat("x", 900<<10) }

// TestAGPFailedTransactionKeepsInputHashSizeAndPrefix: the record of a
// failed AGP transaction (here refused before the pipeline's policy stage,
// for an unknown business or input that does not validate) keeps its
// input as the SHA-256 and size of its canonical form and a prefix of at
// most 4 KiB, not the ~900 KiB sent, and stays under 10 KiB in Redis; a
// succeeded transaction's record keeps its input whole.
func TestAGPFailedTransactionKeepsInputHashSizeAndPrefix(t *testing.T) {
	c, rdb := startAGPSuite(t, `{}`)
	big := agpBig()
	status := func(id string) map[string]any {
		t.Helper()
		res := c.do("GET", "/agp/status/"+id, "")
		if res.status != 200 {
			t.Fatalf("status of %s = %d %s", id, res.status, res.raw)
		}
		return res.body
	}

	ok := c.do("POST", "/agp/query", agpValidRead)
	if ok.status != 200 {
		t.Fatalf("query = %d %s", ok.status, ok.raw)
	}
	rec := status(ok.body["transactionId"].(string))
	if in, _ := rec["input"].(map[string]any); rec["status"] != "succeeded" || in["businessId"] != "orders" || in["request"].(map[string]any)["orderId"] != "ord-1001" {
		t.Fatalf("succeeded record %v: want the request as its input", rec)
	}

	refused := c.do("POST", "/agp/query", agpUnknown(big))
	if refused.status != 400 || refused.code() != "BUSINESS_NOT_FOUND" || refused.transactionID() == "" {
		t.Fatalf("unknown business = %d %s", refused.status, refused.raw)
	}
	canon, err := jcs.Marshal(map[string]any{"businessId": "no-such-business", "request": map[string]any{"method": "QUERY", "path": "/x", "parameters": map[string]any{"blob": big}}})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(canon)
	rec = status(refused.transactionID())
	in, _ := rec["input"].(map[string]any)
	prefix, _ := in["prefix"].(string)
	if rec["status"] != "failed" || in["sha256"] != hex.EncodeToString(sum[:]) || in["size"] != float64(len(canon)) || in["truncated"] != true ||
		len(prefix) == 0 || len(prefix) > agpFailedInputPrefix || !strings.HasPrefix(string(canon), prefix) || in["request"] != nil {
		t.Fatalf("refused record's input %.300v: want {sha256, size, prefix, truncated} of the canonical input (%d bytes)", in, len(canon))
	}
	if n := recordBytes(t, rdb, refused.transactionID()); n > agpFailedRecordBytes {
		t.Fatalf("the refused transaction's record takes %d bytes in Redis, want at most %d", n, agpFailedRecordBytes)
	}

	bad := c.do("POST", "/agp/query", agpInvalid(big))
	if bad.status != 400 || bad.code() != "VALIDATION_ERROR" || bad.transactionID() == "" {
		t.Fatalf("invalid input = %d %.500s", bad.status, bad.raw)
	}
	if n := recordBytes(t, rdb, bad.transactionID()); n > agpFailedRecordBytes {
		t.Fatalf("the invalid query's record takes %d bytes in Redis, want at most %d", n, agpFailedRecordBytes)
	}
	if in, _ := status(bad.transactionID())["input"].(map[string]any); in["truncated"] != true || in["sha256"] == nil {
		t.Fatalf("invalid query's record input %.300v: want its hash, size and prefix", in)
	}
}

// TestAGPRefusalsSpendTheRateLimit: an AGP request the front door refuses
// before the pipeline's policy stage (an unknown business, input that
// does not validate) spends the caller's rate limit like any request, so
// once the limit is spent such requests are answered 429; and each adds
// one bounded record to Redis: 20 refusals carrying ~900 KiB each add a
// few KiB each, not 17 MiB.
func TestAGPRefusalsSpendTheRateLimit(t *testing.T) {
	const limit = 6
	// Every agent: 6 requests an hour, so nothing comes back during the
	// test.
	big := agpBig()
	c, rdb := startAGPSuite(t, `{"rate_limits":{"tiers":{"default":{"limit":`+strconv.Itoa(limit)+`,"period":3600000000000}}}}`)
	// spent checks that an answer spent one request of the limit.
	left := limit
	spent := func(what string, res agpAnswer) {
		t.Helper()
		left--
		if got := res.remaining(); got != left {
			t.Fatalf("%s: X-RateLimit-Remaining %q, want %d: the request did not spend the rate limit (%d %.300s)", what, res.header.Get("X-RateLimit-Remaining"), left, res.status, res.raw)
		}
	}

	ok := c.do("POST", "/agp/query", agpValidRead)
	if ok.status != 200 {
		t.Fatalf("query = %d %s", ok.status, ok.raw)
	}
	spent("a succeeded query", ok)
	for _, r := range []struct{ what, path, body, code string }{
		{"an unknown business", "/agp/query", agpUnknown(big), "BUSINESS_NOT_FOUND"},
		{"invalid input", "/agp/query", agpInvalid(big), "VALIDATION_ERROR"},
		{"discover of an unknown business", "/agp/discover", `{"businessId":"no-such-business"}`, "BUSINESS_NOT_FOUND"},
	} {
		res := c.do("POST", r.path, r.body)
		if res.status != 400 || res.code() != r.code {
			t.Fatalf("%s = %d %.500s, want 400 %s", r.what, res.status, res.raw, r.code)
		}
		spent(r.what, res)
	}
	for left > 0 {
		res := c.do("POST", "/agp/query", agpUnknown("y"))
		if res.status != 400 {
			t.Fatalf("with %d requests left: %d %s", left, res.status, res.raw)
		}
		spent("an unknown business", res)
	}

	// Past the limit: every refusal is a 429 (still a failed
	// transaction, named in the answer), and Redis grows by one bounded
	// record each, whatever the input's size.
	before := txKeys(t, rdb)
	const n = 20
	for i := range n {
		res := c.do("POST", "/agp/query", agpUnknown(big))
		if res.status != http.StatusTooManyRequests || res.code() != "RATE_LIMITED" || res.transactionID() == "" || res.header.Get("Retry-After") == "" {
			t.Fatalf("refusal %d past the limit = %d %s, want 429 RATE_LIMITED naming its transaction", i, res.status, res.raw)
		}
	}
	for _, r := range []struct{ what, path, body string }{
		{"invalid input", "/agp/query", agpInvalid(big)},
		{"a valid query", "/agp/query", agpValidRead},
		{"discover of an unknown business", "/agp/discover", `{"businessId":"no-such-business"}`},
	} {
		if res := c.do("POST", r.path, r.body); res.status != http.StatusTooManyRequests || res.code() != "RATE_LIMITED" {
			t.Fatalf("%s past the limit = %d %.500s, want 429", r.what, res.status, res.raw)
		}
	}
	after := txKeys(t, rdb)
	var added, grown int64
	for k, size := range after {
		if _, old := before[k]; old {
			continue
		}
		added++
		grown += size
		if size > agpFailedRecordBytes {
			t.Errorf("record %s of a 429 takes %d bytes, want at most %d", k, size, agpFailedRecordBytes)
		}
	}
	t.Logf("%d answers past the limit added %d records, %d bytes", n+3, added, grown)
	if added != n+3 || grown > (n+3)*agpFailedRecordBytes {
		t.Fatalf("%d answers past the limit added %d records of %d bytes; want %d records of at most %d bytes each", n+3, added, grown, n+3, agpFailedRecordBytes)
	}
}
