// Package subscription keeps a process's Redis pub/sub subscription to
// one channel up, for the replicas that fan a channel out to their watch
// streams (identitysvc's agent events, policysvc's AGP key changes). A
// subscriber must know when messages may have been missed, so it is told
// when the subscription is confirmed and when it is lost.
package subscription

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Handler is what the subscription tells its owner.
type Handler struct {
	// Up runs when the channel's subscription is confirmed (again): every
	// message published from now on is delivered.
	Up func()
	// Down runs when a live subscription is lost: messages published from
	// now until the next Up are missed. err is nil when ctx ended.
	Down func(err error)
	// Message runs for each message, in order.
	Message func(payload string)
}

// Idle reads and the wait after a failure.
const (
	idlePing   = 30 * time.Second
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// Run keeps the subscription to channel until ctx is done. go-redis
// reconnects a broken subscription by itself on the next receive, and
// resubscribes; every error it reports is a moment in which a message may
// have been lost, so the subscription counts as down from the error until
// the channel's subscribe confirmation is read again. An idle connection
// is pinged, so a dead one is found and replaced.
func Run(ctx context.Context, rdb redis.UniversalClient, channel string, h Handler) {
	ps := rdb.Subscribe(ctx, channel)
	// go-redis reads do not watch ctx; closing the subscription is what
	// ends a blocked receive.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	defer ps.Close()
	up := false
	down := func(err error) {
		if up {
			up = false
			h.Down(err)
		}
	}
	defer down(nil)
	backoff := minBackoff
	lost := func(err error) {
		down(err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(backoff*2, maxBackoff)
	}
	for {
		msg, err := ps.ReceiveTimeout(ctx, idlePing)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			var nerr interface{ Timeout() bool }
			if errors.As(err, &nerr) && nerr.Timeout() {
				if perr := ps.Ping(ctx); perr != nil {
					lost(perr)
				}
				continue
			}
			lost(err)
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == channel {
				backoff = minBackoff
				up = true
				h.Up()
			}
		case *redis.Message:
			h.Message(m.Payload)
		}
	}
}
