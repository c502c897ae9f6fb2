package kit

import (
	"context"
	"crypto/x509"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ObserveCertificates reports when each named certificate expires, as the
// gauge agtp.certificate.not_after (Unix seconds), read at every export so
// that a rotated certificate shows at once. The shipped alert fires two
// weeks before (deploy/observability). A certificate that cannot be read
// is left out of that export; the listener that uses it reports why.
func ObserveCertificates(meter metric.Meter, certs map[string]func() (*x509.Certificate, error)) error {
	notAfter, err := meter.Int64ObservableGauge("agtp.certificate.not_after", metric.WithUnit("s"),
		metric.WithDescription("expiry (notAfter) of the certificates this process presents, in Unix seconds, by certificate"))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for name, leaf := range certs {
			if c, err := leaf(); err == nil {
				o.ObserveInt64(notAfter, c.NotAfter.Unix(), metric.WithAttributes(attribute.String("agtp.certificate", name)))
			}
		}
		return nil
	}, notAfter)
	return err
}
