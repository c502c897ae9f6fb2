package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// certReloader serves the certificate in a cert/key file pair and picks up
// a rotation without a restart: a handshake at most every interval stats
// both files and, if either changed, loads the pair. A pair that does not
// load (a half-written file, a certificate written before its key) leaves
// the current certificate in place; the next change of either file is
// tried again.
type certReloader struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger
	stats             *counters

	cert      atomic.Pointer[tls.Certificate]
	nextCheck atomic.Int64 // unix nanoseconds

	mu     sync.Mutex // serialises reloads; guards loaded and failed
	loaded fileStamp  // files behind cert
	failed fileStamp  // last pair that did not load, so it is not retried every interval
}

// fileStamp identifies a version of the pair by modification times and
// sizes; completing a half-written file changes at least one of them.
type fileStamp struct {
	certMod, keyMod   int64
	certSize, keySize int64
}

func newCertReloader(certFile, keyFile string, interval time.Duration, log *slog.Logger, st *counters) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, interval: interval, log: log, stats: st}
	if err := r.reload(true); err != nil {
		return nil, err
	}
	r.nextCheck.Store(time.Now().Add(interval).UnixNano())
	return r, nil
}

// GetCertificate is the tls.Config hook. It never blocks on a reload in
// progress: a concurrent handshake uses the current certificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := time.Now().UnixNano()
	if now >= r.nextCheck.Load() && r.mu.TryLock() {
		r.nextCheck.Store(now + int64(r.interval))
		r.reloadLocked(false)
		r.mu.Unlock()
	}
	return r.cert.Load(), nil
}

func (r *certReloader) reload(force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked(force)
}

func (r *certReloader) reloadLocked(force bool) error {
	st, err := r.stamp()
	if err != nil {
		return r.fail(st, err)
	}
	if !force && (st == r.loaded || st == r.failed) {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return r.fail(st, err)
	}
	first := r.cert.Load() == nil
	r.cert.Store(&cert)
	r.loaded, r.failed = st, fileStamp{}
	if !first {
		r.stats.certReloads.Add(1)
		r.log.Info("agtp certificate reloaded", "cert", r.certFile, "not_after", cert.Leaf.NotAfter)
	}
	return nil
}

func (r *certReloader) fail(st fileStamp, err error) error {
	err = fmt.Errorf("transport: load certificate %s / %s: %w", r.certFile, r.keyFile, err)
	if r.cert.Load() == nil {
		return err // first load: New fails
	}
	if st != r.failed {
		r.stats.certReloadFailures.Add(1)
		r.log.Warn("agtp certificate reload failed; keeping the current certificate", "err", err)
	}
	r.failed = st
	return err
}

func (r *certReloader) stamp() (fileStamp, error) {
	c, err1 := os.Stat(r.certFile)
	k, err2 := os.Stat(r.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		return fileStamp{}, err
	}
	return fileStamp{
		certMod: c.ModTime().UnixNano(), keyMod: k.ModTime().UnixNano(),
		certSize: c.Size(), keySize: k.Size(),
	}, nil
}

// GetCertificate is the tls.Config hook for another listener that must
// present the AGTP server certificate (the front door's HTTPS side): both
// share this reloader, so a rotation reaches them together and is loaded
// and counted once.
func (s *Server) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.certs.GetCertificate(hello)
}
