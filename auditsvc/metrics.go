package auditsvc

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agtpsuite/agtp/auditsvc/internal/chain"
	"github.com/agtpsuite/agtp/auditsvc/internal/server"
)

// appendBuckets span one pipelined append on a quiet Redis (well under a
// millisecond) to the replica WAIT's default deadline and beyond.
var appendBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// batchBuckets are pipeline sizes up to the default MaxBatch (128).
var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// observeAppends measures the chain store's appends: the latency of each
// (with its outcome: ok, or error) and each pipeline's size and round
// trip, which together say whether group commit is carrying the load.
func observeAppends(meter metric.Meter, opts *chain.Options) error {
	latency, err := meter.Float64Histogram("agtp.audit.append.duration", metric.WithUnit("s"),
		metric.WithDescription("audit append latency, queueing for a pipeline included, by outcome (ok, error)"),
		metric.WithExplicitBucketBoundaries(appendBuckets...))
	if err != nil {
		return err
	}
	size, err := meter.Int64Histogram("agtp.audit.append.batch.size", metric.WithUnit("{record}"),
		metric.WithDescription("records per pipeline of appends sent to Redis"),
		metric.WithExplicitBucketBoundaries(batchBuckets...))
	if err != nil {
		return err
	}
	roundTrip, err := meter.Float64Histogram("agtp.audit.append.batch.duration", metric.WithUnit("s"),
		metric.WithDescription("round trip of one pipeline of appends to Redis (and the replica WAIT, when configured)"),
		metric.WithExplicitBucketBoundaries(appendBuckets...))
	if err != nil {
		return err
	}
	ok := metric.WithAttributes(attribute.String("agtp.outcome", "ok"))
	failed := metric.WithAttributes(attribute.String("agtp.outcome", "error"))
	opts.ObserveAppend = func(took time.Duration, err error) {
		o := ok
		if err != nil {
			o = failed
		}
		latency.Record(context.Background(), took.Seconds(), o)
	}
	opts.ObserveBatch = func(records int, took time.Duration) {
		size.Record(context.Background(), int64(records))
		roundTrip.Record(context.Background(), took.Seconds())
	}
	return nil
}

// observe exports what an operator watches on the audit store: the chain
// store's counters (conflicts, unknown outcomes, appends not replicated in
// time, replays), the archive's backlog, writes and drops, and Redis's
// used memory (summed over the masters of a cluster), which the deploy
// configuration bounds with maxmemory.
func observe(meter metric.Meter, srv *server.Server, rdb redis.UniversalClient) error {
	store, err := meter.Int64ObservableCounter("agtp.audit.store.events",
		metric.WithDescription("chain store events, by kind: conflict, index_error, outcome_not_stored, unknown_outcome, replay, unreplicated"))
	if err != nil {
		return err
	}
	backlog, err := meter.Int64ObservableGauge("agtp.audit.archive.backlog",
		metric.WithDescription("records queued for the archive and not yet written"))
	if err != nil {
		return err
	}
	archived, err := meter.Int64ObservableCounter("agtp.audit.archive.records",
		metric.WithDescription("records the archive wrote, dropped (queue full) or lost to a write error, by outcome"))
	if err != nil {
		return err
	}
	memory, err := meter.Int64ObservableGauge("agtp.redis.used_memory",
		metric.WithDescription("Redis used_memory in bytes (the sum over masters in a cluster)"), metric.WithUnit("By"))
	if err != nil {
		return err
	}
	used := &usedMemory{rdb: rdb, every: 10 * time.Second}
	_, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st := srv.Store().Stats()
		for kind, n := range map[string]uint64{
			"conflict": st.Conflicts, "index_error": st.IndexErrors, "outcome_not_stored": st.OutcomeTokenMismatches,
			"unknown_outcome": st.UnknownOutcomes, "replay": st.Replays, "unreplicated": st.Unreplicated,
		} {
			o.ObserveInt64(store, int64(n), metric.WithAttributes(attribute.String("agtp.kind", kind)))
		}
		if a, ok := srv.ArchiveStats(); ok {
			o.ObserveInt64(backlog, int64(a.Queued))
			o.ObserveInt64(archived, int64(a.Written), metric.WithAttributes(attribute.String("agtp.outcome", "written")))
			o.ObserveInt64(archived, int64(a.Dropped), metric.WithAttributes(attribute.String("agtp.outcome", "dropped")))
			o.ObserveInt64(archived, int64(a.WriteErrors), metric.WithAttributes(attribute.String("agtp.outcome", "write_error")))
		}
		if n, ok := used.get(ctx); ok {
			o.ObserveInt64(memory, n)
		}
		return nil
	}, store, backlog, archived, memory)
	return err
}

// usedMemory reads INFO memory at most once per interval, so that a
// frequent metrics export does not become a stream of INFO commands.
type usedMemory struct {
	rdb   redis.UniversalClient
	every time.Duration

	mu   sync.Mutex
	at   time.Time
	last int64
	ok   bool
}

func (u *usedMemory) get(ctx context.Context) (int64, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.rdb == nil || (!u.at.IsZero() && time.Since(u.at) < u.every) {
		return u.last, u.ok
	}
	u.at = time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var mu sync.Mutex
	var total int64
	read := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		total += infoInt(info, "used_memory")
		mu.Unlock()
		return nil
	}
	var err error
	switch c := u.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	}
	u.last, u.ok = total, err == nil
	return u.last, u.ok
}

// infoInt reads an integer field of an INFO reply; 0 when absent.
func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
