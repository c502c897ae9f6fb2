package agp

import (
	"context"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/subscription"
)

// Why a watch stream ends. Every one of them means changes may have been
// missed, so the watcher forgets what it holds and watches again.
var (
	errFeedDown = grpcerr.Unavailable("agp-key-events-unavailable", "this policysvc replica is not receiving API key changes; watch again")
	errBehind   = grpcerr.Unavailable("agp-key-events-behind", "the watcher fell behind the API key changes; watch again")
)

// hub subscribes to rediskeys.AGPKeyEvents once per replica and fans every
// change out to this replica's WatchKeyEvents streams.
//
// Unlike a resync message, ending a stream is something every watcher
// already handles (it must survive this replica going away), so every
// gap ends the streams: a broken or lost subscription ends all of them,
// and a stream that falls buf changes behind is ended alone, so one slow
// watcher never delays the others. While the subscription is down no
// stream is accepted: a watcher is told at once, and does not cache keys
// it cannot be told about.
type hub struct {
	rdb redis.UniversalClient
	log *slog.Logger
	buf int

	mu       sync.Mutex
	live     bool
	watchers map[*watcher]struct{}
}

type watcher struct {
	ch chan *agpv1.WatchKeyEventsResponse
	// gone is closed when the hub ends the stream; why is set before.
	gone chan struct{}
	why  error
}

func newHub(rdb redis.UniversalClient, log *slog.Logger, buf int) *hub {
	return &hub{rdb: rdb, log: log, buf: buf, watchers: map[*watcher]struct{}{}}
}

// add registers a watcher, or refuses while the subscription is down.
func (h *hub) add() (*watcher, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.live {
		return nil, errFeedDown
	}
	w := &watcher{ch: make(chan *agpv1.WatchKeyEventsResponse, h.buf), gone: make(chan struct{})}
	h.watchers[w] = struct{}{}
	return w, nil
}

func (h *hub) remove(w *watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	h.mu.Unlock()
}

// dropLocked ends one stream; h.mu is held.
func (h *hub) dropLocked(w *watcher, why error) {
	delete(h.watchers, w)
	w.why = why
	close(w.gone)
}

func (h *hub) broadcast(ev *agpv1.WatchKeyEventsResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		select {
		case w.ch <- ev:
		default:
			h.log.Warn("agp key watcher fell behind; ending its stream", "buffer", h.buf)
			h.dropLocked(w, errBehind)
		}
	}
}

// setLive records the subscription's state; going down ends every stream.
func (h *hub) setLive(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live = on
	if on {
		return
	}
	for w := range h.watchers {
		h.dropLocked(w, errFeedDown)
	}
}

// count reports how many streams are open (tests).
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watchers)
}

// run keeps the subscription up until ctx ends. The hub is down, and
// refuses and ends streams, from a lost subscription until the channel's
// subscribe confirmation is read again.
func (h *hub) run(ctx context.Context) error {
	subscription.Run(ctx, h.rdb, rediskeys.AGPKeyEvents, subscription.Handler{
		Up: func() { h.setLive(true) },
		Down: func(err error) {
			if err != nil {
				h.log.Warn("agp key event subscription lost; key watches end until it is back", "error", err)
			}
			h.setLive(false)
		},
		Message: func(payload string) {
			ev := &agpv1.WatchKeyEventsResponse{}
			if err := proto.Unmarshal([]byte(payload), ev); err != nil || ev.GetKeyId() == "" || ev.GetSubscribed() {
				// Something was published that cannot be applied: a
				// watcher cannot tell which keys it concerns.
				h.log.Warn("undecodable agp key event; ending every watch", "error", err)
				h.setLive(false)
				h.setLive(true)
				return
			}
			h.broadcast(ev)
		},
	})
	return nil
}

// Run keeps the key-change subscription that feeds WatchKeyEvents until
// ctx is done; then every stream ends, so a drain does not wait for them.
func (s *Server) Run(ctx context.Context) error { return s.hub.run(ctx) }

// WatchKeyEvents streams key changes: first the subscribed confirmation,
// then every change this replica receives, until the client leaves or the
// hub ends the stream.
func (s *Server) WatchKeyEvents(_ *agpv1.WatchKeyEventsRequest, stream grpc.ServerStreamingServer[agpv1.WatchKeyEventsResponse]) error {
	w, err := s.hub.add()
	if err != nil {
		return err
	}
	defer s.hub.remove(w)
	if err := stream.Send(&agpv1.WatchKeyEventsResponse{Subscribed: true}); err != nil {
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-w.gone:
			return w.why
		case ev := <-w.ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}
