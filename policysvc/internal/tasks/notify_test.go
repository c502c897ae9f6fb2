package tasks

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestNotifyExpiryIsBounded: an expiry further ahead than the maximum
// notification lifetime is refused, whatever the recipient, and an
// accepted one leaves every key it writes with a TTL within the bound.
// Before the bound, year 9999 overflowed the TTL into a negative one and
// the record was kept for ever.
func TestNotifyExpiryIsBounded(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	const taskTTL = time.Hour
	c, srv := start(t, Options{TaskTTL: taskTTL, Now: func() time.Time { return now },
		Groups: map[string][]string{"reviewers": {reviewer}}})
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		recipient string
		expiry    *timestamppb.Timestamp
		reason    string // "": accepted
	}{
		{name: "year 9999", recipient: reviewer, expiry: timestamppb.New(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)), reason: "expiry-too-far"},
		{name: "year 2200", recipient: reviewer, expiry: timestamppb.New(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)), reason: "expiry-too-far"},
		{name: "just past the bound", recipient: reviewer, expiry: timestamppb.New(now.Add(maxNotifyLifetime + time.Second)), reason: "expiry-too-far"},
		{name: "group, year 9999", recipient: "group:reviewers", expiry: timestamppb.New(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)), reason: "expiry-too-far"},
		{name: "past", recipient: reviewer, expiry: timestamppb.New(now.Add(-time.Second)), reason: "expiry-passed"},
		{name: "beyond year 9999", recipient: reviewer, expiry: &timestamppb.Timestamp{Seconds: math.MaxInt64 / 2}, reason: "expiry-invalid"},
		{name: "nanos out of range", recipient: reviewer, expiry: &timestamppb.Timestamp{Seconds: now.Unix() + 60, Nanos: 2e9}, reason: "expiry-invalid"},
		{name: "an hour", recipient: reviewer, expiry: timestamppb.New(now.Add(time.Hour))},
		{name: "at the bound", recipient: reviewer, expiry: timestamppb.New(now.Add(maxNotifyLifetime))},
		{name: "group at the bound", recipient: "group:reviewers", expiry: timestamppb.New(now.Add(maxNotifyLifetime))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: tc.recipient,
				Content: testkit.JSONValue(`{"n":1}`), Expiry: tc.expiry})
			if tc.reason != "" {
				if c, reason, expl, _ := grpcerr.Reason(err); c != codes.InvalidArgument || reason != tc.reason {
					t.Fatalf("Notify = %v, %v %s (%s); want InvalidArgument %s", r, c, reason, expl, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n := r.GetNotification()
			ids := []string{n.GetNotificationId()}
			for _, d := range n.GetDeliveries() {
				ids = append(ids, d.GetNotificationId())
			}
			live := tc.expiry.AsTime().Sub(now)
			keys := []string{rediskeys.InboxSeen(reviewer, owner, ids[len(ids)-1])}
			for _, id := range ids {
				keys = append(keys, rediskeys.Notification(id))
			}
			for _, key := range keys {
				ttl, err := srv.rdb.PTTL(ctx, key).Result()
				if err != nil || ttl > live+taskTTL || ttl < live+taskTTL-time.Minute {
					t.Errorf("TTL of %s = %v, %v; want about %v", key, ttl, err, live+taskTTL)
				}
			}
		})
	}
}

func TestDefaultExpiryIsWithinTheBound(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	if _, err := New(rdb, nil, Options{NotifyDefaultExpiry: maxNotifyLifetime + time.Hour}); err == nil {
		t.Fatal("New accepted a default expiry beyond the maximum notification lifetime")
	}
	if _, err := New(rdb, nil, Options{NotifyDefaultExpiry: maxNotifyLifetime}); err != nil {
		t.Fatalf("a default expiry at the bound: %v", err)
	}
}

// TestLastErrorCarriesNoURLSecretOrAddress: what a failed delivery stores
// as last_error, which the sender reads, is the kind of failure only:
// never the webhook URL's query (a token), nor the addresses dialled. The
// operator's group members sit on internal addresses; a caller-named
// webhook's own token stays out too.
func TestLastErrorCarriesNoURLSecretOrAddress(t *testing.T) {
	const secret = "s3cr3t-hook-token"
	silent, _ := testkit.CountingListener(t) // accepts and closes: no TLS
	refusing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := refusing.Addr().String()
	_ = refusing.Close() // nothing listens there now
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	failing := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	failing.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	failing.StartTLS()
	t.Cleanup(failing.Close)
	untrusted := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0)
	t.Cleanup(untrusted.Close)
	hook := func(base string) string { return base + "/hook?token=" + secret + "#" + secret }
	members := []struct{ rcpt, want string }{
		{hook("https://" + silent), "connection failed"},
		{hook("https://" + closed), "connection failed"},
		{hook(failing.URL), "HTTP 503"},
		{hook(untrusted.URL), "TLS handshake failed"},
		{"agtp://" + reviewer + "@" + silent, "connection failed"},
	}
	group := make([]string, len(members))
	for i, m := range members {
		group[i] = m.rcpt
	}
	c, srv := start(t, Options{CAFile: pki.CA(), Outbound: loopbackPeers, Groups: map[string][]string{"ops": group}})
	ctx := context.Background()
	atMostOnce := taskv1.DeliveryGuarantee_DELIVERY_GUARANTEE_AT_MOST_ONCE
	g, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: "group:ops", Content: testkit.JSONValue(`1`), Guarantee: atMostOnce})
	if err != nil {
		t.Fatal(err)
	}
	own, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: hook("https://" + silent), Content: testkit.JSONValue(`1`), Guarantee: atMostOnce})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.deliverDue(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(what, lastError, want string) {
		t.Helper()
		for _, leak := range []string{secret, "127.0.0.1", "token", "://"} {
			if strings.Contains(lastError, leak) {
				t.Errorf("%s: last_error %q carries %q", what, lastError, leak)
			}
		}
		if lastError != want {
			t.Errorf("%s: last_error %q, want %q", what, lastError, want)
		}
	}
	r, err := c.GetNotification(ctx, &taskv1.GetNotificationRequest{CallerAgentId: owner, NotificationId: g.GetNotification().GetNotificationId()})
	if err != nil {
		t.Fatal(err)
	}
	ds := r.GetNotification().GetDeliveries()
	if len(ds) != len(members) {
		t.Fatalf("%d deliveries, want %d", len(ds), len(members))
	}
	for i, d := range ds {
		if enumname.Of(d.GetState()) != NotifyFailed {
			t.Errorf("delivery to member %d: state %v, want failed", i, d.GetState())
		}
		check(fmt.Sprintf("member %d", i), d.GetLastError(), members[i].want)
	}
	r, err = c.GetNotification(ctx, &taskv1.GetNotificationRequest{CallerAgentId: owner, NotificationId: own.GetNotification().GetNotificationId()})
	if err != nil {
		t.Fatal(err)
	}
	check("caller-named webhook", r.GetNotification().GetLastError(), "connection failed")
}

// TestEachNotificationIsLeasedForItsOwnAttempt: a worker leases a due
// notification just before its attempt, for as long as one attempt may
// take. Leased for a whole batch, the later notifications of the batch
// were still waiting on the first worker when their lease ran out, and a
// second replica POSTed them again, at_most_once ones included.
func TestEachNotificationIsLeasedForItsOwnAttempt(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	ts := httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.Header.Get(HeaderNotificationID)]++
		mu.Unlock()
		time.Sleep(700 * time.Millisecond) // well within NotifyTimeout
	}))
	t.Cleanup(ts.Close)
	rdb := testkit.StartRedis(t).Client(t)
	opts := Options{HTTPClient: ts.Client(), Outbound: loopbackPeers, NotifyTimeout: time.Second, NotifyPoll: 10 * time.Millisecond}
	a, err := New(rdb, slog.New(slog.DiscardHandler), opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(rdb, slog.New(slog.DiscardHandler), opts)
	if err != nil {
		t.Fatal(err)
	}
	c := startWith(t, a)
	var ids []string
	for range 3 {
		r, err := c.Notify(context.Background(), &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: ts.URL + "/hook",
			Content: testkit.JSONValue(`1`), Guarantee: taskv1.DeliveryGuarantee_DELIVERY_GUARANTEE_AT_MOST_ONCE})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetNotification().GetNotificationId())
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.deliverDue(context.Background()) })
	// Past a batch lease of NotifyTimeout+NotifyPoll: replica A is on the
	// second notification.
	time.Sleep(1200 * time.Millisecond)
	wg.Go(func() { _ = b.deliverDue(context.Background()) })
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if hits[id] != 1 {
			t.Errorf("at_most_once notification %s POSTed %d times, want 1", id, hits[id])
		}
		g, err := c.GetNotification(context.Background(), &taskv1.GetNotificationRequest{CallerAgentId: owner, NotificationId: id})
		if err != nil {
			t.Fatal(err)
		}
		if n := g.GetNotification(); n.GetAttempts() != 1 || enumname.Of(n.GetState()) == NotifyQueued {
			t.Errorf("notification %s: %s after %d attempts, want settled after 1", id, enumname.Of(n.GetState()), n.GetAttempts())
		}
	}
}

// TestAWorkerThatLostItsLeaseWritesNothing: a worker whose lease ran out
// while its attempt was under way is taken over by another. An
// at_most_once notification is not sent again (failed, its outcome
// unknown); an at_least_once one is, and the first worker's late outcome
// (a 503 here) overwrites neither the second's nor the due set.
func TestAWorkerThatLostItsLeaseWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		guarantee        taskv1.DeliveryGuarantee
		hits, attempts   int
		state, lastError string
	}{
		{taskv1.DeliveryGuarantee_DELIVERY_GUARANTEE_AT_MOST_ONCE, 1, 1, NotifyFailed, interrupted},
		{taskv1.DeliveryGuarantee_DELIVERY_GUARANTEE_AT_LEAST_ONCE, 2, 2, NotifyDelivered, ""},
	} {
		t.Run(enumname.Of(tc.guarantee), func(t *testing.T) {
			arrived, release := make(chan struct{}), make(chan struct{})
			var hits atomic.Int32
			ts := httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				if hits.Add(1) == 1 {
					// The first worker's attempt: it outlasts its lease and fails.
					close(arrived)
					<-release
					rw.WriteHeader(http.StatusServiceUnavailable)
				}
			}))
			t.Cleanup(ts.Close)
			rdb := testkit.StartRedis(t).Client(t)
			opts := Options{HTTPClient: ts.Client(), Outbound: loopbackPeers}
			a, err := New(rdb, slog.New(slog.DiscardHandler), opts)
			if err != nil {
				t.Fatal(err)
			}
			// Replica B's clock is past A's lease.
			opts.Now = func() time.Time { return time.Now().Add(time.Hour) }
			b, err := New(rdb, slog.New(slog.DiscardHandler), opts)
			if err != nil {
				t.Fatal(err)
			}
			c := startWith(t, a)
			ctx := context.Background()
			r, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: ts.URL + "/hook",
				Content: testkit.JSONValue(`1`), Guarantee: tc.guarantee})
			if err != nil {
				t.Fatal(err)
			}
			id := r.GetNotification().GetNotificationId()
			aDone := make(chan error, 1)
			go func() { aDone <- a.deliverDue(ctx) }()
			<-arrived
			if err := b.deliverDue(ctx); err != nil {
				t.Fatal(err)
			}
			close(release)
			if err := <-aDone; err != nil {
				t.Fatal(err)
			}
			g, err := c.GetNotification(ctx, &taskv1.GetNotificationRequest{CallerAgentId: owner, NotificationId: id})
			if err != nil {
				t.Fatal(err)
			}
			n := g.GetNotification()
			if int(hits.Load()) != tc.hits || enumname.Of(n.GetState()) != tc.state || int(n.GetAttempts()) != tc.attempts || n.GetLastError() != tc.lastError {
				t.Fatalf("POSTed %d times, notification %s after %d attempts (%q); want %d, %s after %d (%q)",
					hits.Load(), enumname.Of(n.GetState()), n.GetAttempts(), n.GetLastError(), tc.hits, tc.state, tc.attempts, tc.lastError)
			}
			if err := rdb.ZScore(ctx, rediskeys.NotificationsDue, id).Err(); !errors.Is(err, redis.Nil) {
				t.Fatalf("settled notification still in the due set: %v", err)
			}
		})
	}
}
