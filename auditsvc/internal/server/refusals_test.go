package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// An anonymous refusal is signed and stored nowhere; the refusals are
// counted into summary records on the server chain, and the summaries
// verify and account for every refusal.
func TestUnchainedRefusalsAreSignedCountedAndNotStored(t *testing.T) {
	keys := keySet(t, genKey(t))
	// No summary until the test asks for one, so that every key the
	// refusals could write is seen.
	e := start(t, Options{Keys: keys, RefusalSummaryInterval: time.Hour})
	pub := keys.PublicKeys()
	ctx := context.Background()
	stored := func() int { return countKeys(t, e.rdb, "*") }
	before := stored()
	sign := func(chainAgent string, status int, unchained bool) (*auditv1.SignAndAppendResponse, error) {
		return e.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{
			ChainAgentId: chainAgent, Unchained: unchained,
			Claims: &auditv1.AttributionClaims{ServerId: "test", Status: int64(status), Method: "QUERY"},
		})
	}
	for i := range 20 {
		status := 404
		if i%4 == 0 {
			status = 429
		}
		out, err := sign("", status, true)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := attribution.Verify(out.GetAttributionRecord(), attribution.VerifyOptions{Keys: pub})
		if err != nil || rec.AuditID != out.GetAuditId() || rec.Payload.PreviousAuditID != strings.Repeat("0", 64) || string(rec.Payload.Extra["unchained"]) != "true" {
			t.Fatalf("record %+v, %v", rec, err)
		}
	}
	if n := stored(); n != before {
		t.Fatalf("unchained records wrote %d keys", n-before)
	}
	for _, tc := range []struct {
		name   string
		agent  string
		status int
	}{
		{"on an agent's chain", strings.Repeat("a", 64), 404},
		{"for a success", "", 200},
	} {
		if _, err := sign(tc.agent, tc.status, true); status(err) != codes.InvalidArgument {
			t.Errorf("unchained %s: %v, want InvalidArgument", tc.name, err)
		}
	}

	e.srv.appendRefusalSummary(ctx)
	e.srv.appendRefusalSummary(ctx) // nothing new: no second record
	counts := map[string]int{}
	entries, err := e.rdb.XRange(ctx, rediskeys.SignedStream("", StreamRefusals), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		rec, err := attribution.Verify(en.Values["jws"].(string), attribution.VerifyOptions{Keys: pub})
		if err != nil || rec.Payload.EventType != "anonymous-refusals" {
			t.Fatalf("summary: %v %+v", err, rec)
		}
		var m map[string]int
		if err := json.Unmarshal(rec.Payload.Extra["refusals"], &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range m {
			counts[k] += v
		}
	}
	if len(entries) != 1 || counts["404"] != 15 || counts["429"] != 5 {
		t.Fatalf("%d summaries counted %v, want one with 15 404s and 5 429s", len(entries), counts)
	}
}
