package kit_test

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agtpsuite/agtp/services/access"
)

// goroutineID is the running goroutine's number, from its stack header
// ("goroutine 42 [running]:").
func goroutineID() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	buf = bytes.TrimPrefix(buf, []byte("goroutine "))
	id, _ := strconv.Atoi(string(buf[:bytes.IndexByte(buf, ' ')]))
	return id
}

// whoRecorder is a one-method service that records which goroutine ran
// each call.
type whoRecorder struct {
	mu  sync.Mutex
	ids map[int]bool
}

func (w *whoRecorder) who(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	in := new(healthpb.HealthCheckRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.ids[goroutineID()] = true
	w.mu.Unlock()
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// TestUnaryCallsRunOnWorkersWhileWatchStreamsAreOpen: callers keep watch
// streams open for hours, each holding a stream worker. Unary calls made
// meanwhile must still run on the long-lived workers (whose stacks have
// grown), not on a fresh goroutine each.
func TestUnaryCallsRunOnWorkersWhileWatchStreamsAreOpen(t *testing.T) {
	const (
		method = "/test.Workers/Who"
		calls  = 40
	)
	// More watch streams than processors: a worker per processor would
	// leave none for the calls, on any machine.
	watches := runtime.GOMAXPROCS(0) + 4
	rec := &whoRecorder{ids: map[int]bool{}}
	b := newBase(t, "catalogsvc")
	b.Server.GRPC().RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Workers",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Who", Handler: rec.who}},
	}, struct{}{})
	b.Server.Register("test.Workers", nil, access.Table{method: {AnyPeer: true}})
	runBase(t, b)

	conn := dialCatalogsvc(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range watches {
		stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil { // the stream is being served
			t.Fatal(err)
		}
	}
	for range calls {
		if err := conn.Invoke(ctx, method, &healthpb.HealthCheckRequest{}, new(healthpb.HealthCheckResponse)); err != nil {
			t.Fatal(err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// One call at a time always finds an idle worker, so the calls share
	// a few goroutines; a goroutine per call would give one ID each.
	if len(rec.ids) > calls/2 {
		t.Errorf("%d sequential calls ran on %d goroutines while %d watch streams were open; want them on the server's stream workers", calls, len(rec.ids), watches)
	}
}
