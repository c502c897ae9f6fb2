package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// anonymousRefusals is how many anonymous 404s the test sends.
const anonymousRefusals = 100_000

// refusalMemoryBound is what they may add to Redis's used memory. One
// stored record each would be over 100 MB; the summaries are a few
// hundred bytes a minute.
const refusalMemoryBound = 4 << 20

// TestAnonymousRefusalsCannotFillRedis sends 100,000 anonymous requests
// for a path no endpoint serves. Each answer still carries a signed
// Attribution-Record (core §7), unchained and marked so; Redis grows by
// less than refusalMemoryBound and by a handful of keys, and the refusals
// are accounted for in the server chain's summary records.
func TestAnonymousRefusalsCannotFillRedis(t *testing.T) {
	c := Start(t, Options{Env: []string{"AGTP_AUDIT_REFUSAL_SUMMARY_INTERVAL=1s"}})
	keys := c.signingKeys(t)
	rdb := c.Redis.Client(t)
	ctx := context.Background()
	usedMemory := func() int64 {
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatal("no used_memory in INFO memory")
		return 0
	}
	// One refusal first, checked in full.
	first := c.roundTrip(t, request(t, "QUERY", "/no-such-thing/0"))
	if first.Status != agtp.StatusNotFound {
		t.Fatalf("QUERY /no-such-thing = %d %s", first.Status, first.Body)
	}
	rec, err := attribution.Verify(first.Header.Get(agtp.HeaderAttributionRecord), attribution.VerifyOptions{Keys: keys})
	if err != nil || rec.Payload.PreviousAuditID != strings.Repeat("0", 64) || string(rec.Payload.Extra["unchained"]) != "true" || rec.Payload.Status != 404 {
		t.Fatalf("the refusal's record: %v %+v; want a signed record of the 404 with previous_audit_id zeros and unchained: true", err, rec)
	}
	if rec.AuditID != first.Header.Get(agtp.HeaderAuditID) {
		t.Fatalf("Audit-ID %s, record %s", first.Header.Get(agtp.HeaderAuditID), rec.AuditID)
	}
	memBefore, keysBefore := usedMemory(), rdb.Keys(ctx, "*").Val()

	var sent, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	const conns = 16
	for w := range conns {
		wg.Go(func() {
			conn, err := tls.Dial("tcp", c.Procs["frontdoor"].AGTPAddr, agtp.ClientTLSConfig("localhost", c.Admin.Pool()))
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			br, bw := bufio.NewReader(conn), bufio.NewWriter(conn)
			for i := w; i < anonymousRefusals; i += conns {
				req, _ := agtp.NewRequest("QUERY", fmt.Sprintf("/no-such-thing/%d", i))
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				if err := req.Write(bw); err != nil {
					errs <- err
					return
				}
				if err := bw.Flush(); err != nil {
					errs <- err
					return
				}
				resp, err := agtp.ReadResponse(br, agtp.Limits{MaxBody: 1 << 20})
				if err != nil {
					errs <- err
					return
				}
				sent.Add(1)
				if (resp.Status == agtp.StatusNotFound || resp.Status == 429) && resp.Header.Get(agtp.HeaderAttributionRecord) != "" {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("after %d requests: %v", sent.Load(), err)
	}
	if refused.Load() != anonymousRefusals {
		t.Fatalf("%d of %d answers were refusals with a record", refused.Load(), anonymousRefusals)
	}
	grew := usedMemory() - memBefore
	var newKeys []string
	for _, k := range rdb.Keys(ctx, "*").Val() {
		if !slices.Contains(keysBefore, k) {
			newKeys = append(newKeys, k)
		}
	}
	// The new keys are the summaries' Audit-ID index entries, one a
	// second here: bounded by time, not by traffic.
	t.Logf("%d anonymous refusals: Redis used memory grew by %d bytes, %d new keys", anonymousRefusals, grew, len(newKeys))
	if grew > refusalMemoryBound || len(newKeys) > 120 {
		t.Fatalf("Redis grew by %d bytes and %d keys (%q) for %d anonymous refusals; the bound is %d bytes", grew, len(newKeys), newKeys, anonymousRefusals, refusalMemoryBound)
	}

	// The summaries account for every refusal.
	testkit.WaitFor(t, 15*time.Second, "the summaries to count every refusal", func() bool {
		entries, err := rdb.XRange(ctx, rediskeys.SignedStream("", "refusals"), "-", "+").Result()
		if err != nil {
			return false
		}
		var total int64
		for _, e := range entries {
			r, err := attribution.Verify(fmt.Sprint(e.Values["jws"]), attribution.VerifyOptions{Keys: keys})
			if err != nil || r.Payload.EventType != "anonymous-refusals" {
				t.Fatalf("summary %s: %v %+v", e.ID, err, r)
			}
			var n int64
			if err := json.Unmarshal(r.Payload.Extra["total"], &n); err != nil {
				t.Fatalf("summary %s total: %v", e.ID, err)
			}
			total += n
		}
		return total == anonymousRefusals+1
	})
}
