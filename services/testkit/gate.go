package testkit

import (
	"context"
	"sync"

	"google.golang.org/grpc"
)

// Gate holds calls of chosen methods at the server until the test lets
// them through: a real server whose answer is slow exactly when a test
// needs it (a batch in flight while its caller gives up, say).
type Gate struct {
	mu      sync.Mutex
	held    map[string]chan struct{}
	Entered chan string // receives a method each time a held call arrives
}

// NewGate is a Gate that holds nothing yet.
func NewGate() *Gate {
	return &Gate{held: map[string]chan struct{}{}, Entered: make(chan string, 64)}
}

// Hold makes calls of the full method name wait until Release.
func (g *Gate) Hold(method string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held[method] = make(chan struct{})
}

// Release lets the held calls of method, and later ones, through.
func (g *Gate) Release(method string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.held[method]; c != nil {
		close(c)
		delete(g.held, method)
	}
}

// Interceptor is the server option that applies the gate.
func (g *Gate) Interceptor() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		g.mu.Lock()
		c := g.held[info.FullMethod]
		g.mu.Unlock()
		if c != nil {
			g.Entered <- info.FullMethod
			<-c
		}
		return h(ctx, req)
	})
}
