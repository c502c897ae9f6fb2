package agp

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/policysvc/agpkey"
	"github.com/agtpsuite/agtp/policysvc/internal/changelog/changelogtest"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// replica is one policysvc AgpService with its Redis subscription running,
// served over real gRPC on loopback.
type replica struct {
	srv    *Server
	client agpv1.AgpServiceClient
}

func startReplica(t *testing.T, rds *testkit.Redis) *replica {
	t.Helper()
	rdb := rds.Client(t)
	srv, err := New(rdb, slog.New(slog.DiscardHandler), Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.RecordChanges(changelogtest.Start(t).Recorder)
	testkit.Run(t, "hub", srv.Run)
	conn := testkit.ServeGRPC(t, func(g grpc.ServiceRegistrar) { agpv1.RegisterAgpServiceServer(g, srv) })
	return &replica{srv: srv, client: agpv1.NewAgpServiceClient(conn)}
}

// watch opens a stream once the replica's subscription is up and returns
// it after its subscribed confirmation.
func (r *replica) watch(t *testing.T) grpc.ServerStreamingClient[agpv1.WatchKeyEventsResponse] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var stream grpc.ServerStreamingClient[agpv1.WatchKeyEventsResponse]
	testkit.WaitFor(t, 5*time.Second, "a live key watch", func() bool {
		s, err := r.client.WatchKeyEvents(ctx, &agpv1.WatchKeyEventsRequest{})
		if err != nil {
			return false
		}
		first, err := s.Recv()
		if err != nil {
			return false
		}
		if !first.GetSubscribed() || first.GetKeyId() != "" {
			t.Fatalf("first message %v, want only subscribed", first)
		}
		stream = s
		return true
	})
	return stream
}

// next receives one message, failing after a short bound.
func next(t *testing.T, s grpc.ServerStreamingClient[agpv1.WatchKeyEventsResponse]) (*agpv1.WatchKeyEventsResponse, error) {
	t.Helper()
	type res struct {
		ev  *agpv1.WatchKeyEventsResponse
		err error
	}
	ch := make(chan res, 1)
	go func() { ev, err := s.Recv(); ch <- res{ev, err} }()
	select {
	case r := <-ch:
		return r.ev, r.err
	case <-time.After(2 * time.Second):
		t.Fatal("no key event within 2s")
		return nil, nil
	}
}

func TestWatchKeyEventsAcrossReplicas(t *testing.T) {
	rds := testkit.StartRedis(t)
	a, b := startReplica(t, rds), startReplica(t, rds)
	onB, onA := b.watch(t), a.watch(t)

	created := must(a.client.CreateApiKey(ctx(), &agpv1.CreateApiKeyRequest{AgentId: alice, Scopes: []string{"query"}}))(t)
	must(a.client.ImportApiKey(ctx(), &agpv1.ImportApiKeyRequest{Id: "imported", AgentId: bob, Scopes: []string{"query"}, KeySha256: hashA}))(t)

	// Each change is made through A; both replicas' watchers see it, in
	// order. Creating a key with a new id is not a change anyone cached,
	// so the first event is the first row's.
	for _, tc := range []struct {
		name   string
		change func() error
		want   *agpv1.WatchKeyEventsResponse
	}{
		{"revoke", func() error {
			_, err := a.client.RevokeApiKey(ctx(), &agpv1.RevokeApiKeyRequest{Id: created.GetKey().GetId()})
			return err
		}, &agpv1.WatchKeyEventsResponse{Change: agpv1.ApiKeyChange_API_KEY_CHANGE_REVOKED, KeyId: created.GetKey().GetId(), AgentId: alice, KeySha256: []string{agpkey.Hash(created.GetSecret())}}},
		{"replace with another secret and agent", func() error {
			_, err := a.client.ImportApiKey(ctx(), &agpv1.ImportApiKeyRequest{Id: "imported", AgentId: alice, Scopes: []string{"*"}, KeySha256: hashB})
			return err
		}, &agpv1.WatchKeyEventsResponse{Change: agpv1.ApiKeyChange_API_KEY_CHANGE_REPLACED, KeyId: "imported", AgentId: bob, KeySha256: []string{hashA, hashB}}},
		{"same secret, fewer scopes", func() error {
			_, err := a.client.ImportApiKey(ctx(), &agpv1.ImportApiKeyRequest{Id: "imported", AgentId: alice, Scopes: []string{"query"}, KeySha256: hashB})
			return err
		}, &agpv1.WatchKeyEventsResponse{Change: agpv1.ApiKeyChange_API_KEY_CHANGE_REPLACED, KeyId: "imported", AgentId: alice, KeySha256: []string{hashB}}},
		{"revoke the imported key", func() error {
			_, err := a.client.RevokeApiKey(ctx(), &agpv1.RevokeApiKeyRequest{Id: "imported"})
			return err
		}, &agpv1.WatchKeyEventsResponse{Change: agpv1.ApiKeyChange_API_KEY_CHANGE_REVOKED, KeyId: "imported", AgentId: alice, KeySha256: []string{hashB}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.change(); err != nil {
				t.Fatal(err)
			}
			for name, s := range map[string]grpc.ServerStreamingClient[agpv1.WatchKeyEventsResponse]{"B": onB, "A": onA} {
				ev, err := next(t, s)
				if err != nil {
					t.Fatalf("watcher on %s: %v", name, err)
				}
				if ev.GetChange() != tc.want.GetChange() || ev.GetKeyId() != tc.want.GetKeyId() || ev.GetAgentId() != tc.want.GetAgentId() ||
					!slices.Equal(ev.GetKeySha256(), tc.want.GetKeySha256()) || ev.GetSubscribed() || ev.GetChangedAt() == nil {
					t.Errorf("watcher on %s got %v, want %v", name, ev, tc.want)
				}
			}
		})
	}
	// A failed change announces nothing: revoking an unknown id is
	// NotFound, and the next event is the one after it.
	if _, err := a.client.RevokeApiKey(ctx(), &agpv1.RevokeApiKeyRequest{Id: "imported"}); code(err) != codes.NotFound {
		t.Fatalf("second revoke: %v, want NotFound", err)
	}
	last := must(b.client.CreateApiKey(ctx(), &agpv1.CreateApiKeyRequest{AgentId: bob, Scopes: []string{"query"}}))(t)
	must(b.client.RevokeApiKey(ctx(), &agpv1.RevokeApiKeyRequest{Id: last.GetKey().GetId()}))(t)
	if ev, err := next(t, onA); err != nil || ev.GetKeyId() != last.GetKey().GetId() {
		t.Fatalf("after a refused revoke, watcher on A got %v (%v), want the revocation made through B", ev, err)
	}
}

func TestWatchEndsWhenTheSubscriptionBreaks(t *testing.T) {
	rds := testkit.StartRedis(t)
	r := startReplica(t, rds)
	admin := rds.Client(t)

	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T)
	}{
		{"subscription connection killed", func(t *testing.T) {
			if err := admin.Do(ctx(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"redis restarted", func(t *testing.T) { rds.Restart(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := r.watch(t)
			tc.breakIt(t)
			// Changes published while the subscription was down are lost,
			// so the stream must end rather than go quiet.
			_, err := next(t, s)
			if code(err) != codes.Unavailable {
				t.Fatalf("stream after the break: %v, want Unavailable", err)
			}
			// Once the subscription is back, a new watch is live again.
			s = r.watch(t)
			if _, err := r.client.ImportApiKey(ctx(), &agpv1.ImportApiKeyRequest{Id: "k", AgentId: bob, Scopes: []string{"query"}, KeySha256: hashA}); err != nil {
				t.Fatal(err)
			}
			if _, err := r.client.RevokeApiKey(ctx(), &agpv1.RevokeApiKeyRequest{Id: "k"}); err != nil {
				t.Fatal(err)
			}
			if ev, err := next(t, s); err != nil || ev.GetKeyId() != "k" || ev.GetChange() != agpv1.ApiKeyChange_API_KEY_CHANGE_REVOKED {
				t.Fatalf("after reconnecting: %v (%v), want the revocation of k", ev, err)
			}
		})
	}
}

func TestWatchRefusedWhileTheSubscriptionIsDown(t *testing.T) {
	h := newHub(nil, slog.New(slog.DiscardHandler), 1)
	if _, err := h.add(); code(err) != codes.Unavailable {
		t.Fatalf("watch before the subscription is up: %v, want Unavailable", err)
	}
	h.setLive(true)
	w, err := h.add()
	if err != nil {
		t.Fatal(err)
	}
	h.setLive(false)
	select {
	case <-w.gone:
		if code(w.why) != codes.Unavailable {
			t.Errorf("ended with %v, want Unavailable", w.why)
		}
	default:
		t.Fatal("a stream outlived its replica's subscription")
	}
}

func TestSlowWatcherIsEndedAlone(t *testing.T) {
	h := newHub(nil, slog.New(slog.DiscardHandler), 2)
	h.setLive(true)
	slow, _ := h.add()
	fast, _ := h.add()
	ev := &agpv1.WatchKeyEventsResponse{KeyId: "k", Change: agpv1.ApiKeyChange_API_KEY_CHANGE_REVOKED}
	for i := range 3 {
		h.broadcast(ev)
		<-fast.ch // fast keeps up
		if i < 2 && isGone(slow) {
			t.Fatalf("slow watcher ended after %d events with a buffer of 2", i+1)
		}
	}
	if !isGone(slow) || !errors.Is(slow.why, errBehind) {
		t.Fatalf("slow watcher: gone=%v why=%v, want ended as behind", isGone(slow), slow.why)
	}
	if isGone(fast) || h.count() != 1 {
		t.Fatalf("the watcher that kept up was ended too (gone=%v, open=%d)", isGone(fast), h.count())
	}
}

func isGone(w *watcher) bool {
	select {
	case <-w.gone:
		return true
	default:
		return false
	}
}

// TestFollowKeepsACacheInStep runs agpkey.Follow (what the front door
// uses) against a real replica: subscribed, a change, and after a break
// interrupted then subscribed again.
func TestFollowKeepsACacheInStep(t *testing.T) {
	rds := testkit.StartRedis(t)
	r := startReplica(t, rds)
	events := make(chan string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		agpkey.Follow(ctx, r.client, slog.New(slog.DiscardHandler), agpkey.Watcher{
			Subscribed:  func() { events <- "subscribed" },
			Interrupted: func() { events <- "interrupted" },
			Changed:     func(ev *agpv1.WatchKeyEventsResponse) { events <- "changed " + ev.GetKeyId() },
		})
	}()
	expect := func(want string) {
		t.Helper()
		for {
			select {
			case got := <-events:
				// Before the subscription is up, attempts are refused.
				if got == "interrupted" && want == "subscribed" {
					continue
				}
				if got != want {
					t.Fatalf("got %q, want %q", got, want)
				}
				return
			case <-time.After(5 * time.Second):
				t.Fatalf("no %q within 5s", want)
			}
		}
	}
	expect("subscribed")
	must(r.client.ImportApiKey(ctx, &agpv1.ImportApiKeyRequest{Id: "k", AgentId: bob, Scopes: []string{"query"}, KeySha256: hashA}))(t)
	must(r.client.RevokeApiKey(ctx, &agpv1.RevokeApiKeyRequest{Id: "k"}))(t)
	expect("changed k")
	if err := rds.Client(t).Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	expect("interrupted")
	expect("subscribed")
	cancel()
	<-done
	if got := <-events; got != "interrupted" {
		t.Errorf("on stop: %q, want interrupted (a stopped watch must not leave a trusted cache)", got)
	}
}
