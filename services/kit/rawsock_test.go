package kit

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/rawsock"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestInternalConnectionsUseDirectSocketIO: the connections a service's
// gRPC listener accepts, its calls to peer services and its Redis
// connections, plain and over TLS, all read and write with rawsock's
// direct calls (docs/performance.md, "Direct socket I/O").
func TestInternalConnectionsUseDirectSocketIO(t *testing.T) {
	pki := testkit.PKI(t)
	m, err := LoadMTLS(pki.CA(), pki.Cert("policysvc"), pki.Key("policysvc"))
	if err != nil {
		t.Fatal(err)
	}
	tel, err := NewTelemetry(t.Context(), "policysvc", TelemetryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultCommon("policysvc", "127.0.0.1:0", "")
	srv, err := NewServer(cfg, Deps{Logger: cfg.Logger(os.Stderr), MTLS: m, Telemetry: tel})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.closeListeners()

	t.Run("gRPC listener and peer dial", func(t *testing.T) {
		dialed, err := dialInternal(t.Context(), srv.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer dialed.Close()
		accepted, err := srv.grpcLis.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer accepted.Close()
		for side, c := range map[string]net.Conn{"dialed": dialed, "accepted": accepted} {
			if _, ok := c.(*rawsock.Conn); !ok {
				t.Errorf("%s connection is %T, want *rawsock.Conn", side, c)
			}
		}
	})

	t.Run("redis", func(t *testing.T) {
		tlsPort := testkit.FreePort(t)
		r := testkit.StartRedis(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", pki.Cert("policysvc"),
			"--tls-key-file", pki.Key("policysvc"), "--tls-ca-cert-file", pki.CA(), "--tls-auth-clients", "no")
		t.Run("NewRedis", func(t *testing.T) {
			rdb, err := NewRedis(t.Context(), "redis://"+r.Addr, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			var hook dialSeen
			rdb.AddHook(&hook)
			// NewRedis dialled before the hook: close the pooled
			// connections, so the next command dials again.
			_ = rdb.Do(t.Context(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "no").Err()
			// NewRedis does not resend: a Ping lent the killed connection
			// before its close arrived fails, and the next one dials.
			for range 3 {
				if err = rdb.Ping(t.Context()).Err(); err == nil {
					break
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := hook.conn.(quietCheckConn); !ok {
				t.Errorf("NewRedis's connection is %T, want quietCheckConn", hook.conn)
			} else if under := hook.conn.(quietCheckConn).NetConn(); !isRawsock(under) {
				t.Errorf("NewRedis's connection is over %T, want *rawsock.Conn", under)
			}
		})
		for _, tc := range []struct {
			name string
			addr string
			conf *tls.Config
		}{
			{"plain", r.Addr, nil},
			// No ServerName: taken from the address, as tls.DialWithDialer does.
			{"tls", net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort)), &tls.Config{RootCAs: m.Pool(), MinVersion: tls.VersionTLS12}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				rdb := redis.NewClient(&redis.Options{Addr: tc.addr, Dialer: redisDialer(0, tc.conf)})
				defer rdb.Close()
				var hook dialSeen
				rdb.AddHook(&hook)
				ctx := context.Background()
				if err := rdb.Set(ctx, "k", tc.name, 0).Err(); err != nil {
					t.Fatal(err)
				}
				if v, err := rdb.Get(ctx, "k").Result(); v != tc.name || err != nil {
					t.Fatalf("GET = %q, %v", v, err)
				}
				var under net.Conn
				switch c := hook.conn.(type) {
				case *tls.Conn:
					under = c.NetConn()
				case quietCheckConn:
					under = c.NetConn()
				}
				if _, isTLS := hook.conn.(*tls.Conn); under == nil || isTLS != (tc.conf != nil) {
					t.Fatalf("the connection is %T", hook.conn)
				}
				if !isRawsock(under) {
					t.Errorf("the connection under it is %T, want *rawsock.Conn", under)
				}
			})
		}
	})
}

func isRawsock(c net.Conn) bool {
	_, ok := c.(*rawsock.Conn)
	return ok
}

// dialSeen is a go-redis hook that keeps the last connection dialled.
type dialSeen struct{ conn net.Conn }

func (h *dialSeen) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		h.conn = c
		return c, err
	}
}

func (h *dialSeen) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *dialSeen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRuntimeSocketIOSwitch: AGTP_RUNTIME_SOCKET_IO turns the direct
// calls off for the process (on or off, as the other switches), and a
// value that is neither is refused rather than read as off.
func TestRuntimeSocketIOSwitch(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bool
		fails bool
	}{{"on", true, false}, {"off", false, false}, {"", false, false}, {"sometimes", false, true}} {
		var c Common
		err := c.ApplyEnv(func(k string) (string, bool) {
			if k == "AGTP_RUNTIME_SOCKET_IO" {
				return tc.value, true
			}
			return "", false
		})
		if (err != nil) != tc.fails || c.RuntimeSocketIO != tc.want {
			t.Errorf("%q: RuntimeSocketIO %v, error %v", tc.value, c.RuntimeSocketIO, err)
		}
	}
}
