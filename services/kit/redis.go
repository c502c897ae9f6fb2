package kit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ClusterStateReloadInterval bounds how stale a Redis Cluster client's
// slot map may get (see NewRedis).
const ClusterStateReloadInterval = time.Second

// NewRedis connects to Redis. A redis:// or rediss:// URL is one node; a
// redis+cluster:// (or rediss+cluster://) URL is a Redis Cluster, with more
// seed nodes given as addr= query parameters. Commands are traced when tp
// is not nil; with mp, the connection pool and the time each command holds
// a connection are measured (redisotel's db.client.connections.*).
func NewRedis(ctx context.Context, url string, tp trace.TracerProvider, mp metric.MeterProvider) (redis.UniversalClient, error) {
	var client redis.UniversalClient
	switch {
	case strings.HasPrefix(url, "redis+cluster://"), strings.HasPrefix(url, "rediss+cluster://"):
		opts, err := redis.ParseClusterURL(strings.Replace(url, "+cluster", "", 1))
		if err != nil {
			return nil, fmt.Errorf("parse redis cluster url: %w", err)
		}
		// go-redis re-reads the slot map on MOVED/ASK, but a master that
		// died answers nothing, so after a failover the client would keep
		// dialling it until the periodic reload (60 s by default). A
		// one-second reload (one CLUSTER SLOTS per second per client, only
		// while there is traffic) bounds that to about a second.
		opts.ClusterStateReloadInterval = ClusterStateReloadInterval
		client = redis.NewClusterClient(opts)
	default:
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("parse redis url: %w", err)
		}
		client = redis.NewClient(opts)
	}
	if tp != nil {
		if err := redisotel.InstrumentTracing(client, redisotel.WithTracerProvider(tp)); err != nil {
			_ = client.Close()
			return nil, fmt.Errorf("trace redis: %w", err)
		}
	}
	if mp != nil {
		// The cumulative pool counts (waits, timeouts, hits, misses) as
		// monotonic counters, as the database semantic conventions have
		// them, so that rate() applies.
		if err := redisotel.InstrumentMetrics(client, redisotel.WithMeterProvider(mp), redisotel.WithSemConvCompliantMetrics(true)); err != nil {
			_ = client.Close()
			return nil, fmt.Errorf("measure redis: %w", err)
		}
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Ping(pingCtx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("ping redis: %w", err)
	}
	return client, nil
}
