// Package watch follows catalogsvc's WatchSnapshot stream for the services
// that keep a local copy of the catalog (the front door, rcnssvc), so the
// reconnect and backoff behaviour is written once.
package watch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
)

// Follow sends every snapshot catalogsvc publishes to install, until ctx
// is done. known reports the revision already installed, so a reconnect
// skips a snapshot the caller has. A snapshot install refuses is logged
// and the previous one keeps serving. A broken stream is reopened with
// exponential backoff (100 ms to 5 s).
func Follow(ctx context.Context, client catalogv1.CatalogServiceClient, log *slog.Logger, known func() uint64, install func(*catalogv1.Snapshot) error) {
	backoff := 100 * time.Millisecond
	for {
		stream, err := client.WatchSnapshot(ctx, &catalogv1.WatchSnapshotRequest{KnownRevision: known()})
		if err == nil {
			for {
				msg, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				backoff = 100 * time.Millisecond
				if ierr := install(msg.GetSnapshot()); ierr != nil {
					log.Error("catalog snapshot refused; previous one keeps serving", "error", ierr)
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, context.Canceled) {
			log.Warn("catalog watch interrupted; reconnecting", "error", err, "backoff", backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
