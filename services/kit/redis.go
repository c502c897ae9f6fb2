package kit

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agtpsuite/agtp/services/rawsock"
)

// ClusterStateReloadInterval bounds how stale a Redis Cluster client's
// slot map may get (see NewRedis).
const ClusterStateReloadInterval = time.Second

// NewRedis connects to Redis. A redis:// or rediss:// URL is one node; a
// redis+cluster:// (or rediss+cluster://) URL is a Redis Cluster, with more
// seed nodes given as addr= query parameters. Commands are traced when tp
// is not nil; with mp, the connection pool and the time each command holds
// a connection are measured (redisotel's db.client.connections.*).
//
// A write whose reply was lost may have run, and running it again is a
// second write unless the write recognises itself, so the client does not
// resend commands (MaxRetries -1, and a URL's max_retries is refused): the
// command fails and its caller decides (docs/operations.md, "Redis"). A
// dead pooled connection is still dropped before a command is lost on it
// (quietCheckConn), which is what the resends were mostly for. A Cluster
// client still resends a command or pipeline after a network error, in
// the loop that follows MOVED and ASK (up to MaxRedirects times), so
// auditsvc's appends and identitysvc's registrations recognise a resend
// of themselves as well.
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
		if opts.MaxRetries > 0 {
			return nil, errRedisRetries
		}
		opts.MaxRetries = -1
		opts.Dialer = redisDialer(opts.DialTimeout, opts.TLSConfig)
		client = redis.NewClusterClient(opts)
	default:
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("parse redis url: %w", err)
		}
		if opts.MaxRetries > 0 {
			return nil, errRedisRetries
		}
		opts.MaxRetries = -1
		opts.Dialer = redisDialer(opts.DialTimeout, opts.TLSConfig)
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

// errRedisRetries refuses a Redis URL with max_retries (NewRedis).
var errRedisRetries = errors.New("redis url: max_retries is refused: a resent write could run twice (docs/operations.md, \"Redis\")")

// redisDialer is go-redis's own dialer (redis.NewDialer: the dial timeout,
// its keep-alive settings, TLS when the URL asks for it) with the TCP
// connection under TLS made by rawsock, so that reads and writes keep
// their processor.
func redisDialer(timeout time.Duration, tlsConf *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	// The timeout is the context's, which bounds the TLS handshake too.
	dial := rawsock.Dialer(&net.Dialer{KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3,
	}})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tlsConf == nil {
			if pc, ok := c.(pendingConn); ok {
				return quietCheckConn{pc}, nil
			}
			return c, nil
		}
		conf := tlsConf
		if conf.ServerName == "" {
			// as tls.DialWithDialer does
			host, _, _ := net.SplitHostPort(addr)
			conf = conf.Clone()
			conf.ServerName = host
		}
		tc := tls.Client(c, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return tc, nil
	}
}

// pendingConn is a connection that can tell, without the runtime's
// system-call path, whether a read would return at once (rawsock.Conn).
type pendingConn interface {
	net.Conn
	syscall.Conn
	Pending() bool
}

// quietCheckConn is a plain Redis connection that answers go-redis's pool
// check itself while the socket is quiet.
//
// go-redis checks each connection it takes from its pool, and before a
// command on a connection it has not checked lately, by peeking at the
// socket through the connection's syscall.RawConn: recvfrom with
// MSG_PEEK|MSG_DONTWAIT, where nothing to read means healthy, and a byte
// or the end of the stream means the connection is dropped (or its push
// frames read). Its recvfrom is an ordinary system call, so it enters the
// scheduler's system-call state, and in a one-P service whose processor
// had gone idle the first such call wakes the runtime's monitor thread,
// which then polls every 20 µs for about a millisecond: most of
// auditsvc's context switches under load, and 5 % of its CPU for the
// peek alone (docs/performance.md, "The pool check of a Redis
// connection"). The connection peeks with rawsock's direct call first;
// only when something is pending does go-redis's own check run, and it
// then sees exactly what it would have seen. Over TLS go-redis makes no
// such check (a tls.Conn is not a syscall.Conn), so this is plain TCP
// only.
type quietCheckConn struct{ pendingConn }

// SyscallConn returns the socket's RawConn with Read answering a quiet
// socket's check (quietCheck).
func (c quietCheckConn) SyscallConn() (syscall.RawConn, error) {
	rc, err := c.pendingConn.SyscallConn()
	if err != nil {
		return nil, err
	}
	return quietCheck{RawConn: rc, pending: c.Pending}, nil
}

// NetConn returns the connection underneath, as tls.Conn's does.
func (c quietCheckConn) NetConn() net.Conn { return c.pendingConn }

// quietCheck is a RawConn whose Read returns at once, without calling f,
// when nothing is pending on the socket. That is the answer go-redis's
// check (its only use of the RawConn) takes for a healthy connection;
// anything else goes to f as usual. It is not a general-purpose RawConn:
// a reader that must be called to learn that nothing is there would wait
// for nothing.
type quietCheck struct {
	syscall.RawConn
	pending func() bool
}

func (q quietCheck) Read(f func(fd uintptr) bool) error {
	if !q.pending() {
		return nil
	}
	return q.RawConn.Read(f)
}
