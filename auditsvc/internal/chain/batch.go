package chain

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// appendOp is one compare-and-append (plus its index write) waiting to be
// sent. Ops of different chains travel together in one pipeline; ops of
// one chain never do, because the chain's head lock is held while its op
// is in flight.
type appendOp struct {
	ctx      context.Context
	garbage  string // index key to delete (a lost attempt's)
	indexKey string
	indexVal string
	keys     []string
	args     []any

	sent     bool
	evalVal  any
	evalErr  error
	indexErr error
	done     chan struct{}
}

// batcher sends queued ops in pipelines (group commit). There is no
// background goroutine: the first caller that finds fewer than maxFlushers
// pipelines in flight sends everything queued, and hands the job to a new
// goroutine once its own op is answered, so that no caller waits on
// strangers' traffic. At low load a batch is one op and adds no latency;
// under load one round trip and one pair of syscalls on each side carry
// many records, which is what makes thousands of signed appends per second
// cheap for Redis.
type batcher struct {
	rdb         redis.UniversalClient
	maxBatch    int
	maxFlushers int

	mu       sync.Mutex
	pending  []*appendOp
	flushers int
}

// do sends op (in some batch) and returns when it has been answered.
func (b *batcher) do(op *appendOp) {
	op.done = make(chan struct{})
	b.mu.Lock()
	b.pending = append(b.pending, op)
	if b.flushers < b.maxFlushers {
		b.flushers++
		b.mu.Unlock()
		b.flush(op)
	} else {
		b.mu.Unlock()
	}
	<-op.done
}

// flush sends batches until own is answered (own == nil: until the queue
// is empty), then hands any remaining queue to a new goroutine.
func (b *batcher) flush(own *appendOp) {
	for {
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.flushers--
			b.mu.Unlock()
			return
		}
		var batch []*appendOp
		if len(b.pending) <= b.maxBatch {
			batch, b.pending = b.pending, nil
		} else {
			batch = append([]*appendOp(nil), b.pending[:b.maxBatch]...)
			b.pending = append(b.pending[:0], b.pending[b.maxBatch:]...)
		}
		b.mu.Unlock()
		b.exec(batch)
		if own != nil && isClosed(own.done) {
			go b.flush(nil) // keeps this flusher's slot
			return
		}
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// exec sends one batch and answers its ops.
func (b *batcher) exec(batch []*appendOp) {
	live := batch[:0:0]
	for _, op := range batch {
		if err := op.ctx.Err(); err != nil {
			// Never sent: the outcome is known (not appended).
			op.evalErr = err
			close(op.done)
			continue
		}
		live = append(live, op)
	}
	if len(live) == 0 {
		return
	}
	for _, op := range live {
		op.sent = true
	}
	// The pipeline outlives any one caller's cancellation: once sent, an op
	// must be answered, or its caller could not tell whether it ran.
	ctx := context.Background()
	todo := live
	for reload := 0; len(todo) > 0; reload++ {
		type pair struct {
			set  *redis.StatusCmd
			eval *redis.Cmd
		}
		cmds := make([]pair, len(todo))
		_, _ = b.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for i, op := range todo {
				if op.garbage != "" {
					pl.Del(ctx, op.garbage)
				}
				cmds[i].set = pl.Set(ctx, op.indexKey, op.indexVal, 0)
				cmds[i].eval = appendScript.EvalSha(ctx, pl, op.keys, op.args...)
			}
			return nil
		})
		var again []*appendOp
		for i, op := range todo {
			op.indexErr = cmds[i].set.Err()
			op.evalVal, op.evalErr = cmds[i].eval.Val(), cmds[i].eval.Err()
			if isNoScript(op.evalErr) && reload < 2 {
				again = append(again, op)
				continue
			}
			close(op.done)
		}
		if len(again) > 0 {
			// NOSCRIPT: the script cache was flushed (restart, failover);
			// nothing ran, so loading and re-sending is safe.
			if err := appendScript.Load(ctx, b.rdb).Err(); err != nil {
				for _, op := range again {
					op.evalErr = fmt.Errorf("load script: %w", err)
					close(op.done)
				}
				return
			}
		}
		todo = again
	}
}
