package auditsvc

import (
	"context"
	"log/slog"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/agtpsuite/agtp/auditsvc/internal/archive"
	"github.com/agtpsuite/agtp/auditsvc/internal/server"
	"github.com/agtpsuite/agtp/services/testkit"
)

// The audit store's metrics reach a reader: Redis's used memory (read
// from the real server), the archive's backlog and outcomes, and the
// chain store's events.
func TestAuditMetricsAreExported(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	srv, err := server.New(rdb, slog.New(slog.DiscardHandler), server.Options{Archive: archive.Options{Dir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	if err := observe(mp.Meter("test"), srv, rdb); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					seen[m.Name] += p.Value
				}
				seen[m.Name+" points"] += int64(len(d.DataPoints))
			case metricdata.Sum[int64]:
				seen[m.Name+" points"] += int64(len(d.DataPoints))
			}
		}
	}
	if seen["agtp.redis.used_memory"] <= 0 {
		t.Errorf("used memory %d, want Redis's", seen["agtp.redis.used_memory"])
	}
	if seen["agtp.audit.archive.backlog points"] != 1 || seen["agtp.audit.archive.records points"] != 3 || seen["agtp.audit.store.events points"] != 6 {
		t.Errorf("metrics seen: %v", seen)
	}
}
