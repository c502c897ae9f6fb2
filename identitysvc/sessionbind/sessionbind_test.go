package sessionbind

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

func TestBindOnFirstSightAndRefuseMismatch(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	b := New(rdb, time.Minute)
	ctx := context.Background()
	sid := "Zm9vYmFyYmF6cXV4cXV1eDEyMzQ"
	agent, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	key := strings.Repeat("c", 64)

	if err := b.Bind(ctx, sid, agent, key); err != nil {
		t.Fatal(err)
	}
	if err := b.Bind(ctx, sid, agent, key); err != nil {
		t.Fatalf("repeat: %v", err)
	}
	for name, args := range map[string][2]string{
		"other agent":      {other, key},
		"other client key": {agent, strings.Repeat("d", 64)},
		"no client cert":   {agent, ""},
	} {
		err := b.Bind(ctx, sid, args[0], args[1])
		if c, r, _, _ := grpcerr.Reason(err); c != codes.Unauthenticated || r != ReasonMismatch {
			t.Errorf("%s: got %v", name, err)
		}
	}
	ttl, err := rdb.PTTL(ctx, rediskeys.SessionBinding(sid)).Result()
	if err != nil || ttl <= 0 || ttl > time.Minute {
		t.Fatalf("binding TTL %v %v", ttl, err)
	}
}

func TestBindRefusesWeakSessionIDs(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	b := New(rdb, 0)
	for _, sid := range []string{"", "short", strings.Repeat("x", MaxLength+1), "has space in the session id ok", "tab\tinside-the-session-id-000"} {
		err := b.Bind(context.Background(), sid, strings.Repeat("a", 64), "")
		if c, r, _, _ := grpcerr.Reason(err); c != codes.InvalidArgument || r != ReasonInvalid {
			t.Errorf("%q: got %v", sid, err)
		}
	}
	if n, _ := rdb.DBSize(context.Background()).Result(); n != 0 {
		t.Fatal("a refused Session-ID was stored")
	}
}
