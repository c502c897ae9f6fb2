package chain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
	// replErr is set, when replicas must acknowledge, if the WAIT that
	// followed the op's script on its connection failed or counted fewer
	// replicas: what the script wrote may be on the primary only.
	replErr error
	done    chan struct{}

	// Routing of the current send (execCluster): whether the index SET
	// and the garbage DEL go in the script's pipeline, and where a
	// redirect (MOVED, or ASK when asking) sent the script.
	indexHere, garbageHere bool
	redirect               string
	asking                 bool
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
	// acks > 0: every pipeline ends with WAIT acks replTimeout on the
	// connection that ran its scripts (Options.ReplicaAcks).
	acks        int
	replTimeout time.Duration
	// observe, if set, is told each pipeline's size and round trip.
	observe func(records int, took time.Duration)

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
	if b.observe != nil {
		start := time.Now()
		defer func() { b.observe(len(live), time.Since(start)) }()
	}
	// The pipeline outlives any one caller's cancellation: once sent, an op
	// must be answered, or its caller could not tell whether it ran.
	ctx := context.Background()
	if cc, ok := b.rdb.(*redis.ClusterClient); ok && b.acks > 0 {
		b.execCluster(ctx, cc, live)
		return
	}
	// One pipeline: on a single node (or a Sentinel-managed primary) it is
	// one connection, so its WAIT covers its scripts; without WAIT, a
	// cluster pipeline routes every command by its own key.
	todo := live
	for reload := 0; len(todo) > 0; reload++ {
		for _, op := range todo {
			op.indexHere, op.garbageHere = true, true
		}
		cmds, replErr := b.send(ctx, b.rdb, todo, false)
		var again []*appendOp
		for i, op := range todo {
			op.indexErr = cmds[i].set.Err()
			op.evalVal, op.evalErr = cmds[i].eval.Val(), cmds[i].eval.Err()
			if isNoScript(op.evalErr) && reload < 2 {
				again = append(again, op)
				continue
			}
			op.replErr = replErr
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

// pipeliner is a client that can send a pipeline.
type pipeliner interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// sentOp is one op's commands in a pipeline.
type sentOp struct {
	set  *redis.StatusCmd // nil when the index entry went elsewhere
	eval *redis.Cmd
}

// send pipelines ops on c: for each op, the lost attempt's index DEL and
// the index SET when they belong on c (garbageHere, indexHere), then the
// script (after ASKING when asking), and with acks > 0 a final WAIT. It
// returns each op's commands and the WAIT's verdict: nil when the replicas
// have everything the connection wrote, including what the scripts wrote.
func (b *batcher) send(ctx context.Context, c pipeliner, ops []*appendOp, asking bool) ([]sentOp, error) {
	cmds := make([]sentOp, len(ops))
	var wait *redis.Cmd
	_, _ = c.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, op := range ops {
			if op.garbage != "" && op.garbageHere {
				pl.Del(ctx, op.garbage)
			}
			if op.indexHere {
				cmds[i].set = pl.Set(ctx, op.indexKey, op.indexVal, 0)
			}
			if asking {
				pl.Do(ctx, "asking")
			}
			cmds[i].eval = appendScript.EvalSha(ctx, pl, op.keys, op.args...)
		}
		if b.acks > 0 {
			// Pipeliner has no Wait; Cmdable.Wait would also set a read
			// timeout that pipelines do not use (New checks the client's).
			wait = pl.Do(ctx, "wait", b.acks, b.replTimeout.Milliseconds())
		}
		return nil
	})
	if wait == nil {
		return cmds, nil
	}
	n, err := wait.Int64()
	switch {
	case err != nil:
		return cmds, fmt.Errorf("WAIT: %w", err)
	case n < int64(b.acks):
		return cmds, fmt.Errorf("%d of %d replicas acknowledged within %v", n, b.acks, b.replTimeout)
	}
	return cmds, nil
}

// clusterRounds bounds how often execCluster sends an op that did not run
// (NOSCRIPT, MOVED, ASK, TRYAGAIN, CLUSTERDOWN).
const clusterRounds = 5

// execCluster sends ops on a Redis Cluster when their replication must be
// awaited. A cluster pipeline splits its commands by node and sends a
// keyless one (WAIT) to any node, where it would prove nothing: WAIT
// counts the replicas that have the calling connection's own writes. So
// the ops are grouped by the master serving their chain's slot, and each
// group is one pipeline on that master's own client, ending with WAIT.
// Index writes whose key that master serves go ahead of the scripts in
// the same pipeline (the WAIT covers them); the others go out in a
// cluster pipeline at the same time. An op answered MOVED, ASK, TRYAGAIN,
// CLUSTERDOWN or NOSCRIPT did not run: it is sent again after the slot
// map is read again (or the script loaded), at most clusterRounds times.
func (b *batcher) execCluster(ctx context.Context, cc *redis.ClusterClient, ops []*appendOp) {
	type groupKey struct {
		node   *redis.Client
		asking bool
	}
	var byAddr map[string]*redis.Client // masters, read after a redirect
	todo := ops
	for round := 1; len(todo) > 0; round++ {
		groups := map[groupKey][]*appendOp{}
		var keys []groupKey
		for _, op := range todo {
			var k groupKey
			if op.redirect != "" {
				if c := byAddr[op.redirect]; c != nil {
					k = groupKey{c, op.asking}
				}
				op.redirect, op.asking = "", false
			}
			if k.node == nil {
				node, err := cc.MasterForKey(ctx, op.keys[0])
				if err != nil {
					op.evalErr = fmt.Errorf("route %s: %w", op.keys[0], err)
					close(op.done)
					continue
				}
				k.node = node
			}
			if groups[k] == nil {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], op)
		}
		var foreign []*appendOp
		for _, k := range keys {
			for _, op := range groups[k] {
				op.indexHere = !k.asking && servedBy(ctx, cc, op.indexKey, k.node)
				op.garbageHere = op.garbage == "" || !k.asking && servedBy(ctx, cc, op.garbage, k.node)
				if !op.indexHere || !op.garbageHere {
					foreign = append(foreign, op)
				}
			}
		}
		var wg sync.WaitGroup
		if len(foreign) > 0 {
			wg.Go(func() {
				sets := make([]*redis.StatusCmd, len(foreign))
				_, _ = cc.Pipelined(ctx, func(pl redis.Pipeliner) error {
					for i, op := range foreign {
						if !op.garbageHere {
							pl.Del(ctx, op.garbage)
						}
						if !op.indexHere {
							sets[i] = pl.Set(ctx, op.indexKey, op.indexVal, 0)
						}
					}
					return nil
				})
				for i, op := range foreign {
					if sets[i] != nil {
						op.indexErr = sets[i].Err()
					}
				}
			})
		}
		results := make([]struct {
			cmds    []sentOp
			replErr error
		}, len(keys))
		for i, k := range keys {
			wg.Go(func() { results[i].cmds, results[i].replErr = b.send(ctx, k.node, groups[k], k.asking) })
		}
		wg.Wait()

		var again []*appendOp
		noScript := map[*redis.Client][]*appendOp{}
		reload, pause := false, false
		for i, k := range keys {
			for j, op := range groups[k] {
				c := results[i].cmds[j]
				if c.set != nil {
					op.indexErr = c.set.Err()
				}
				op.evalVal, op.evalErr = c.eval.Val(), c.eval.Err()
				if round < clusterRounds {
					if isNoScript(op.evalErr) {
						if k.asking { // back to the importing master
							op.redirect, op.asking = k.node.Options().Addr, true
						}
						noScript[k.node] = append(noScript[k.node], op)
						continue
					}
					if addr, ok := redis.IsMovedError(op.evalErr); ok {
						op.redirect, reload = addr, true
						again = append(again, op)
						continue
					}
					if addr, ok := redis.IsAskError(op.evalErr); ok {
						op.redirect, op.asking, reload = addr, true, true
						again = append(again, op)
						continue
					}
					if redis.IsTryAgainError(op.evalErr) || redis.IsClusterDownError(op.evalErr) {
						pause = true
						again = append(again, op)
						continue
					}
				}
				if op.evalErr != nil && !isRedisError(op.evalErr) {
					// The node may be gone (failover): read the slot map
					// again soon, as the cluster client does on its own
					// commands.
					cc.ReloadState(ctx)
				}
				op.replErr = results[i].replErr
				close(op.done)
			}
		}
		for node, ops := range noScript {
			// NOSCRIPT: this node's script cache was flushed (restart,
			// promotion); nothing ran, so loading and re-sending is safe.
			if err := appendScript.Load(ctx, node).Err(); err != nil {
				for _, op := range ops {
					op.evalErr = fmt.Errorf("load script: %w", err)
					close(op.done)
				}
				continue
			}
			again = append(again, ops...)
		}
		if reload {
			byAddr = masters(ctx, cc)
			for _, op := range again {
				if op.redirect != "" && byAddr[op.redirect] == nil {
					pause = true // a node the slot map does not know yet
				}
			}
		}
		if pause {
			time.Sleep(time.Duration(round) * 50 * time.Millisecond)
		}
		todo = again
	}
}

// servedBy reports whether node is the master serving key's slot.
func servedBy(ctx context.Context, cc *redis.ClusterClient, key string, node *redis.Client) bool {
	m, err := cc.MasterForKey(ctx, key)
	return err == nil && m == node
}

// masters reads the cluster's slot map again, now, and returns its
// masters' clients by address.
func masters(ctx context.Context, cc *redis.ClusterClient) map[string]*redis.Client {
	var mu sync.Mutex
	m := map[string]*redis.Client{}
	_ = cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		m[c.Options().Addr] = c
		mu.Unlock()
		return nil
	})
	return m
}

// isRedisError reports whether err is an error reply (the server answered)
// rather than a transport failure.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
