package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
)

// A watcher whose stream is stuck (its Send blocks) never delays the
// others or the broadcaster, and is told to resync once it moves again.
func TestSlowWatcherDoesNotBlockOthers(t *testing.T) {
	h := newHub(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), 2)
	h.setSubscribed(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	release := make(chan struct{})
	var slowMu sync.Mutex
	var slowGot []*identityv1.WatchAgentsResponse
	slow := h.add()
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		_ = h.serve(ctx, slow, func(m *identityv1.WatchAgentsResponse) error {
			<-release // a client that stopped reading
			slowMu.Lock()
			slowGot = append(slowGot, m)
			slowMu.Unlock()
			return nil
		})
	}()

	fastCh := make(chan *identityv1.WatchAgentsResponse, 16)
	fast := h.add()
	go func() {
		_ = h.serve(ctx, fast, func(m *identityv1.WatchAgentsResponse) error { fastCh <- m; return nil })
	}()
	if m := <-fastCh; !m.GetResync() {
		t.Fatalf("fast watcher's first message %v", m)
	}

	const n = 500
	id := strings.Repeat("a", 64)
	for i := range n {
		done := make(chan struct{})
		go func() {
			h.broadcast(&identityv1.WatchAgentsResponse{AgentId: id, Agent: &identityv1.AgentRecord{AgentId: id, Revision: uint64(i + 1)}})
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Fatalf("broadcast %d blocked behind the stuck watcher", i)
		}
		select {
		case m := <-fastCh:
			if m.GetAgent().GetRevision() != uint64(i+1) {
				t.Fatalf("fast watcher got %v, want revision %d", m, i+1)
			}
		case <-time.After(time.Second):
			t.Fatalf("fast watcher did not get event %d while another watcher was stuck", i)
		}
	}

	close(release)
	deadline := time.Now().Add(2 * time.Second)
	for {
		slowMu.Lock()
		got := append([]*identityv1.WatchAgentsResponse(nil), slowGot...)
		slowMu.Unlock()
		if len(got) >= 2 && got[len(got)-1].GetResync() {
			if len(got) > 4 {
				t.Fatalf("the stuck watcher was sent its backlog (%d messages) instead of a resync", len(got))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stuck watcher was not told to resync: %v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-slowDone
}

// Watchers that join before the subscription is up get their first resync
// only once it is, so no event between the two can be missed silently.
func TestWatcherResyncWaitsForSubscription(t *testing.T) {
	h := newHub(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), 8)
	w := h.add()
	if w.resync.Load() {
		t.Fatal("resync before the hub is subscribed")
	}
	h.setSubscribed(true)
	if !w.resync.Load() {
		t.Fatal("no resync once subscribed")
	}
	gen := h.gen.Load()
	h.broadcast(&identityv1.WatchAgentsResponse{AgentId: "x"})
	if h.gen.Load() == gen {
		t.Fatal("an event must bump the generation the namespace cache checks")
	}
}
