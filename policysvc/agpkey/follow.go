package agpkey

import (
	"context"
	"errors"
	"log/slog"
	"time"

	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
)

// Watcher is what a cache of resolved keys does with policysvc's
// WatchKeyEvents stream.
type Watcher struct {
	// Subscribed runs when a stream confirms it is live: every key change
	// committed from now on will be delivered, so the cache may start
	// trusting (and keeping) what it resolves.
	Subscribed func()
	// Changed runs for every key change.
	Changed func(*agpv1.WatchKeyEventsResponse)
	// Interrupted runs when a stream could not be opened or ended: changes
	// may be missed until Subscribed runs again, so the cache must forget
	// every key it holds and keep none.
	Interrupted func()
}

// Follow follows policysvc's WatchKeyEvents until ctx is done, the way
// catalogsvc/watch.Follow follows the catalog: a broken stream is
// reopened with exponential backoff (100 ms to 5 s), reset by every
// message received.
func Follow(ctx context.Context, client agpv1.AgpServiceClient, log *slog.Logger, w Watcher) {
	backoff := 100 * time.Millisecond
	for {
		stream, err := client.WatchKeyEvents(ctx, &agpv1.WatchKeyEventsRequest{})
		if err == nil {
			for {
				ev, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				backoff = 100 * time.Millisecond
				if ev.GetSubscribed() {
					w.Subscribed()
					continue
				}
				w.Changed(ev)
			}
		}
		w.Interrupted()
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, context.Canceled) {
			log.Warn("agp key watch interrupted; key cache cleared, reconnecting", "error", err, "backoff", backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
