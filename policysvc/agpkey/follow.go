package agpkey

import (
	"context"
	"log/slog"

	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/streamwatch"
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

// Follow follows policysvc's WatchKeyEvents until ctx is done; a broken
// stream is reopened as streamwatch.Follow does.
func Follow(ctx context.Context, client agpv1.AgpServiceClient, log *slog.Logger, w Watcher) {
	streamwatch.Follow(ctx, log, streamwatch.Stream[*agpv1.WatchKeyEventsResponse]{
		Open: func(ctx context.Context) (streamwatch.Receiver[*agpv1.WatchKeyEventsResponse], error) {
			return client.WatchKeyEvents(ctx, &agpv1.WatchKeyEventsRequest{})
		},
		Receive: func(ev *agpv1.WatchKeyEventsResponse) {
			if ev.GetSubscribed() {
				w.Subscribed()
				return
			}
			w.Changed(ev)
		},
		Interrupted: w.Interrupted,
		Warning:     "agp key watch interrupted; key cache cleared, reconnecting",
	})
}
