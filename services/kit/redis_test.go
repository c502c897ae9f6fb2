package kit

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/testkit"
)

// TestRedisPoolCheckOfPlainConnections: go-redis still drops a pooled
// connection that Redis closed, before a command is lost on it, when
// quietCheckConn answers its check for quiet sockets; and a healthy
// connection is reused. Retries are off, so a dead connection lent to a
// command fails the command: the "no pool check" row shows that this
// test sees it.
func TestRedisPoolCheckOfPlainConnections(t *testing.T) {
	r := testkit.StartRedis(t)
	admin := r.Client(t)
	// dialled keeps the connection redisDialer made last, to watch its
	// socket; "no pool check" hides it from go-redis.
	var dialled atomic.Value
	quiet := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := redisDialer(0, nil)(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		pc, ok := c.(pendingConn)
		if !ok {
			return nil, fmt.Errorf("redisDialer made a %T, which cannot tell what is pending", c)
		}
		dialled.Store(pc)
		return c, nil
	}
	noCheck := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := quiet(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return struct{ net.Conn }{c}, nil // hides syscall.Conn: go-redis checks nothing
	}
	for _, tc := range []struct {
		name      string
		dial      func(context.Context, string, string) (net.Conn, error)
		wantAlive bool
	}{
		{"quiet check", quiet, true},
		{"no pool check", noCheck, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			var dials atomic.Int32
			rdb := redis.NewClient(&redis.Options{
				Addr: r.Addr, PoolSize: 1, MaxRetries: -1,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := tc.dial(ctx, network, addr)
					if err == nil {
						dials.Add(1)
					}
					return c, err
				},
			})
			defer rdb.Close()
			for i := range 20 {
				if err := rdb.Set(ctx, "k", i, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if n := dials.Load(); n != 1 {
				t.Fatalf("%d dials for 20 commands; a healthy connection must be reused", n)
			}
			id, err := rdb.ClientID(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := admin.Do(ctx, "CLIENT", "KILL", "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
				t.Fatal(err)
			}
			// Wait, bounded, until Redis's close has reached this side.
			conn := dialled.Load().(pendingConn)
			for deadline := time.Now().Add(5 * time.Second); !conn.Pending() && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			err = rdb.Get(ctx, "k").Err()
			if alive := err == nil; alive != tc.wantAlive {
				t.Fatalf("GET after Redis closed the pooled connection: %v (want it to succeed: %v)", err, tc.wantAlive)
			}
			if tc.wantAlive && dials.Load() != 2 {
				t.Fatalf("%d dials; want the dead connection replaced by one new one", dials.Load())
			}
		})
	}
}

// TestNewRedisDoesNotResendAfterALostReply: the client NewRedis makes
// sends a write whose reply was lost once, and the caller sees the
// failure; a URL that asks for resends is refused.
func TestNewRedisDoesNotResendAfterALostReply(t *testing.T) {
	r := testkit.StartRedis(t)
	ctx := t.Context()
	proxy := testkit.NewReplyDropper(t, r.Addr, []byte("lost-reply-counter"))
	rdb, err := NewRedis(ctx, "redis://"+proxy.Addr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	proxy.Arm()
	if err := rdb.Incr(ctx, "lost-reply-counter").Err(); err == nil {
		t.Fatal("INCR whose reply was lost succeeded")
	}
	if proxy.Drops() != 1 {
		t.Fatalf("%d replies dropped, want 1", proxy.Drops())
	}
	// The proxy passes the INCR on just after it cut the client off: wait,
	// bounded, until it has run.
	direct := r.Client(t)
	n, err := direct.Get(ctx, "lost-reply-counter").Int()
	for deadline := time.Now().Add(5 * time.Second); n == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		n, err = direct.Get(ctx, "lost-reply-counter").Int()
	}
	if n != 1 {
		t.Fatalf("counter %d (%v) after one INCR whose reply was lost; want 1", n, err)
	}
	for _, url := range []string{"redis://" + r.Addr + "?max_retries=3", "redis+cluster://" + r.Addr + "?max_retries=1"} {
		if c, err := NewRedis(ctx, url, nil, nil); err == nil {
			c.Close()
			t.Errorf("NewRedis(%q) accepted resends", url)
		}
	}
}

// TestQuietCheckCallsThroughOnlyWhenSomethingIsPending: the check's f runs
// only when the socket has something to read, and then as go-redis wrote it.
func TestQuietCheckCallsThroughOnlyWhenSomethingIsPending(t *testing.T) {
	for _, pending := range []bool{false, true} {
		raw := &countingRawConn{}
		q := quietCheck{RawConn: raw, pending: func() bool { return pending }}
		called := false
		if err := q.Read(func(uintptr) bool { called = true; return true }); err != nil {
			t.Fatal(err)
		}
		if called != pending || raw.reads != btoi(pending) {
			t.Errorf("pending %v: f called %v, RawConn.Read %d times", pending, called, raw.reads)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// countingRawConn counts reads and runs f once.
type countingRawConn struct{ reads int }

func (c *countingRawConn) Control(f func(uintptr)) error { f(0); return nil }
func (c *countingRawConn) Read(f func(uintptr) bool) error {
	c.reads++
	f(0)
	return nil
}
func (c *countingRawConn) Write(f func(uintptr) bool) error { f(0); return nil }

var _ syscall.RawConn = (*countingRawConn)(nil)
