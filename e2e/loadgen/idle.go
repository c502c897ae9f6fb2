package loadgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// MaxIdleConns bounds IdleConfig.Conns.
const MaxIdleConns = 100_000

// IdleConfig is the idle-connection memory test.
type IdleConfig struct {
	Target Target
	// Conns is how many TLS connections to open and hold.
	Conns int
	// Parallel is how many handshakes run at once. Default 32.
	Parallel int
	// Hold is how long the connections are held while the server's memory
	// is sampled. Default 5s. Keep Hold plus the time to open them under
	// the server's idle timeout (60 s by default), or it starts closing
	// them.
	Hold time.Duration
	// PID is the front door process.
	PID int
	// Probes is how many requests are sent on one more connection while
	// the idle ones are held, to show the server still answers. Default
	// 200.
	Probes int
	// Sources are local addresses the connections are opened from, in
	// turn, so that a server's per-address limit (the front door's
	// default is 1000) does not cap the test; default Target.Source.
	Sources []string
}

// IdleResult is what the idle-connection test measured.
type IdleResult struct {
	Requested, Opened int
	// Established is how many server-side sockets on the AGTP port were
	// ESTABLISHED while the connections were held (from /proc/net/tcp
	// and /proc/net/tcp6), the check that the server really holds them.
	Established int
	OpenTime    time.Duration
	// RSSBefore is the front door's resident memory before opening,
	// RSSHeld the largest sample while holding, RSSAfter after closing.
	RSSBefore, RSSHeld, RSSAfter int64
	// FDLimit is the front door's soft limit on open files.
	FDLimit uint64
	Errors  map[string]int
	// Probe is the latency of DISCOVER / on a fresh connection while the
	// idle connections are held.
	Probe Summary
}

// PerConn is the front door's extra resident memory per held connection.
func (r *IdleResult) PerConn() int64 {
	if r.Opened == 0 {
		return 0
	}
	return (r.RSSHeld - r.RSSBefore) / int64(r.Opened)
}

// MeasureIdle opens cfg.Conns TLS connections to the front door, sends
// nothing on them, and samples the front door's resident memory while
// they are held. The generator needs a file descriptor per connection:
// call RaiseFileLimit first.
func MeasureIdle(ctx context.Context, cfg IdleConfig) (*IdleResult, error) {
	if cfg.Conns <= 0 || cfg.Conns > MaxIdleConns {
		return nil, fmt.Errorf("idle connections %d outside 1..%d", cfg.Conns, MaxIdleConns)
	}
	if cfg.PID <= 0 {
		return nil, errors.New("the front door's pid is required")
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 32
	}
	if cfg.Hold <= 0 {
		cfg.Hold = 5 * time.Second
	}
	if cfg.Probes <= 0 {
		cfg.Probes = 200
	}
	res := &IdleResult{Requested: cfg.Conns, Errors: map[string]int{}}
	res.FDLimit, _ = OpenFileLimit(cfg.PID)
	var err error
	if res.RSSBefore, err = RSS(cfg.PID); err != nil {
		return nil, err
	}

	conf := cfg.Target.tlsConfig()
	conns := make([]*tls.Conn, cfg.Conns)
	var mu sync.Mutex
	next := 0
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.Parallel {
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(conns) {
					return
				}
				t := cfg.Target
				if len(cfg.Sources) > 0 {
					t.Source = cfg.Sources[i%len(cfg.Sources)]
				}
				tc, err := dialTLS(ctx, t, conf)
				if err != nil {
					mu.Lock()
					res.Errors[err.Error()]++
					mu.Unlock()
					continue
				}
				conns[i] = tc
			}
		})
	}
	wg.Wait()
	res.OpenTime = time.Since(start)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for _, c := range conns {
		if c != nil {
			res.Opened++
		}
	}

	// Sample while holding; the probe runs alongside.
	probe := make(chan Summary, 1)
	go func() { probe <- probeLatency(ctx, cfg.Target, cfg.Probes) }()
	holdEnd := time.Now().Add(cfg.Hold)
	for time.Now().Before(holdEnd) && ctx.Err() == nil {
		if rss, err := RSS(cfg.PID); err == nil {
			res.RSSHeld = max(res.RSSHeld, rss)
		}
		time.Sleep(250 * time.Millisecond)
	}
	res.Probe = <-probe
	_, port, _ := net.SplitHostPort(cfg.Target.Addr)
	res.Established = establishedOn(port)

	for i, c := range conns {
		if c != nil {
			_ = c.Close()
			conns[i] = nil
		}
	}
	time.Sleep(time.Second) // let the server notice the closes
	res.RSSAfter, _ = RSS(cfg.PID)
	return res, ctx.Err()
}

// probeLatency sends n DISCOVER / requests on one fresh connection.
func probeLatency(ctx context.Context, t Target, n int) Summary {
	s, _, _ := Probe(ctx, t, mustRequest("DISCOVER", "/"), n, 10*time.Millisecond)
	return s
}

// Probe sends req n times, one at a time, on one persistent TLS
// connection (dialled again if the server closes it), pausing between
// requests, and returns the latency of the responses and their statuses.
// It measures a single request's round trip, without load.
func Probe(ctx context.Context, t Target, req *agtp.Request, n int, pause time.Duration) (Summary, map[int]uint64, error) {
	var h Histogram
	statuses := map[int]uint64{}
	slot := &tcpSlot{t: t, conf: t.tlsConfig()}
	defer slot.close()
	var errs []error
	for range n {
		if ctx.Err() != nil {
			break
		}
		if _, err := slot.get(ctx); err != nil {
			return h.Summarize(), statuses, err
		}
		begin := time.Now()
		resp, err := slot.send(ctx, req)
		if err != nil {
			if errs = append(errs, err); len(errs) > n/10 {
				return h.Summarize(), statuses, errors.Join(errs...)
			}
			continue
		}
		h.Record(time.Since(begin))
		statuses[resp.Status]++
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	return h.Summarize(), statuses, nil
}

// establishedOn counts ESTABLISHED sockets whose local port is port, in
// this network namespace. On loopback both ends are local, so only the
// server's side has the AGTP port as its local port.
func establishedOn(port string) int {
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0
	}
	want := fmt.Sprintf(":%04X", p)
	n := 0
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ...; 01 is ESTABLISHED.
			if len(fields) > 3 && strings.HasSuffix(fields[1], want) && fields[3] == "01" {
				n++
			}
		}
		f.Close()
	}
	return n
}

// discoverOnce checks the target answers, for callers that want to fail
// fast before a long run.
func discoverOnce(ctx context.Context, t Target) (*agtp.Response, error) {
	tc, err := dialTLS(ctx, t, t.tlsConfig())
	if err != nil {
		return nil, err
	}
	c := newTCPConn(tc)
	defer c.close()
	return c.send(ctx, mustRequest("DISCOVER", "/"))
}

// Check sends one DISCOVER / and reports whether the target answered 200.
func Check(ctx context.Context, t Target) error {
	resp, err := discoverOnce(ctx, t)
	if err != nil {
		return err
	}
	if resp.Status != agtp.StatusOK {
		return fmt.Errorf("DISCOVER / answered %d: %s", resp.Status, resp.Body)
	}
	return nil
}
