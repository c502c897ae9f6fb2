package kit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// The opt-in profiling listener (Common.PprofAddr): net/http/pprof on a
// loopback address, so that `go tool pprof` can show where a service
// spends its time under load. It is a plain HTTP server outside the
// suite's mTLS, which is why only loopback addresses are accepted.

func checkPprofAddr(addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("pprof address %q: %w", addr, err)
	}
	if !IsLoopbackAddr(addr) {
		return fmt.Errorf("pprof address %q is not a loopback address", addr)
	}
	return nil
}

// startPprof serves the profiles on addr until the returned server is
// closed; it also returns the address it listens on.
func startPprof(addr string, log *slog.Logger) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("pprof listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof listener stopped", "err", err)
		}
	}()
	log.Info("serving pprof (profiling) on loopback", "addr", ln.Addr().String())
	return srv, ln.Addr().String(), nil
}

func stopPprof(srv *http.Server) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}
