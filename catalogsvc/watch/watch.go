// Package watch follows catalogsvc's WatchSnapshot stream for the services
// that keep a local copy of the catalog (the front door, rcnssvc), so the
// reconnect and backoff behaviour is written once.
package watch

import (
	"context"
	"log/slog"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/streamwatch"
)

// Follow sends every snapshot catalogsvc publishes to install, until ctx
// is done. known reports the revision already installed, so a reconnect
// skips a snapshot the caller has. A snapshot install refuses is logged
// and the previous one keeps serving. A broken stream is reopened as
// streamwatch.Follow does.
func Follow(ctx context.Context, client catalogv1.CatalogServiceClient, log *slog.Logger, known func() uint64, install func(*catalogv1.Snapshot) error) {
	streamwatch.Follow(ctx, log, streamwatch.Stream[*catalogv1.WatchSnapshotResponse]{
		Open: func(ctx context.Context) (streamwatch.Receiver[*catalogv1.WatchSnapshotResponse], error) {
			return client.WatchSnapshot(ctx, &catalogv1.WatchSnapshotRequest{KnownRevision: known()})
		},
		Receive: func(msg *catalogv1.WatchSnapshotResponse) {
			if err := install(msg.GetSnapshot()); err != nil {
				log.Error("catalog snapshot refused; previous one keeps serving", "error", err)
			}
		},
		Warning: "catalog watch interrupted; reconnecting",
	})
}
