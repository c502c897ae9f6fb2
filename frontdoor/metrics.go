package frontdoor

import (
	"context"
	"crypto/tls"
	"crypto/x509"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agtpsuite/agtp/services/kit"
)

// observeAGTPCertificate reports the expiry of the public AGTP server
// certificate (the AGTP listeners' and the HTTPS side's), as rotated.
func (s *Service) observeAGTPCertificate(meter metric.Meter) error {
	return kit.ObserveCertificates(meter, map[string]func() (*x509.Certificate, error){
		"agtp_server": func() (*x509.Certificate, error) {
			c, err := s.transport.GetCertificate(&tls.ClientHelloInfo{})
			if err != nil {
				return nil, err
			}
			if c.Leaf != nil {
				return c.Leaf, nil
			}
			return x509.ParseCertificate(c.Certificate[0])
		},
	})
}

// observeCaches reports the front door's caches: lookups by cache and
// result (hit, miss), whose ratio says how often a request costs an extra
// hop to identitysvc (agents) or policysvc (AGP keys, decisions; a
// decision is only looked up when it may be reused), and the revision of
// the catalog snapshot, which the front door holds whole (every routing
// decision is local, so the catalog has no misses; a revision that stops
// following catalogsvc's is what to watch).
func (s *Service) observeCaches(meter metric.Meter) error {
	lookups, err := meter.Int64ObservableCounter("agtp.frontdoor.cache.lookups", metric.WithUnit("{lookup}"),
		metric.WithDescription("front door cache lookups, by cache (agents, agp_keys, decisions) and result (hit, miss)"))
	if err != nil {
		return err
	}
	revision, err := meter.Int64ObservableGauge("agtp.frontdoor.catalog.revision",
		metric.WithDescription("revision of the catalog snapshot the front door routes with"))
	if err != nil {
		return err
	}
	caches := map[string]*kit.CacheStats{"agents": &s.agents.Stats, "decisions": &s.decisions.Stats}
	if s.agp != nil {
		caches["agp_keys"] = s.agp.KeyCacheStats()
	}
	hit := attribute.String("agtp.result", "hit")
	miss := attribute.String("agtp.result", "miss")
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for name, st := range caches {
			h, m := st.Load()
			c := attribute.String("agtp.cache", name)
			o.ObserveInt64(lookups, int64(h), metric.WithAttributes(c, hit))
			o.ObserveInt64(lookups, int64(m), metric.WithAttributes(c, miss))
		}
		if cur := s.catalog.Current(); cur != nil {
			o.ObserveInt64(revision, int64(cur.Snapshot.GetRevision()))
		}
		return nil
	}, lookups, revision)
	return err
}
