package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/subscription"
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

// run keeps the subscription up until ctx ends. Every (re)subscription
// resyncs the watchers: events published while it was down are lost.
func (h *hub) run(ctx context.Context) error {
	subscription.Run(ctx, h.rdb, rediskeys.AgentEvents, subscription.Handler{
		Up: func() { h.setSubscribed(true) },
		Down: func(err error) {
			if err != nil {
				h.log.Warn("agent event subscription lost; watchers resync when it is back", "err", err)
			}
			h.setSubscribed(false)
		},
		Message: func(payload string) {
			ev := &identityv1.WatchAgentsResponse{}
			if err := proto.Unmarshal([]byte(payload), ev); err != nil || ev.GetAgentId() == "" {
				h.log.Warn("undecodable agent event; resyncing watchers", "err", err)
				h.setSubscribed(true)
				return
			}
			h.broadcast(ev)
		},
	})
	return nil
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
