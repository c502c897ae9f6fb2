package auditclient_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	"github.com/agtpsuite/agtp/auditsvc/internal/server"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/batchrpc"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/testkit"
)

const (
	methodUnary = auditv1.AuditService_SignAndAppend_FullMethodName
	methodBatch = auditv1.AuditService_SignAndAppendBatch_FullMethodName
)

// serveAudit runs a real auditsvc server on a real redis-server behind a
// gRPC server on loopback, with the gate's interceptor and one that counts
// calls by method.
func serveAudit(t *testing.T, gate *testkit.Gate) (auditv1.AuditServiceClient, func(method string) int) {
	t.Helper()
	rdb := testkit.StartRedis(t).Client(t)
	srv, err := server.New(rdb, slog.New(slog.DiscardHandler), server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	count := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		calls[info.FullMethod]++
		mu.Unlock()
		return h(ctx, req)
	})
	opts := []grpc.ServerOption{count}
	if gate != nil {
		opts = append(opts, gate.Interceptor())
	}
	conn := testkit.ServeGRPCWith(t, opts, func(g grpc.ServiceRegistrar) { auditv1.RegisterAuditServiceServer(g, srv) })
	return auditv1.NewAuditServiceClient(conn), func(m string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[m]
	}
}

func agentID(i int) string { return fmt.Sprintf("%064x", i+1) }

func appendReq(agent string) *auditv1.SignAndAppendRequest {
	return &auditv1.SignAndAppendRequest{ChainAgentId: agent,
		Claims: &auditv1.AttributionClaims{ServerId: "test", Status: 200, Method: "QUERY"}}
}

func TestALoneAppendGoesUnary(t *testing.T) {
	c, calls := serveAudit(t, nil)
	b := auditclient.NewBatching(c, batchrpc.Options{})
	a, err := auditclient.SignAndAppend(context.Background(), b, appendReq(agentID(0)))
	if err != nil || a.GetSequence() != 1 {
		t.Fatalf("SignAndAppend: %+v %v", a, err)
	}
	if st := b.Stats(); st.Unary != 1 || st.Batches != 0 {
		t.Errorf("stats %+v: want one unary call", st)
	}
	if calls(methodUnary) != 1 || calls(methodBatch) != 0 {
		t.Errorf("server saw %d SignAndAppend, %d SignAndAppendBatch; want 1, 0", calls(methodUnary), calls(methodBatch))
	}
}

// Concurrent appends to a few chains, most of them batched: every chain
// holds every record once, at sequences 1..n, and verifies.
func TestBatchedAppendsKeepEveryChain(t *testing.T) {
	c, calls := serveAudit(t, nil)
	b := auditclient.NewBatching(c, batchrpc.Options{MaxInFlight: 1})
	const agents, perAgent = 4, 60
	var wg sync.WaitGroup
	seqs := make([][]uint64, agents)
	errs := make(chan error, agents*perAgent)
	for a := range agents {
		seqs[a] = make([]uint64, perAgent)
		for i := range perAgent {
			wg.Go(func() {
				r, err := auditclient.SignAndAppend(context.Background(), b, appendReq(agentID(a)))
				if err != nil {
					errs <- err
					return
				}
				seqs[a][i] = r.GetSequence()
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("append: %v", err)
	}
	st := b.Stats()
	if st.Batches == 0 || calls(methodBatch) == 0 {
		t.Fatalf("stats %+v, %d batch calls: want some batches", st, calls(methodBatch))
	}
	if st.Unary+st.Batched != agents*perAgent {
		t.Errorf("stats %+v: want %d calls in all", st, agents*perAgent)
	}
	for a := range agents {
		seen := map[uint64]bool{}
		for _, s := range seqs[a] {
			if s < 1 || s > perAgent || seen[s] {
				t.Fatalf("agent %d: sequences %v: want each of 1..%d once", a, seqs[a], perAgent)
			}
			seen[s] = true
		}
		v, err := c.VerifyChain(context.Background(), &auditv1.VerifyChainRequest{AgentId: agentID(a)})
		if err != nil || !v.GetValid() || v.GetLength() != perAgent {
			t.Fatalf("agent %d: VerifyChain %+v %v: want a valid chain of %d", a, v, err, perAgent)
		}
	}
}

// Records of one chain in one batch are appended in item order, and a bad
// item fails alone with the status and reason SignAndAppend gives it.
func TestBatchItemsAreDecidedOneByOne(t *testing.T) {
	c, _ := serveAudit(t, nil)
	bad := appendReq(agentID(0))
	bad.Claims.Status = 42 // not a three-digit status
	items := []*auditv1.SignAndAppendRequest{appendReq(agentID(0)), bad, appendReq(agentID(0)), appendReq(agentID(1)), appendReq(agentID(0))}
	for i, it := range items {
		it.RequestId = fmt.Sprintf("req-%d", i)
	}
	_, wantErr := c.SignAndAppend(context.Background(), bad)
	out, err := c.SignAndAppendBatch(context.Background(), &auditv1.SignAndAppendBatchRequest{Items: items})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.GetResults()) != len(items) {
		t.Fatalf("%d results for %d items", len(out.GetResults()), len(items))
	}
	var got []uint64
	for i, r := range out.GetResults() {
		err := batchrpc.ItemError(r.GetResponse() != nil, r.GetError())
		if i == 1 {
			wc, wr, _, _ := grpcerr.Reason(wantErr)
			gc, gr, _, _ := grpcerr.Reason(err)
			if wc != codes.InvalidArgument || gc != wc || gr != wr {
				t.Fatalf("bad item: %v %s, want %v %s (as SignAndAppend answers it)", gc, gr, wc, wr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		if items[i].GetChainAgentId() == agentID(0) {
			got = append(got, r.GetResponse().GetSequence())
		}
	}
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Errorf("agent 0's records at sequences %v, want [1 2 3] in item order", got)
	}
	// The same batch again is answered from the request IDs: nothing new.
	again, err := c.SignAndAppendBatch(context.Background(), &auditv1.SignAndAppendBatchRequest{Items: items})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range again.GetResults() {
		if i != 1 && (!r.GetResponse().GetReplayed() || r.GetResponse().GetAuditId() != out.GetResults()[i].GetResponse().GetAuditId()) {
			t.Errorf("item %d resent: %+v, want the first record, replayed", i, r.GetResponse())
		}
	}
}

func TestBatchSizeIsBounded(t *testing.T) {
	c, _ := serveAudit(t, nil)
	for _, n := range []int{0, batchrpc.MaxItems + 1} {
		items := make([]*auditv1.SignAndAppendRequest, n)
		for i := range items {
			items[i] = appendReq(agentID(0))
		}
		_, err := c.SignAndAppendBatch(context.Background(), &auditv1.SignAndAppendBatchRequest{Items: items})
		if code, reason, _, _ := grpcerr.Reason(err); code != codes.InvalidArgument || reason == "" {
			t.Errorf("%d items: %v, want InvalidArgument with a reason", n, err)
		}
	}
}

// A caller that gives up while its record's batch is in flight gets its
// cancellation at once; the batch goes on, so the other caller's record is
// appended and answered, and so is the one whose caller left.
func TestACancelledCallerLosesNoOtherRecord(t *testing.T) {
	gate := testkit.NewGate()
	c, _ := serveAudit(t, gate)
	b := auditclient.NewBatching(c, batchrpc.Options{MaxInFlight: 1})
	t.Cleanup(func() { gate.Release(methodUnary); gate.Release(methodBatch) })
	ctx := context.Background()

	// The one slot is taken by a unary call held at the server.
	gate.Hold(methodUnary)
	first := make(chan error, 1)
	go func() { _, err := b.SignAndAppend(ctx, appendReq(agentID(0))); first <- err }()
	<-gate.Entered

	// Two more callers queue for the next batch.
	leaving, leave := context.WithCancel(ctx)
	type result struct {
		r   *auditv1.SignAndAppendResponse
		err error
	}
	a, other := make(chan result, 1), make(chan result, 1)
	go func() { r, err := b.SignAndAppend(leaving, appendReq(agentID(1))); a <- result{r, err} }()
	go func() { r, err := b.SignAndAppend(ctx, appendReq(agentID(2))); other <- result{r, err} }()
	testkit.WaitFor(t, 10*time.Second, "two calls queued", func() bool { return b.Stats().Waiting == 2 })

	// The slot frees; the batch goes out and is held at the server.
	gate.Hold(methodBatch)
	gate.Release(methodUnary)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-gate.Entered
	leave()
	if r := <-a; status.Code(r.err) != codes.Canceled {
		t.Fatalf("cancelled caller got %+v %v, want Canceled", r.r, r.err)
	}
	gate.Release(methodBatch)
	r := <-other
	if r.err != nil || r.r.GetSequence() != 1 {
		t.Fatalf("other caller: %+v %v, want its record", r.r, r.err)
	}
	for _, agent := range []string{agentID(1), agentID(2)} {
		head, err := c.GetChainHead(ctx, &auditv1.GetChainHeadRequest{AgentId: agent})
		if err != nil || head.GetLength() != 1 {
			t.Errorf("chain of %s: %+v %v, want its one record", agent[:8], head, err)
		}
	}
	if st := b.Stats(); st.Batches != 1 || st.Batched != 2 {
		t.Errorf("stats %+v: want one batch of two", st)
	}
}

// BenchmarkSignAndAppend appends from 64 goroutines over 8 chains, as the
// front door does under load, unary and through Batching, against a real
// auditsvc server and redis-server on loopback.
func BenchmarkSignAndAppend(b *testing.B) {
	for _, mode := range []string{"unary", "batching"} {
		b.Run(mode, func(b *testing.B) {
			c := benchAudit(b)
			if mode == "batching" {
				c = auditclient.NewBatching(c, batchrpc.Options{})
			}
			var n atomic.Uint64
			b.SetParallelism(64 / max(1, runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				agent := agentID(int(n.Add(1) % 8))
				for pb.Next() {
					if _, err := auditclient.SignAndAppend(context.Background(), c, appendReq(agent)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func benchAudit(b *testing.B) auditv1.AuditServiceClient {
	rdb := testkit.StartRedis(b).Client(b)
	srv, err := server.New(rdb, slog.New(slog.DiscardHandler), server.Options{})
	if err != nil {
		b.Fatal(err)
	}
	conn := testkit.ServeGRPC(b, func(g grpc.ServiceRegistrar) { auditv1.RegisterAuditServiceServer(g, srv) })
	return auditv1.NewAuditServiceClient(conn)
}
