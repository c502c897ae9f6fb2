// Package streamwatch keeps open the gRPC server streams a service follows
// to keep a local copy current (the catalog, agents, AGP key changes), so
// the reconnect and backoff behaviour is written once.
package streamwatch

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Receiver is the receiving side of a server stream; a
// grpc.ServerStreamingClient[T] is a Receiver[*T].
type Receiver[M any] interface {
	Recv() (M, error)
}

// Stream says how to follow one stream.
type Stream[M any] struct {
	// Open opens the stream. Whatever must happen once a stream is live
	// (a cache starting to trust its entries) belongs here, after a
	// successful open.
	Open func(context.Context) (Receiver[M], error)
	// Receive handles each message.
	Receive func(M)
	// Interrupted, if set, runs each time a stream ends or cannot be
	// opened: messages may be missed until the next one is open, so a
	// cache kept current by the stream must stop trusting itself here.
	Interrupted func()
	// Warning is logged when a stream breaks, e.g. "catalog watch
	// interrupted; reconnecting".
	Warning string
	// StartupGrace is how long after Follow starts a stream that has
	// never delivered is expected to fail (its server still starting);
	// those failures are logged at Info, later ones at Warn. Zero means
	// DefaultStartupGrace.
	StartupGrace time.Duration
}

// DefaultStartupGrace covers services of a suite started together, in any
// order, as a deployment or make run starts them.
const DefaultStartupGrace = 10 * time.Second

// Backoff bounds: the first wait after a broken stream, and the longest.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Follow follows s until ctx is done. A broken stream is reopened after a
// wait that doubles from 100 ms to 5 s and starts over with every message
// received, so a server that restarts is followed again within 100 ms
// while one that stays down is not hammered. Each wait is stretched by a
// random part of up to half of it: every replica of every service loses
// its watch in the same instant when a server restarts, and without
// jitter they would all come back in the same instant too.
//
// Until a stream first delivers, and for s.StartupGrace, a failure is
// expected (the server is starting too) and logged at Info rather than
// Warn, so a clean start of the suite warns about nothing.
func Follow[M any](ctx context.Context, log *slog.Logger, s Stream[M]) {
	backoff := minBackoff
	grace := s.StartupGrace
	if grace == 0 {
		grace = DefaultStartupGrace
	}
	starting, delivered := time.Now(), false
	for {
		stream, err := s.Open(ctx)
		if err == nil {
			for {
				msg, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				backoff, delivered = minBackoff, true
				s.Receive(msg)
			}
		}
		if s.Interrupted != nil {
			s.Interrupted()
		}
		if ctx.Err() != nil {
			return
		}
		wait := backoff + rand.N(backoff/2)
		if !errors.Is(err, context.Canceled) {
			level := slog.LevelWarn
			if !delivered && time.Since(starting) < grace {
				level = slog.LevelInfo
			}
			log.Log(ctx, level, s.Warning, "error", err, "backoff", wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}
