package agp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

type inputSummary struct {
	SHA256    string `json:"sha256"`
	Size      int    `json:"size"`
	Prefix    string `json:"prefix"`
	Truncated bool   `json:"truncated"`
}

// TestFailedInput: a failed transaction's record keeps the SHA-256 and
// size of the input's canonical form (for a query or execute, the hash a
// confirmation token binds) and at most maxFailedInputPrefix bytes of it,
// cut at a character boundary.
func TestFailedInput(t *testing.T) {
	summary := func(in any) inputSummary {
		t.Helper()
		var s inputSummary
		if err := json.Unmarshal(failedInput(in), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	small := map[string]any{"businessId": "orders", "request": map[string]any{"path": "/orders/ord-1", "method": "QUERY", "parameters": map[string]any{}}}
	canon, _ := jcs.Marshal(small)
	sum := sha256.Sum256(canon)
	if s := summary(small); s.SHA256 != hex.EncodeToString(sum[:]) || s.Size != len(canon) || s.Prefix != string(canon) || s.Truncated {
		t.Fatalf("small input: %+v, want the whole canonical form %s", s, canon)
	}
	tg := &target{Business: "orders", Canonical: small["request"].(map[string]any)}
	if h, _ := tg.hash(); h != summary(small).SHA256 {
		t.Fatalf("the record's hash %s is not the request hash %s", summary(small).SHA256, h)
	}

	// Three-byte characters across the bound: the prefix ends before the
	// one that does not fit.
	big := map[string]any{"businessId": "orders", "request": map[string]any{"blob": "x" + strings.Repeat("€", 2000)}}
	canon, _ = jcs.Marshal(big)
	s := summary(big)
	if s.Size != len(canon) || !s.Truncated || len(s.Prefix) > maxFailedInputPrefix || len(s.Prefix) < maxFailedInputPrefix-3 ||
		!utf8.ValidString(s.Prefix) || !strings.HasPrefix(string(canon), s.Prefix) {
		t.Fatalf("large input: size %d truncated %v prefix of %d bytes (valid %v), want at most %d bytes of %d", s.Size, s.Truncated, len(s.Prefix), utf8.ValidString(s.Prefix), maxFailedInputPrefix, len(canon))
	}

	// What escapes most in the stored JSON: at most twice the prefix.
	for _, worst := range []string{`"\`, " "} {
		st, err := jsondoc.Struct(failedInput(map[string]any{"businessId": "orders", "request": map[string]any{"blob": strings.Repeat(worst, 1<<20)}}))
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := jsondoc.JSON(st); len(b) > 2*maxFailedInputPrefix+200 {
			t.Errorf("%q: the stored summary takes %d bytes, want at most %d", worst, len(b), 2*maxFailedInputPrefix+200)
		}
	}
}

// putRecorder is policysvc's AgpService as far as store uses it.
type putRecorder struct {
	agpv1.AgpServiceClient
	put *agpv1.Transaction
}

func (p *putRecorder) PutTransaction(_ context.Context, in *agpv1.PutTransactionRequest, _ ...grpc.CallOption) (*agpv1.PutTransactionResponse, error) {
	p.put = in.GetTransaction()
	return &agpv1.PutTransactionResponse{}, nil
}

// TestStoreBoundsFailedInput: a failed transaction (a refusal, a 429) is
// stored with its input's summary; a succeeded one with its input whole.
func TestStoreBoundsFailedInput(t *testing.T) {
	keys := &putRecorder{}
	c := &call{h: New(Options{Keys: keys}), r: httptest.NewRequest("POST", "/agp/query", nil)}
	input := map[string]any{"businessId": "orders", "request": map[string]any{"blob": strings.Repeat("x", 100<<10)}}
	for _, tc := range []struct {
		status  int
		body    string
		summary bool
	}{
		{400, `{"error":"Business not found","code":"BUSINESS_NOT_FOUND"}`, true},
		{429, `{"error":"Rate limit exceeded","code":"RATE_LIMITED"}`, true},
		{200, `{"transactionId":"x","status":"succeeded","data":{}}`, false},
	} {
		tx := c.newTransaction(OpQuery, "orders", input)
		c.store(tx, &pipeline.BoundOutcome{Response: agtp.NewResponse(tc.status, ContentType, []byte(tc.body)), AgentID: strings.Repeat("a", 64)})
		b, err := jsondoc.JSON(keys.put.GetInput())
		if err != nil {
			t.Fatal(err)
		}
		var s inputSummary
		_ = json.Unmarshal(b, &s)
		switch {
		case tc.summary && (s.SHA256 == "" || len(b) > maxFailedInputPrefix+200):
			t.Errorf("%d: stored input of %d bytes, want the summary", tc.status, len(b))
		case !tc.summary && (s.SHA256 != "" || len(b) < 100<<10):
			t.Errorf("%d: stored input of %d bytes, want the input whole", tc.status, len(b))
		}
	}
}
