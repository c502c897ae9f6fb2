package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

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

// Records are signed with the key that signs checkpoints and carry members
// their callers choose; none of them is taken for a checkpoint. Someone
// who can write to Redis and puts a record in the checkpoint's place,
// deleting the oldest records without archiving them, leaves a chain that
// fails verification, and the retention task does not sign such a
// "checkpoint" again.
func TestSignedRecordIsRefusedAsTheChainCheckpoint(t *testing.T) {
	ctx := context.Background()
	f := startRetention(t)
	agent := strings.Repeat("9a", 32)
	var ids []string
	for i := range 5 {
		r, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: agent, ClaimsJson: claims(t, response(agent, i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetAuditId())
	}
	members := map[string]any{"checkpoint_version": "1", "stream": "attribution", "chain": agent,
		"last_sequence": 3, "last_audit_id": ids[2], "trimmed_at": "x"}
	// No record carries a checkpoint's member.
	_, err := f.client.AppendSignedRecord(ctx, &auditv1.AppendSignedRecordRequest{AgentId: agent, Stream: "confirm",
		Claims: string(claims(t, members))})
	wantReason(t, err, codes.InvalidArgument, "audit-claims-invalid")
	// A record with every other checkpoint member, signed through an
	// ordinary append (the agent's confirm stream).
	delete(members, "checkpoint_version")
	rec, err := f.client.AppendSignedRecord(ctx, &auditv1.AppendSignedRecordRequest{AgentId: agent, Stream: "confirm",
		Claims: string(claims(t, members))})
	if err != nil {
		t.Fatal(err)
	}
	// And one with checkpoint_version too, as an earlier release signed
	// such claims: a chained record, with the members the store writes.
	members["checkpoint_version"] = "1"
	p := attribution.Payload{ServerID: "audit.test", Timestamp: "2026-01-02T03:04:05Z", AgentID: agent,
		PreviousAuditID: attribution.ZeroAuditID, AuditRecordVersion: attribution.RecordVersion, Extra: map[string]json.RawMessage{}}
	for k, v := range members {
		p.Extra[k], _ = json.Marshal(v)
	}
	earlier, _, err := f.srv.Store().Signer().SignPayload(&p)
	if err != nil {
		t.Fatal(err)
	}

	// Records 1 to 3 are deleted from Redis without ever being archived.
	f.rdb.XTrimMinID(ctx, rediskeys.ChainStream(agent), "4-0")
	for name, jws := range map[string]string{"an appended record": rec.GetJws(), "an earlier release's record": earlier} {
		f.rdb.HSet(ctx, rediskeys.ChainCheckpoint(agent), rediskeys.CheckpointJWS, jws, rediskeys.CheckpointSequence, "3")
		v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent})
		if err != nil {
			t.Fatal(err)
		}
		if v.GetValid() || !strings.HasPrefix(v.GetProblem(), attribution.ProblemCheckpoint) {
			t.Fatalf("VerifyChain with %s as the checkpoint (records 1-3 deleted unarchived): %+v, want %s", name, v, attribution.ProblemCheckpoint)
		}
		if st, err := f.srv.Retain(ctx); err != nil || st.Failed != 1 {
			t.Fatalf("retention with %s as the checkpoint: %+v %v, want the chain failed", name, st, err)
		}
		if got := f.rdb.HGet(ctx, rediskeys.ChainCheckpoint(agent), rediskeys.CheckpointJWS).Val(); got != jws {
			t.Fatalf("retention signed %s again as a checkpoint", name)
		}
	}
}

// A checkpoint an earlier release signed without typ does not verify
// until the next retention pass signs it again, with the same members;
// the chain then verifies as before.
func TestRetentionSignsAnEarlierReleasesCheckpointAgain(t *testing.T) {
	ctx := context.Background()
	f := startRetention(t)
	agent := strings.Repeat("5b", 32)
	for i := range 4 {
		if _, err := f.client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: agent, ClaimsJson: claims(t, response(agent, i))}); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Advance(2 * time.Hour)
	if st, err := f.srv.Retain(ctx); err != nil || st.Moved != 3 {
		t.Fatalf("retention: %+v %v", st, err)
	}
	vopts := attribution.VerifyOptions{Keys: f.ks}
	cp, err := f.srv.Store().Checkpoint(ctx, attribution.StreamAttribution, agent, vopts)
	if err != nil || cp == nil {
		t.Fatalf("checkpoint: %v %v", cp, err)
	}
	// The checkpoint as an earlier release signed it: the same payload,
	// no typ.
	body, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	untyped := f.srv.Store().Signer().Sign(body)
	f.rdb.HSet(ctx, rediskeys.ChainCheckpoint(agent), rediskeys.CheckpointJWS, untyped)
	v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent})
	if err != nil || v.GetValid() || !strings.Contains(v.GetProblem(), attribution.ErrUntypedCheckpoint.Error()) {
		t.Fatalf("VerifyChain with an untyped checkpoint: %+v %v", v, err)
	}
	if st, err := f.srv.Retain(ctx); err != nil || st.Failed != 0 || st.Moved != 0 {
		t.Fatalf("retention with an untyped checkpoint: %+v %v", st, err)
	}
	again, err := f.srv.Store().Checkpoint(ctx, attribution.StreamAttribution, agent, vopts)
	if err != nil || again == nil || again.JWS == untyped {
		t.Fatalf("checkpoint after retention: %+v %v", again, err)
	}
	if again.Sequence != cp.Sequence || again.AuditID != cp.AuditID || again.TrimmedAt != cp.TrimmedAt {
		t.Fatalf("checkpoint signed again as %+v, was %+v", again, cp)
	}
	if v, err := f.client.VerifyChain(ctx, &auditv1.VerifyChainRequest{AgentId: agent}); err != nil || !v.GetValid() || v.GetLength() != 4 {
		t.Fatalf("VerifyChain after retention: %+v %v", v, err)
	}
}
