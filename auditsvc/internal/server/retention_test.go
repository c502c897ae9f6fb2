package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/internal/archive"
	"github.com/agtpsuite/agtp/auditsvc/internal/chain"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

type retentionFixture struct {
	*fixture
	clock *testkit.Clock
	dir   string
	ks    *attribution.KeySet
}

func startRetention(t *testing.T) retentionFixture {
	t.Helper()
	clock := testkit.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	dir := t.TempDir()
	ks := keySet(t, genKey(t))
	f := start(t, Options{Keys: ks, Archive: archive.Options{Dir: dir, Instance: "t"},
		Retention: time.Hour, RetentionInterval: time.Hour, Now: clock.Now, Chain: chain.Options{Now: clock.Now}})
	return retentionFixture{fixture: f, clock: clock, dir: dir, ks: ks}
}

// movedEntries reads every moved-records archive file.
func movedEntries(t *testing.T, dir string) (files []string, es []attribution.Entry) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "audit-moved-*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		err = attribution.ReadEntries(fh, func(e attribution.Entry) error { es = append(es, e); return nil })
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return files, es
}

func streamSeqs(t *testing.T, f retentionFixture, key string) []string {
	t.Helper()
	msgs, err := f.rdb.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		out = append(out, m.ID)
	}
	return out
}

func TestRetentionMovesOldRecordsAndTrimmedChainsVerify(t *testing.T) {
	ctx := context.Background()
	f := startRetention(t)
	agent := strings.Repeat("cd", 32)
	var ids []string
	appendN := func(n int) {
		for range n {
			r, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: agent, ClaimsJson: claims(t, response(agent, len(ids)))})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.GetAuditId())
		}
	}
	lifecycle := func() {
		if _, err := f.client.AppendLifecycleEvent(ctx, &auditv1.AppendLifecycleEventRequest{AgentId: agent, EventType: "updated",
			Claims: string(claims(t, map[string]any{}))}); err != nil {
			t.Fatal(err)
		}
	}
	signed := func() {
		if _, err := f.client.AppendSignedRecord(ctx, &auditv1.AppendSignedRecordRequest{AgentId: agent, Stream: "confirm",
			Claims: string(claims(t, map[string]any{}))}); err != nil {
			t.Fatal(err)
		}
	}
	appendN(5)
	lifecycle()
	lifecycle()
	signed()
	signed() // the newest record of a stream always stays
	f.clock.Advance(2 * time.Hour)
	appendN(3)
	lifecycle()
	f.clock.Advance(time.Minute)

	st, err := f.srv.Retain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Chains != 3 || st.Trimmed != 3 || st.Moved != 5+2+1 || st.Failed != 0 {
		t.Fatalf("first run: %+v", st)
	}
	want := map[string][]string{
		rediskeys.ChainStream(agent):             {"6-0", "7-0", "8-0"},
		rediskeys.LifecycleStream(agent):         {"3-0"},
		rediskeys.SignedStream(agent, "confirm"): {"2-0"},
	}
	for key, seqs := range want {
		if got := streamSeqs(t, f, key); !slices.Equal(got, seqs) {
			t.Fatalf("%s holds %v, want %v", key, got, seqs)
		}
	}
	files, moved := movedEntries(t, f.dir)
	if len(moved) != 8 {
		t.Fatalf("moved archive holds %d entries, want 8", len(moved))
	}
	opts := attribution.ChainOptions{VerifyOptions: attribution.VerifyOptions{Keys: f.ks}}
	results := attribution.VerifyEntries(moved, opts, true)
	if len(results) != 3 {
		t.Fatalf("moved chains: %v", results)
	}
	for k, r := range results {
		if !r.Valid {
			t.Fatalf("moved records of %v do not verify: %+v", k, r.Break)
		}
	}
	if r := results[attribution.ChainKey{Stream: attribution.StreamAttribution, Chain: agent}]; r.Checked != 5 || r.Head != ids[4] {
		t.Fatalf("moved attribution records: %+v", r)
	}

	cp, err := f.srv.Store().Checkpoint(ctx, attribution.StreamAttribution, agent, opts.VerifyOptions)
	if err != nil || cp == nil {
		t.Fatalf("checkpoint: %v %v", cp, err)
	}
	if cp.Sequence != 5 || cp.AuditID != ids[4] || cp.Stream != attribution.StreamAttribution || cp.Chain != agent {
		t.Fatalf("checkpoint %+v", cp)
	}
	for _, c := range []struct {
		stream string
		length uint64
	}{{"", 8}, {attribution.StreamLifecycle, 3}, {"confirm", 2}} {
		v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent, Stream: c.stream})
		if err != nil {
			t.Fatal(err)
		}
		if !v.GetValid() || v.GetLength() != c.length {
			t.Fatalf("VerifyChain %q of the trimmed chain: %+v", c.stream, v)
		}
	}
	// A moved record is found in the archive, not in Redis.
	if _, err := f.client.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: ids[0]}); err == nil {
		t.Fatal("GetRecord found a moved record")
	}
	// The chain goes on after the checkpoint.
	appendN(1)
	if v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent}); err != nil || !v.GetValid() || v.GetLength() != 9 {
		t.Fatalf("VerifyChain after an append: %+v %v", v, err)
	}

	// A second run changes nothing.
	cpBefore := f.rdb.HGetAll(ctx, rediskeys.ChainCheckpoint(agent)).Val()
	st, err = f.srv.Retain(ctx)
	if err != nil || st.Moved != 0 || st.Trimmed != 0 || st.Failed != 0 {
		t.Fatalf("second run: %+v %v", st, err)
	}
	files2, moved2 := movedEntries(t, f.dir)
	if !slices.Equal(files, files2) || len(moved2) != len(moved) {
		t.Fatalf("second run wrote to the archive: %v -> %v", files, files2)
	}
	if got := streamSeqs(t, f, rediskeys.ChainStream(agent)); !slices.Equal(got, []string{"6-0", "7-0", "8-0", "9-0"}) {
		t.Fatalf("second run changed the stream: %v", got)
	}
	if after := f.rdb.HGetAll(ctx, rediskeys.ChainCheckpoint(agent)).Val(); after["jws"] != cpBefore["jws"] {
		t.Fatal("second run changed the checkpoint")
	}

	// A tampered checkpoint fails verification.
	tampered := strings.Replace(cp.JWS, `.`, `.e`, 1)
	f.rdb.HSet(ctx, rediskeys.ChainCheckpoint(agent), rediskeys.CheckpointJWS, tampered)
	v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent})
	if err != nil {
		t.Fatal(err)
	}
	if v.GetValid() || !strings.HasPrefix(v.GetProblem(), attribution.ProblemCheckpoint) {
		t.Fatalf("VerifyChain with a tampered checkpoint: %+v", v)
	}
	// So does a checkpoint signed by another key.
	other := attribution.NewSigner(genKey(t))
	body := `{"checkpoint_version":"1","stream":"attribution","chain":"` + agent + `","last_sequence":5,"last_audit_id":"` + ids[4] + `","trimmed_at":"x"}`
	f.rdb.HSet(ctx, rediskeys.ChainCheckpoint(agent), rediskeys.CheckpointJWS, other.Sign([]byte(body)))
	if v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent}); err != nil || v.GetValid() {
		t.Fatalf("VerifyChain with a foreign checkpoint: %+v %v", v, err)
	}
	// And the retention task leaves such a chain alone.
	f.clock.Advance(3 * time.Hour)
	if st, err := f.srv.Retain(ctx); err != nil || st.Failed != 1 {
		t.Fatalf("run with a bad checkpoint: %+v %v", st, err)
	}
	if got := streamSeqs(t, f, rediskeys.ChainStream(agent)); len(got) != 4 {
		t.Fatalf("a chain with a bad checkpoint was trimmed: %v", got)
	}
}

func TestRetentionFailedArchiveMovesNothingAndRepeats(t *testing.T) {
	ctx := context.Background()
	f := startRetention(t)
	agent := strings.Repeat("ef", 32)
	for i := range 4 {
		if _, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: agent, ClaimsJson: claims(t, response(agent, i))}); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Advance(2 * time.Hour)
	opts := f.srv.chainOptions(attribution.StreamAttribution, agent)
	cutoff := f.clock.Now().Add(-time.Hour)
	_, err := f.srv.Store().Trim(ctx, attribution.StreamAttribution, agent, cutoff, opts,
		func([]attribution.Entry) error { return errors.New("disk full") })
	if err == nil {
		t.Fatal("Trim with a failing archive succeeded")
	}
	if got := streamSeqs(t, f, rediskeys.ChainStream(agent)); len(got) != 4 {
		t.Fatalf("a failed archive write trimmed the stream: %v", got)
	}
	if n := f.rdb.Exists(ctx, rediskeys.ChainCheckpoint(agent)).Val(); n != 0 {
		t.Fatal("a failed archive write left a checkpoint")
	}
	var archived []attribution.Entry
	res, err := f.srv.Store().Trim(ctx, attribution.StreamAttribution, agent, cutoff, opts,
		func(es []attribution.Entry) error { archived = append(archived, es...); return nil })
	if err != nil || res.Moved != 3 || len(archived) != 3 || res.Checkpoint == nil || res.Checkpoint.Sequence != 3 {
		t.Fatalf("Trim after the failure: %+v %v (archived %d)", res, err, len(archived))
	}
	if v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent}); err != nil || !v.GetValid() || v.GetLength() != 4 {
		t.Fatalf("VerifyChain: %+v %v", v, err)
	}
}

func TestRetentionNeedsArchive(t *testing.T) {
	if err := (Options{Retention: time.Hour}).Validate(); err == nil {
		t.Fatal("Retention without an archive validated")
	}
	if err := (Options{Retention: time.Hour, Archive: archive.Options{Dir: t.TempDir()}}).Validate(); err != nil {
		t.Fatal(err)
	}
}
