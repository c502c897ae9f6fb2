package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/catalogsvc/internal/registry"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestVersionCounter: the counter moves only when the content changes,
// never decreases, and two replicas asking for one hash agree
// (companions assertion 18).
func TestVersionCounter(t *testing.T) {
	rs := testkit.StartRedis(t)
	a, b := NewRedis(rs.Client(t), 0), NewRedis(rs.Client(t), 0)
	ctx := testkit.Context(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	v1, err := a.Version(ctx, "h1", t0)
	if err != nil {
		t.Fatal(err)
	}
	v1b, err := b.Version(ctx, "h1", t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if v1 != v1b {
		t.Fatalf("replicas disagree: %+v %+v", v1, v1b)
	}
	v2, _ := b.Version(ctx, "h2", t0.Add(time.Hour))
	v3, _ := a.Version(ctx, "h1", t0.Add(2*time.Hour))
	if !(v2.Counter > v1.Counter && v3.Counter > v2.Counter) {
		t.Fatalf("counter not strictly increasing across changes: %d %d %d", v1.Counter, v2.Counter, v3.Counter)
	}
	if !v3.Issued.Equal(t0) || !v3.Updated.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("times %+v", v3)
	}

	m := NewMemory(t0)
	m1, _ := m.Version(ctx, "x", t0)
	m2, _ := m.Version(ctx, "x", t0.Add(time.Second))
	m3, _ := m.Version(ctx, "y", t0.Add(time.Second))
	if m1 != m2 || m3.Counter != m1.Counter+1 || m1.Counter <= uint64(t0.Unix()) {
		t.Fatalf("memory counter %+v %+v %+v", m1, m2, m3)
	}
}

// testMax is the limit of the limit tests: small, so they are quick.
const testMax = 50

func TestEndpointsRoundTrip(t *testing.T) {
	rs := testkit.StartRedis(t)
	s := NewRedis(rs.Client(t), 0)
	ctx := testkit.Context(t)
	ps := s.Subscribe(ctx)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // subscription confirmation
		t.Fatal(err)
	}
	if err := s.Put(ctx, registry.Runtime{Key: "QUERY /x", Definition: []byte(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	msg := <-ps.Channel()
	if msg.Payload != "QUERY /x" {
		t.Fatalf("event %q", msg.Payload)
	}
	if err := s.Put(ctx, registry.Runtime{Key: "CANCEL /y", Deleted: true}); err != nil {
		t.Fatal(err)
	}
	rt, n, err := s.Endpoints(ctx)
	if err != nil || len(rt) != 2 || n != 2 {
		t.Fatalf("%v %d %v", rt, n, err)
	}
	if err := s.Remove(ctx, "QUERY /x"); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Count(ctx); n != 1 {
		t.Fatalf("count %d", n)
	}
}

// fill stores n runtime entries "QUERY /e-00000"... straight into the
// hash, as an older version or a race between replicas may leave them.
func fill(t *testing.T, rdb redis.UniversalClient, n int) {
	t.Helper()
	vals := make([]any, 0, 2*n)
	for i := range n {
		vals = append(vals, fmt.Sprintf("QUERY /e-%05d", i), `{"definition":{}}`)
	}
	if err := rdb.HSet(testkit.Context(t), rediskeys.Endpoints, vals...).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestPutHoldsEndpointLimit: at testMax entries a new key (a
// definition or a tombstone) is refused with ErrFull and not stored,
// while replacing a stored key still works.
func TestPutHoldsEndpointLimit(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	s := NewRedis(rdb, testMax)
	ctx := testkit.Context(t)
	fill(t, rdb, testMax-1)
	if err := s.Put(ctx, registry.Runtime{Key: "QUERY /last", Definition: []byte(`{}`)}); err != nil {
		t.Fatalf("put up to the limit: %v", err)
	}
	for _, r := range []registry.Runtime{{Key: "QUERY /more", Definition: []byte(`{}`)}, {Key: "CANCEL /y", Deleted: true}} {
		if err := s.Put(ctx, r); !errors.Is(err, ErrFull) {
			t.Fatalf("put %s past the limit: %v, want ErrFull", r.Key, err)
		}
	}
	if err := s.Put(ctx, registry.Runtime{Key: "QUERY /e-00007", Deleted: true}); err != nil {
		t.Fatalf("replacing a stored key at the limit: %v", err)
	}
	if n, _ := s.Count(ctx); n != testMax {
		t.Fatalf("count %d, want %d", n, testMax)
	}
}

// TestEndpointsOverLimitLoadsFirstByKey: a hash over testMax is
// read, not refused: the first testMax keys in byte order, with
// the stored count for the caller to report.
func TestEndpointsOverLimitLoadsFirstByKey(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	s := NewRedis(rdb, testMax)
	fill(t, rdb, testMax+3)
	rt, n, err := s.Endpoints(testkit.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if n != testMax+3 || len(rt) != testMax {
		t.Fatalf("stored %d loaded %d, want %d %d", n, len(rt), testMax+3, testMax)
	}
	if rt[0].Key != "QUERY /e-00000" || rt[len(rt)-1].Key != fmt.Sprintf("QUERY /e-%05d", testMax-1) {
		t.Fatalf("loaded %s .. %s, want the first keys in byte order", rt[0].Key, rt[len(rt)-1].Key)
	}
}
