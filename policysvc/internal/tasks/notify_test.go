package tasks

import (
	"context"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
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
