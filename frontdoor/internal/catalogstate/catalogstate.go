// Package catalogstate keeps the front door's local copy of the catalog
// snapshot, fed by catalogsvc's WatchSnapshot, so that every structural
// decision (459, 460, 404, 405, match) is made in-process with no network
// hop per request.
package catalogstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/route"
)

// State is one snapshot, ready to serve from.
type State struct {
	Snapshot *catalogv1.Snapshot
	Table    *route.Table
	// Endpoints are the compiled endpoints (schemas ready), aligned with
	// the snapshot's endpoints by route.Endpoint.Index.
	Endpoints []*endpoint.Endpoint
	// SupportedMethods is the Supported-Methods header value: every method
	// with an endpoint on this server, sorted.
	SupportedMethods string
}

// Store holds the current State. Readers never block.
type Store struct {
	cur atomic.Pointer[State]
}

// Current returns the current state, or nil before the first snapshot.
func (s *Store) Current() *State { return s.cur.Load() }

// Set builds and installs a state from a snapshot. A snapshot that does
// not build keeps the previous state serving.
func (s *Store) Set(snap *catalogv1.Snapshot) error {
	t, err := route.New(snap)
	if err != nil {
		return fmt.Errorf("catalog snapshot %d: %w", snap.GetRevision(), err)
	}
	compiled := make([]*endpoint.Endpoint, len(snap.GetEndpoints()))
	for i, e := range snap.GetEndpoints() {
		if compiled[i], err = endpoint.FromJSON(e.GetDefinitionJson()); err != nil {
			return fmt.Errorf("catalog snapshot %d: endpoint %s %s: %w", snap.GetRevision(), e.GetMethod(), e.GetPath(), err)
		}
	}
	seen := map[string]bool{}
	var methods []string
	for _, e := range snap.GetEndpoints() {
		if !seen[e.GetMethod()] {
			seen[e.GetMethod()] = true
			methods = append(methods, e.GetMethod())
		}
	}
	sort.Strings(methods)
	s.cur.Store(&State{Snapshot: snap, Table: t, Endpoints: compiled, SupportedMethods: strings.Join(methods, ", ")})
	return nil
}

// Watch follows catalogsvc's WatchSnapshot until ctx is done, reconnecting
// with backoff; ready is closed once the first snapshot is installed.
func (s *Store) Watch(ctx context.Context, client catalogv1.CatalogServiceClient, log *slog.Logger, ready chan<- struct{}) error {
	backoff := 100 * time.Millisecond
	readyOnce := false
	for {
		known := uint64(0)
		if cur := s.Current(); cur != nil {
			known = cur.Snapshot.GetRevision()
		}
		stream, err := client.WatchSnapshot(ctx, &catalogv1.WatchSnapshotRequest{KnownRevision: known})
		if err == nil {
			for {
				msg, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				backoff = 100 * time.Millisecond
				if serr := s.Set(msg.GetSnapshot()); serr != nil {
					log.Error("catalog snapshot refused; previous one keeps serving", "error", serr)
					continue
				}
				if !readyOnce {
					readyOnce = true
					close(ready)
				}
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, context.Canceled) {
			log.Warn("catalog watch interrupted; reconnecting", "error", err, "backoff", backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
