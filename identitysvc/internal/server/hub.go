package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// hub subscribes to rediskeys.AgentEvents once per replica and fans every
// change out to this replica's WatchAgents streams. A stream that falls
// WatchBuffer events behind is not waited for: its backlog is dropped and
// it gets a resync, so one slow watcher never delays the others. Every
// (re)subscription to Redis also resyncs every stream, because events
// published while the subscription was down are lost.
type hub struct {
	rdb redis.UniversalClient
	log *slog.Logger
	buf int

	mu         sync.Mutex
	watchers   map[*watcher]struct{}
	subscribed bool
	// gen changes on every event and resync; the namespace document cache
	// compares it.
	gen atomic.Uint64
}

type watcher struct {
	ch chan *identityv1.WatchAgentsResponse
	// resync is set when the stream must drop everything: on
	// (re)subscription and when ch overflowed.
	resync atomic.Bool
	wake   chan struct{}
}

func newHub(rdb redis.UniversalClient, log *slog.Logger, buf int) *hub {
	return &hub{rdb: rdb, log: log, buf: buf, watchers: map[*watcher]struct{}{}}
}

func (w *watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// add registers a watcher. If the hub is subscribed the watcher gets its
// initial resync at once; otherwise when the subscription comes up.
func (h *hub) add() *watcher {
	w := &watcher{ch: make(chan *identityv1.WatchAgentsResponse, h.buf), wake: make(chan struct{}, 1)}
	h.mu.Lock()
	h.watchers[w] = struct{}{}
	if h.subscribed {
		w.resync.Store(true)
		w.signal()
	}
	h.mu.Unlock()
	return w
}

func (h *hub) remove(w *watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	h.mu.Unlock()
}

func (h *hub) broadcast(ev *identityv1.WatchAgentsResponse) {
	h.gen.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		select {
		case w.ch <- ev:
		default:
			w.resync.Store(true)
			w.signal()
		}
	}
}

func (h *hub) setSubscribed(on bool) {
	h.gen.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subscribed = on
	if !on {
		return
	}
	for w := range h.watchers {
		w.resync.Store(true)
		w.signal()
	}
}

// run keeps the subscription up until ctx ends.
func (h *hub) run(ctx context.Context) error {
	ps := h.rdb.Subscribe(ctx, rediskeys.AgentEvents)
	// go-redis reads do not watch ctx; closing the subscription is what
	// ends a blocked receive.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	defer ps.Close()
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(ctx, 30*time.Second)
		if ctx.Err() != nil {
			h.setSubscribed(false)
			return nil
		}
		if err != nil {
			var nerr interface{ Timeout() bool }
			if errors.As(err, &nerr) && nerr.Timeout() {
				// Idle: a ping proves the connection is alive, and a dead
				// one is replaced (with a fresh subscribe) by go-redis.
				if perr := ps.Ping(ctx); perr != nil {
					h.lost(ctx, perr, &backoff)
				}
				continue
			}
			h.lost(ctx, err, &backoff)
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == rediskeys.AgentEvents {
				backoff = 50 * time.Millisecond
				h.setSubscribed(true)
			}
		case *redis.Message:
			ev := &identityv1.WatchAgentsResponse{}
			if err := proto.Unmarshal([]byte(m.Payload), ev); err != nil || ev.GetAgentId() == "" {
				h.log.Warn("undecodable agent event; resyncing watchers", "err", err)
				h.setSubscribed(true)
				continue
			}
			h.broadcast(ev)
		}
	}
}

func (h *hub) lost(ctx context.Context, err error, backoff *time.Duration) {
	h.mu.Lock()
	was := h.subscribed
	h.mu.Unlock()
	if was {
		h.log.Warn("agent event subscription lost; watchers resync when it is back", "err", err)
	}
	h.setSubscribed(false)
	t := time.NewTimer(*backoff)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
	*backoff = min(*backoff*2, 2*time.Second)
}

// serve sends a watcher's events to send until ctx ends or send fails.
func (h *hub) serve(ctx context.Context, w *watcher, send func(*identityv1.WatchAgentsResponse) error) error {
	resync := &identityv1.WatchAgentsResponse{Resync: true}
	for {
		if w.resync.Swap(false) {
			// Anything queued predates the resync; the client drops its
			// whole cache anyway.
			for drained := false; !drained; {
				select {
				case <-w.ch:
				default:
					drained = true
				}
			}
			if err := send(resync); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		case ev := <-w.ch:
			if w.resync.Load() {
				continue
			}
			if err := send(ev); err != nil {
				return err
			}
		}
	}
}
