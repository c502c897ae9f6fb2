package agp

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/auditsvc"
	"github.com/agtpsuite/agtp/policysvc"
	"github.com/agtpsuite/agtp/policysvc/agpkey"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// startPolicy runs a policysvc replica on rds and returns its AgpService
// as the front door reaches it (mTLS, the front door's certificate).
// policyClients are connections to one policysvc as the front door and
// as an operator.
type policyClients struct {
	frontdoor, operator agpv1.AgpServiceClient
}

func startPolicy(t *testing.T, pki devpki.Layout, rds *testkit.Redis) policyClients {
	t.Helper()
	cfg := policysvc.DefaultConfig()
	// policysvc signs key revocations into the agent's lifecycle stream
	// through auditsvc.
	cfg.Peers = map[string]string{"auditsvc": startAudit(t, pki, rds)}
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = pki.CA(), pki.Cert("policysvc"), pki.Key("policysvc")
	cfg.SigningKeyFile = pki.SigningKey()
	cfg.RedisURL = rds.URL()
	cfg.LogLevel = "error"
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", ""
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := policysvc.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("policysvc: %v", err)
		}
	})
	tel, err := kit.NewTelemetry(context.Background(), "frontdoor-test", kit.TelemetryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dial := func(as string) agpv1.AgpServiceClient {
		m, err := kit.LoadMTLS(pki.CA(), pki.Cert(as), pki.Key(as))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := kit.DialService(svc.GRPCAddr(), "policysvc", m, tel)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return agpv1.NewAgpServiceClient(conn)
	}
	return policyClients{frontdoor: dial("frontdoor"), operator: dial(devpki.Admin)}
}

func (c *keyCache) isWatching() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watching
}

// TestKeyChangesReachTheCache runs the front door's key cache against two
// real policysvc replicas on one Redis: it watches replica B, and keys are
// changed through replica A (so not through this front door), except
// where the front door's own /keys revokes one.
func TestKeyChangesReachTheCache(t *testing.T) {
	pki, rds := testkit.PKI(t), testkit.StartRedis(t)
	// A is an operator's connection (it manages keys directly), B the
	// front door's.
	viaA, viaB := startPolicy(t, pki, rds).operator, startPolicy(t, pki, rds).frontdoor
	h := New(Options{Keys: viaB, Agents: agentStates{}, Log: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	h.Register(mux)
	ctx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() { _ = h.WatchKeys(ctx); close(watchDone) }()
	t.Cleanup(func() { stopWatch(); <-watchDone })
	testkit.WaitFor(t, 5*time.Second, "the key watch to be live", h.keys.isWatching)

	const agent = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	call := func(method, path, key string) (int, map[string]any) {
		t.Helper()
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("X-Api-Key", key)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s %s: %q is not JSON", method, path, w.Body)
		}
		return w.Code, body
	}
	// usable checks that a key authenticates and, when the watch is live,
	// that the answer is now cached: without an eviction it would keep
	// working for the cache TTL.
	usable := func(secret string, cached bool) {
		t.Helper()
		if st, body := call("GET", "/keys/me", secret); st != 200 {
			t.Fatalf("/keys/me = %d %v, want 200", st, body)
		}
		if got := h.keys.get(agpkey.Hash(secret)) != nil; got != cached {
			t.Fatalf("cached = %v, want %v", got, cached)
		}
	}
	refused := func(secret string) {
		t.Helper()
		if st, body := call("GET", "/keys/me", secret); st != 401 || body["code"] != CodeUnauthorized {
			t.Fatalf("/keys/me = %d %v, want 401 %s", st, body, CodeUnauthorized)
		}
	}
	evicted := func(secret string) {
		t.Helper()
		testkit.WaitFor(t, 2*time.Second, "the key to leave the cache", func() bool { return h.keys.get(agpkey.Hash(secret)) == nil })
	}
	create := func(scopes ...string) (id, secret string) {
		t.Helper()
		k := must(viaA.CreateApiKey(context.Background(), &agpv1.CreateApiKeyRequest{AgentId: agent, Scopes: scopes}))(t)
		return k.GetKey().GetId(), k.GetSecret()
	}

	t.Run("revoked through another replica", func(t *testing.T) {
		id, secret := create("query")
		usable(secret, true)
		must(viaA.RevokeApiKey(context.Background(), &agpv1.RevokeApiKeyRequest{Id: id}))(t)
		evicted(secret)
		refused(secret)
	})

	t.Run("replaced through another replica", func(t *testing.T) {
		old, _ := agpkey.NewSecret()
		repl, _ := agpkey.NewSecret()
		must(viaA.ImportApiKey(context.Background(), &agpv1.ImportApiKeyRequest{Id: "rotated", AgentId: agent, Scopes: []string{"*"}, KeySha256: agpkey.Hash(old)}))(t)
		usable(old, true)
		must(viaA.ImportApiKey(context.Background(), &agpv1.ImportApiKeyRequest{Id: "rotated", AgentId: agent, Scopes: []string{"query"}, KeySha256: agpkey.Hash(repl)}))(t)
		evicted(old)
		refused(old)
		usable(repl, true)
	})

	t.Run("revoked through this front door: the very next request is refused", func(t *testing.T) {
		_, admin := create("admin")
		id, secret := create("query")
		usable(secret, true)
		if st, body := call("DELETE", "/keys/"+id, admin); st != 200 || body["revoked"] != true {
			t.Fatalf("DELETE /keys/%s = %d %v", id, st, body)
		}
		refused(secret) // no wait for the event
	})

	t.Run("a broken watch empties the cache, which refills once it is back", func(t *testing.T) {
		_, secret := create("query")
		usable(secret, true)
		if err := rds.Client(t).Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		// No key changed; the front door cannot know that.
		evicted(secret)
		testkit.WaitFor(t, 5*time.Second, "the key watch to be live again", h.keys.isWatching)
		usable(secret, true)
	})

	t.Run("without a watch, every request asks policysvc", func(t *testing.T) {
		id, secret := create("query")
		usable(secret, true)
		stopWatch()
		<-watchDone
		if h.keys.get(agpkey.Hash(secret)) != nil {
			t.Fatal("a stopped watch left the cache filled")
		}
		usable(secret, false)
		must(viaA.RevokeApiKey(context.Background(), &agpv1.RevokeApiKeyRequest{Id: id}))(t)
		refused(secret)
	})
}

// must(call)(t) fails the test on the call's error.
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// startAudit runs an auditsvc replica on rds and returns its gRPC address.
func startAudit(t *testing.T, pki devpki.Layout, rds *testkit.Redis) string {
	t.Helper()
	cfg := auditsvc.DefaultConfig()
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = pki.CA(), pki.Cert("auditsvc"), pki.Key("auditsvc")
	cfg.SigningKeyFile = pki.SigningKey()
	cfg.RedisURL = rds.URL()
	cfg.LogLevel = "error"
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", ""
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := auditsvc.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("auditsvc: %v", err)
		}
	})
	return svc.GRPCAddr()
}
