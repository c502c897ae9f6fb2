package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/internal/archive"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// exportFixture is a Server on a real redis-server behind real gRPC, its
// records' clock moved by hand.
type exportFixture struct {
	srv    *Server
	client auditv1.AuditServiceClient
	clock  *testkit.Clock
	ks     *attribution.KeySet
}

func startExport(t testing.TB, opts Options) exportFixture {
	t.Helper()
	rds := testkit.StartRedis(t)
	clock := testkit.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ks := keySet(t, genKey(t))
	opts.Keys, opts.Now, opts.Chain.Now = ks, clock.Now, clock.Now
	s, err := New(rds.Client(t), nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	conn := testkit.ServeGRPC(t, func(g grpc.ServiceRegistrar) { auditv1.RegisterAuditServiceServer(g, s) })
	return exportFixture{srv: s, client: auditv1.NewAuditServiceClient(conn), clock: clock, ks: ks}
}

// appendRecords appends n records to agent's chain through the store and
// returns their Audit-IDs.
func (f exportFixture) appendRecords(t testing.TB, agent string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := range n {
		a, err := f.srv.store.Append(context.Background(), attribution.StreamAttribution, agent, attribution.Payload{
			ServerID: "audit.test", Status: 200, Method: "QUERY", AgentID: agent, RequestID: fmt.Sprint("req-", i),
			RequestHash: strings.Repeat("a", 64)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.AuditID)
	}
	return ids
}

// export reads a whole export: its start and every batch.
func export(t testing.TB, c auditv1.AuditServiceClient, req *auditv1.ExportChainRequest) (*auditv1.ExportChainStart, [][]*auditv1.ExportedRecord, error) {
	t.Helper()
	st, err := c.ExportChain(context.Background(), req)
	if err != nil {
		return nil, nil, err
	}
	var start *auditv1.ExportChainStart
	var batches [][]*auditv1.ExportedRecord
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return start, batches, nil
		}
		if err != nil {
			return nil, nil, err
		}
		if start == nil {
			if m.GetStart() == nil || len(m.GetRecords()) != 0 {
				t.Fatalf("first message %v: want the start alone", m)
			}
			start = m.GetStart()
			continue
		}
		if m.GetStart() != nil || len(m.GetRecords()) == 0 {
			t.Fatalf("later message %v: want records only", m)
		}
		batches = append(batches, m.GetRecords())
	}
}

// sequences flattens batches to their sequence numbers, checking each
// record against ids (ids[i] is sequence i+1).
func sequences(t testing.TB, batches [][]*auditv1.ExportedRecord, ids []string) []uint64 {
	t.Helper()
	var out []uint64
	for _, b := range batches {
		for _, r := range b {
			if r.GetAuditId() != ids[r.GetSequence()-1] || attribution.AuditID(r.GetJws()) != r.GetAuditId() ||
				r.GetStreamId() != fmt.Sprint(r.GetSequence(), "-0") || r.GetStoredAt() == nil {
				t.Fatalf("record %d: %v", r.GetSequence(), r)
			}
			out = append(out, r.GetSequence())
		}
	}
	return out
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func TestExportChainStreamsRecordsInOrder(t *testing.T) {
	f := startExport(t, Options{})
	agent := strings.Repeat("e1", 32)
	// Three hours of records, 300 an hour: more than one batch each.
	var ids []string
	for range 3 {
		ids = append(ids, f.appendRecords(t, agent, 300)...)
		f.clock.Advance(time.Hour)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name        string
		req         *auditv1.ExportChainRequest
		want        []uint64
		wantBatches int
	}{
		{"whole chain in default batches", &auditv1.ExportChainRequest{}, seqRange(1, 900), 4},
		{"sequence range", &auditv1.ExportChainRequest{FromSequence: 100, ToSequence: 450, BatchSize: 100}, seqRange(100, 450), 4},
		{"resume from a sequence", &auditv1.ExportChainRequest{FromSequence: 801, BatchSize: 1000}, seqRange(801, 900), 1},
		{"batch size capped", &auditv1.ExportChainRequest{BatchSize: 5000}, seqRange(1, 900), 1},
		{"time range", &auditv1.ExportChainRequest{Since: timestamppb.New(t0.Add(time.Hour)), Until: timestamppb.New(t0.Add(2 * time.Hour))},
			seqRange(301, 600), 2},
		{"time and sequence range", &auditv1.ExportChainRequest{FromSequence: 500, Since: timestamppb.New(t0.Add(2 * time.Hour))},
			seqRange(601, 900), 2},
		{"past the head", &auditv1.ExportChainRequest{FromSequence: 901}, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.AgentId = agent
			start, batches, err := export(t, f.client, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if start.GetLength() != 900 || start.GetHeadAuditId() != ids[899] || start.GetFirstRetainedSequence() != 1 ||
				start.GetCheckpoint() != nil || start.GetStream() != attribution.StreamAttribution {
				t.Fatalf("start %v", start)
			}
			got := sequences(t, batches, ids)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || len(batches) != tc.wantBatches {
				t.Fatalf("got %d records in %d batches (%v...), want %d in %d", len(got), len(batches), got[:min(len(got), 3)], len(tc.want), tc.wantBatches)
			}
		})
	}

	t.Run("resume after a broken stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := f.client.ExportChain(ctx, &auditv1.ExportChainRequest{AgentId: agent, BatchSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for range 3 { // the start and two batches
			m, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, sequences(t, [][]*auditv1.ExportedRecord{m.GetRecords()}, ids)...)
		}
		cancel()
		_, rest, err := export(t, f.client, &auditv1.ExportChainRequest{AgentId: agent, FromSequence: got[len(got)-1] + 1})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, sequences(t, rest, ids)...)
		if fmt.Sprint(got) != fmt.Sprint(seqRange(1, 900)) {
			t.Fatalf("resumed export has %d records", len(got))
		}
	})
}

func TestExportChainRefusesBadRequests(t *testing.T) {
	f := startExport(t, Options{})
	agent := strings.Repeat("e2", 32)
	f.appendRecords(t, agent, 2)
	t0 := timestamppb.New(time.Unix(1000, 0))
	tests := []struct {
		name   string
		req    *auditv1.ExportChainRequest
		code   codes.Code
		reason string
	}{
		{"negative batch", &auditv1.ExportChainRequest{AgentId: agent, BatchSize: -1}, codes.InvalidArgument, "batch-size-invalid"},
		{"range backwards", &auditv1.ExportChainRequest{AgentId: agent, FromSequence: 5, ToSequence: 2}, codes.InvalidArgument, "sequence-range-invalid"},
		{"empty time range", &auditv1.ExportChainRequest{AgentId: agent, Since: t0, Until: t0}, codes.InvalidArgument, "time-range-invalid"},
		{"bad timestamp", &auditv1.ExportChainRequest{AgentId: agent, Since: &timestamppb.Timestamp{Nanos: -1}}, codes.InvalidArgument, "time-range-invalid"},
		{"bad stream", &auditv1.ExportChainRequest{AgentId: agent, Stream: "No Such"}, codes.InvalidArgument, "stream-invalid"},
		{"bad agent", &auditv1.ExportChainRequest{AgentId: "a b"}, codes.InvalidArgument, "agent-id-invalid"},
		{"unknown chain", &auditv1.ExportChainRequest{AgentId: strings.Repeat("e3", 32)}, codes.NotFound, "chain-not-found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := export(t, f.client, tc.req)
			wantReason(t, err, tc.code, tc.reason)
		})
	}
}

func TestExportChainStartsAtTheCheckpointAfterRetention(t *testing.T) {
	f := startExport(t, Options{Archive: archive.Options{Dir: t.TempDir(), Instance: "t"}, Retention: time.Hour, RetentionInterval: time.Hour})
	ctx := context.Background()
	agent := strings.Repeat("e4", 32)
	ids := f.appendRecords(t, agent, 600)
	f.clock.Advance(2 * time.Hour)
	ids = append(ids, f.appendRecords(t, agent, 300)...)
	if st, err := f.srv.Retain(ctx); err != nil || st.Moved != 600 {
		t.Fatalf("retention: %+v %v", st, err)
	}

	for _, from := range []uint64{0, 2, 601} {
		t.Run(fmt.Sprint("from ", from), func(t *testing.T) {
			start, batches, err := export(t, f.client, &auditv1.ExportChainRequest{AgentId: agent, FromSequence: from})
			if err != nil {
				t.Fatal(err)
			}
			cp := start.GetCheckpoint()
			if start.GetFirstRetainedSequence() != 601 || cp.GetLastSequence() != 600 || cp.GetLastAuditId() != ids[599] {
				t.Fatalf("start %v", start)
			}
			// The checkpoint verifies against the JWKS, and the retained
			// records continue the chain from it.
			signed, err := attribution.VerifyCheckpoint(cp.GetJws(), attribution.StreamAttribution, agent, attribution.VerifyOptions{Keys: f.ks})
			if err != nil || signed.Sequence != 600 || signed.AuditID != ids[599] {
				t.Fatalf("checkpoint %+v: %v", signed, err)
			}
			got := sequences(t, batches, ids)
			if fmt.Sprint(got) != fmt.Sprint(seqRange(601, 900)) {
				t.Fatalf("exported %d records from %d", len(got), got[0])
			}
			v := attribution.NewChainVerifier(attribution.ChainOptions{VerifyOptions: attribution.VerifyOptions{Keys: f.ks}, AgentID: agent, Start: signed.AuditID})
			for _, b := range batches {
				for _, r := range b {
					if _, err := v.Add(r.GetJws(), r.GetAuditId()); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkExportVerify streams a chain over gRPC from a real Redis and
// verifies every record as the CLI does (hash, EdDSA signature, link,
// sequence): each message's signatures on one worker per CPU, then the
// links in order; records/s is the rate `agtp audit verify --grpc` can
// reach.
func BenchmarkExportVerify(b *testing.B) {
	const n = 20000
	f := startExport(b, Options{})
	agent := strings.Repeat("e5", 32)
	f.appendRecords(b, agent, n)
	opts := attribution.ChainOptions{VerifyOptions: attribution.VerifyOptions{Keys: f.ks.PublicKeys()}, AgentID: agent}
	b.ResetTimer()
	for b.Loop() {
		st, err := f.client.ExportChain(context.Background(), &auditv1.ExportChainRequest{AgentId: agent})
		if err != nil {
			b.Fatal(err)
		}
		v := attribution.NewChainVerifier(opts)
		next := uint64(1)
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			jws, claimed := make([]string, len(m.GetRecords())), make([]string, len(m.GetRecords()))
			for i, r := range m.GetRecords() {
				jws[i], claimed[i] = r.GetJws(), r.GetAuditId()
			}
			checks := attribution.CheckParallel(jws, claimed, opts.VerifyOptions, runtime.GOMAXPROCS(0))
			for i, r := range m.GetRecords() {
				if r.GetSequence() != next {
					b.Fatalf("sequence %d, want %d", r.GetSequence(), next)
				}
				if _, err := v.AddChecked(checks[i]); err != nil {
					b.Fatal(err)
				}
				next++
			}
		}
		if next != n+1 {
			b.Fatalf("verified %d records", next-1)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
