package transport

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/agtpsuite/agtp/services/agtp"
)

// ReasonBodyBudgetExhausted comes with 503 when the request bodies being
// read and served already hold Options.BodyBudget and none was freed
// within BusyWait.
const ReasonBodyBudgetExhausted = "body-budget-exhausted"

// bodyBudgetRetryAfter is the Retry-After of a 503 body-budget-exhausted,
// in seconds: bodies are read within BodyTimeout and served soon after,
// so budget comes back within moments, not minutes.
const bodyBudgetRetryAfter = "1"

// errBodyBudget is internal: a body's buffer could not grow within the
// budget.
var errBodyBudget = errors.New("transport: body budget exhausted")

// bodyBudget bounds the memory of request bodies across all connections
// (Options.BodyBudget). Bodies take from it as their buffers grow, which
// is as their bytes arrive, and give it back when their response has been
// built, so a peer that announces a body and sends nothing holds none.
type bodyBudget struct {
	sem   *semaphore.Weighted
	wait  time.Duration
	inUse atomic.Int64
}

func newBodyBudget(size int64, wait time.Duration) *bodyBudget {
	return &bodyBudget{sem: semaphore.NewWeighted(size), wait: wait}
}

// bodyGrant is what one request's body holds of the budget.
type bodyGrant struct {
	b    *bodyBudget
	ctx  context.Context
	held int64
}

func (b *bodyBudget) grant(ctx context.Context) *bodyGrant { return &bodyGrant{b: b, ctx: ctx} }

// grow is agtp.Head.ReadBody's grow: it takes n more bytes, waiting up to
// BusyWait for other bodies to give some back.
func (g *bodyGrant) grow(n int) error {
	if !g.b.sem.TryAcquire(int64(n)) {
		ctx, cancel := context.WithTimeout(g.ctx, g.b.wait)
		err := g.b.sem.Acquire(ctx, int64(n))
		cancel()
		if err != nil {
			return errBodyBudget
		}
	}
	g.held += int64(n)
	g.b.inUse.Add(int64(n))
	return nil
}

// release gives back everything the body took.
func (g *bodyGrant) release() {
	if g.held > 0 {
		g.b.inUse.Add(-g.held)
		g.b.sem.Release(g.held)
		g.held = 0
	}
}

// budgetExhausted is the answer to a request whose body did not get
// budget.
func (s *Server) budgetExhausted(ctx context.Context, info *ConnInfo, req *agtp.Request) *agtp.Response {
	s.stats.bodyBudget.Add(1)
	resp := s.errorResponse(ctx, info, req, &agtp.ProtocolError{
		Status: agtp.StatusUnavailable, Reason: ReasonBodyBudgetExhausted,
		Explanation:     "too much request body data is being received; retry later",
		CloseConnection: true,
	})
	resp.Header.Set("Retry-After", bodyBudgetRetryAfter)
	return resp
}
