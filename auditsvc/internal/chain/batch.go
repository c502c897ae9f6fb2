package chain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// appendOp is one chain's compare-and-append of one or more records (one
// appendLua call) with its records' index writes. Ops of different chains
// travel together in one pipeline; ops of one chain never do, because the
// chain's records are sent by one leader at a time (Store.lead).
type appendOp struct {
	// garbage are index entries to delete (lost attempts'); index the
	// entries of the records this op appends, written ahead of the script.
	garbage []keyWrite
	index   []keyWrite
	keys    []string
	args    []any
	// st is the chain's queue (Store.followUp).
	st *headState

	evalVal  any
	evalErr  error
	indexErr error
	// replErr is set, when replicas must acknowledge, if the WAIT that
	// followed the op's script on its connection failed or counted fewer
	// replicas: what the script wrote may be on the primary only.
	replErr error

	// Routing of the current send (execCluster): where a redirect (MOVED,
	// or ASK when asking) sent the script.
	redirect string
	asking   bool
}

// keyWrite is one index key to write (val) or delete, and whether the
// current send carries it in the script's pipeline (here) or elsewhere.
type keyWrite struct {
	key, val string
	here     bool
}

// batcher sends ops in pipelines: group commit through
// services/batchrpc.Group, so at low load a pipeline is one op and adds no
// latency, and under load one round trip and one pair of syscalls on each
// side carry many chains' records. Ops that belong together (a Batch's
// chains, the next calls of the chains a pipeline carried) are gated into
// one pipeline (pipeGate).
type batcher struct {
	rdb redis.UniversalClient
	// multiKey: rdb is one node, so a pipeline's index writes and deletes
	// go out as one MSET and one DEL instead of a command per record.
	multiKey bool
	// acks > 0: every pipeline ends with WAIT acks replTimeout on the
	// connection that ran its scripts (Options.ReplicaAcks).
	acks        int
	replTimeout time.Duration
	// observe, if set, is told each pipeline's size and round trip.
	observe func(records int, took time.Duration)
}

// exec sends one batch of ops and answers each (batchrpc.Group's exec).
func (b *batcher) exec(ops []*appendOp) {
	if b.observe != nil {
		start := time.Now()
		defer func() {
			n := 0
			for _, op := range ops {
				n += len(op.index)
			}
			b.observe(n, time.Since(start))
		}()
	}
	// The pipeline outlives any one caller's cancellation: once a record
	// is signed and queued, it must be answered, or its caller could not
	// tell whether it ran (callers that gave up earlier were dropped
	// before signing, Store.appendJobs).
	ctx := context.Background()
	if cc, ok := b.rdb.(*redis.ClusterClient); ok && b.acks > 0 {
		b.execCluster(ctx, cc, ops)
		return
	}
	// One pipeline: on a single node (or a Sentinel-managed primary) it is
	// one connection, so its WAIT covers its scripts; without WAIT, a
	// cluster pipeline routes every command by its own key.
	todo := ops
	for reload := 0; len(todo) > 0; reload++ {
		for _, op := range todo {
			here(op.index, op.garbage)
		}
		cmds, replErr := b.send(ctx, b.rdb, todo, false, b.multiKey)
		var again []*appendOp
		for i, op := range todo {
			op.indexErr = cmds[i].indexErr()
			op.evalVal, op.evalErr = cmds[i].eval.Val(), cmds[i].eval.Err()
			if isNoScript(op.evalErr) && reload < 2 {
				again = append(again, op)
				continue
			}
			op.replErr = replErr
		}
		if len(again) > 0 {
			// NOSCRIPT: the script cache was flushed (restart, failover);
			// nothing ran, so loading and re-sending is safe.
			if err := appendScript.Load(ctx, b.rdb).Err(); err != nil {
				for _, op := range again {
					op.evalErr = fmt.Errorf("load script: %w", err)
				}
				return
			}
		}
		todo = again
	}
}

// here marks every write as carried by the script's pipeline.
func here(lists ...[]keyWrite) {
	for _, l := range lists {
		for i := range l {
			l[i].here = true
		}
	}
}

// pipeliner is a client that can send a pipeline.
type pipeliner interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// sentOp is one op's commands in a pipeline.
type sentOp struct {
	sets []*redis.StatusCmd // its index writes sent here, or the pipeline's MSET
	eval *redis.Cmd
}

// indexErr is the first failed index write of the op.
func (c sentOp) indexErr() error {
	for _, s := range c.sets {
		if err := s.Err(); err != nil {
			return err
		}
	}
	return nil
}

// send pipelines ops on c: the lost attempts' index DELs and the index
// SETs that belong on c (here), then each op's script (after ASKING when
// asking), and with acks > 0 a final WAIT. With multiKey (c is one node)
// the DELs are one DEL and the SETs one MSET. It returns each op's
// commands and the WAIT's verdict: nil when the replicas have everything
// the connection wrote, including what the scripts wrote.
func (b *batcher) send(ctx context.Context, c pipeliner, ops []*appendOp, asking, multiKey bool) ([]sentOp, error) {
	cmds := make([]sentOp, len(ops))
	var wait *redis.Cmd
	_, _ = c.Pipelined(ctx, func(pl redis.Pipeliner) error {
		if multiKey {
			var del []string
			var set []any
			for _, op := range ops {
				for _, g := range op.garbage {
					del = append(del, g.key)
				}
				for _, w := range op.index {
					set = append(set, w.key, w.val)
				}
			}
			if len(del) > 0 {
				pl.Del(ctx, del...)
			}
			if len(set) > 0 {
				mset := pl.MSet(ctx, set...)
				for i := range cmds {
					cmds[i].sets = []*redis.StatusCmd{mset}
				}
			}
		}
		for i, op := range ops {
			if !multiKey {
				for _, g := range op.garbage {
					if g.here {
						pl.Del(ctx, g.key)
					}
				}
				for _, w := range op.index {
					if w.here {
						cmds[i].sets = append(cmds[i].sets, pl.Set(ctx, w.key, w.val, 0))
					}
				}
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
				away := false
				for _, l := range [][]keyWrite{op.index, op.garbage} {
					for i := range l {
						l[i].here = !k.asking && servedBy(ctx, cc, l[i].key, k.node)
						away = away || !l[i].here
					}
				}
				if away {
					foreign = append(foreign, op)
				}
			}
		}
		var wg sync.WaitGroup
		foreignErrs := make([]error, len(foreign))
		if len(foreign) > 0 {
			wg.Go(func() {
				sets := make([][]*redis.StatusCmd, len(foreign))
				_, _ = cc.Pipelined(ctx, func(pl redis.Pipeliner) error {
					for i, op := range foreign {
						for _, g := range op.garbage {
							if !g.here {
								pl.Del(ctx, g.key)
							}
						}
						for _, w := range op.index {
							if !w.here {
								sets[i] = append(sets[i], pl.Set(ctx, w.key, w.val, 0))
							}
						}
					}
					return nil
				})
				for i := range foreign {
					foreignErrs[i] = sentOp{sets: sets[i]}.indexErr()
				}
			})
		}
		results := make([]struct {
			cmds    []sentOp
			replErr error
		}, len(keys))
		for i, k := range keys {
			wg.Go(func() { results[i].cmds, results[i].replErr = b.send(ctx, k.node, groups[k], k.asking, false) })
		}
		wg.Wait()
		for i, op := range foreign {
			op.indexErr = foreignErrs[i]
		}

		var again []*appendOp
		noScript := map[*redis.Client][]*appendOp{}
		reload, pause := false, false
		for i, k := range keys {
			for j, op := range groups[k] {
				c := results[i].cmds[j]
				if err := c.indexErr(); err != nil {
					op.indexErr = err
				}
				op.evalVal, op.evalErr = c.eval.Val(), c.eval.Err()
				if round < clusterRounds {
					if isNoScript(op.evalErr) {
						// Back to the node that answered: it serves the
						// slot (the importing master when asking), even
						// while the client's slot map still names the
						// master before a failover.
						addr := k.node.Options().Addr
						op.redirect, op.asking = addr, k.asking
						if byAddr == nil {
							byAddr = map[string]*redis.Client{}
						}
						if byAddr[addr] == nil {
							byAddr[addr] = k.node
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
			}
		}
		for node, ops := range noScript {
			// NOSCRIPT: this node's script cache was flushed (restart,
			// promotion); nothing ran, so loading and re-sending is safe.
			if err := appendScript.Load(ctx, node).Err(); err != nil {
				for _, op := range ops {
					op.evalErr = fmt.Errorf("load script: %w", err)
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
