package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/internal/archive"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
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

// A refusal summary whose append ran in Redis but whose reply was lost
// (the connection dropped) has an unknown outcome: the next summary sends
// the same request again, which the store answers with the record
// appended then, so the refusals are counted once and not put back into a
// second summary.
func TestRefusalSummaryWhoseReplyIsLostCountsOnce(t *testing.T) {
	ctx := context.Background()
	ks := keySet(t, genKey(t))
	rs := testkit.StartRedis(t)
	rdb := rs.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	var armed atomic.Bool
	rdb.AddHook(loseNextAppendReply{armed: &armed})
	s, err := New(rdb, nil, Options{Keys: ks, ServerID: "audit.test", RefusalSummaryInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	conn := testkit.ServeGRPC(t, func(g grpc.ServiceRegistrar) { auditv1.RegisterAuditServiceServer(g, s) })
	client := auditv1.NewAuditServiceClient(conn)
	// Warm up: the append script is loaded.
	if _, err := client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: strings.Repeat("ab", 32),
		ClaimsJson: claims(t, response(strings.Repeat("ab", 32), 0))}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{Unchained: true,
			Claims: &auditv1.AttributionClaims{Status: 404, Method: "QUERY"}}); err != nil {
			t.Fatal(err)
		}
	}
	armed.Store(true)
	s.appendRefusalSummary(ctx) // appended in Redis, answer lost
	if armed.Load() {
		t.Fatal("the summary's append never reached Redis")
	}
	s.appendRefusalSummary(ctx)
	entries, err := rdb.XRange(ctx, rediskeys.SignedStream("", StreamRefusals), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, en := range entries {
		rec, err := attribution.Verify(en.Values["jws"].(string), attribution.VerifyOptions{Keys: ks})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := json.Unmarshal(rec.Payload.Extra["total"], &n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if len(entries) != 1 || total != 10 {
		t.Fatalf("%d summaries count %d refusals, want one counting the 10 signed", len(entries), total)
	}
	if s.summary != nil {
		t.Fatal("the summary is still pending after its retry was answered")
	}
}

// loseNextAppendReply, once armed, runs the next pipeline that carries an
// append script and reports a broken connection for all of its commands.
type loseNextAppendReply struct{ armed *atomic.Bool }

func (loseNextAppendReply) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (loseNextAppendReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h loseNextAppendReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		evalsha := false
		for _, c := range cmds {
			if c.Name() == "evalsha" && c.Err() == nil {
				evalsha = true
			}
		}
		if evalsha && h.armed.CompareAndSwap(true, false) {
			err = errors.New("read: connection reset by peer")
			for _, c := range cmds {
				c.SetErr(err)
			}
		}
		return err
	}
}

// On shutdown Run appends one last refusal summary; the archive sink
// stops only after that, so the summary reaches the archive as well as
// Redis.
func TestShutdownRefusalSummaryReachesTheArchive(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ks := keySet(t, genKey(t))
	rs := testkit.StartRedis(t)
	rdb := rs.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	s, err := New(rdb, nil, Options{Keys: ks, ServerID: "audit.test", RefusalSummaryInterval: time.Hour,
		Archive: archive.Options{Dir: dir, Instance: "t", SyncInterval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	conn := testkit.ServeGRPC(t, func(g grpc.ServiceRegistrar) { auditv1.RegisterAuditServiceServer(g, s) })
	client := auditv1.NewAuditServiceClient(conn)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	for range 3 {
		if _, err := client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{Unchained: true,
			Claims: &auditv1.AttributionClaims{Status: 404, Method: "QUERY"}}); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n, err := rdb.XLen(ctx, rediskeys.SignedStream("", StreamRefusals)).Result()
	if err != nil || n != 1 {
		t.Fatalf("shutdown summary in Redis: %d records, %v", n, err)
	}
	var entries []attribution.Entry
	files, _ := filepath.Glob(filepath.Join(dir, "audit-*.jsonl"))
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		_ = attribution.ReadEntries(fh, func(e attribution.Entry) error { entries = append(entries, e); return nil })
		fh.Close()
	}
	if len(entries) != 1 || entries[0].Stream != StreamRefusals {
		t.Fatalf("archive holds %d entries after shutdown, want the shutdown summary (sink stats %+v)", len(entries), s.sink.Stats())
	}
	if st := s.sink.Stats(); st.Written != 1 || st.Dropped != 0 || st.Queued != 0 {
		t.Fatalf("sink stats %+v after shutdown, want the summary written", st)
	}
}
