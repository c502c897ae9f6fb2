package kit

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// MaxHTTPConns bounds the connections one HTTPS listener of the suite (a
// REST gateway, the front door's HTTPS side) holds at once; further
// clients wait in the kernel's accept queue until one closes.
const MaxHTTPConns = 2048

// NewHTTPServer is an HTTPS server with the bounds every listener of the
// suite has: header and body read deadlines, an idle timeout and a header
// size limit, so a slow or silent peer cannot hold a connection or memory
// without end. There is no write timeout: REST watch streams last as long
// as the watch.
func NewHTTPServer(h http.Handler, tlsCfg *tls.Config, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// LimitListener caps the connections accepted through ln at MaxHTTPConns.
func LimitListener(ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, MaxHTTPConns)
}
