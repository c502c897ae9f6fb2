package kit

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// Task is one long-running part of a service (a listener, a watch loop). It
// returns when ctx is done, with nil for a clean stop.
type Task func(ctx context.Context) error

// RunTasks runs every task until ctx is done or one fails; the first error
// cancels the rest, and RunTasks returns after all have returned.
func RunTasks(ctx context.Context, tasks ...Task) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, t := range tasks {
		g.Go(func() error { return t(ctx) })
	}
	return g.Wait()
}
