package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/identitysvc/internal/testaudit"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// lostReplies are the two ways a command's reply is lost. "re-sent": the
// reply is cut off on the wire (testkit.ReplyDropper) and the client
// sends the command again, as a Redis Cluster client does after a network
// error (here go-redis's default MaxRetries). "not re-sent": the command
// runs and the caller gets an error instead of its reply, as from the
// client kit.NewRedis makes (MaxRetries -1).
var lostReplies = []struct {
	name   string
	resent bool
}{{"re-sent", true}, {"not re-sent", false}}

// lossyEnv is newEnv with a way to lose the reply to the next command
// that carries a marker.
type lossyEnv struct {
	*env
	// direct reaches Redis without losing anything.
	direct *redis.Client
	// arm loses the reply to the next command carrying the marker; lost
	// reports whether that happened.
	arm  func()
	lost func() bool
}

func newLossyEnv(t *testing.T, marker []byte, resent bool) *lossyEnv {
	t.Helper()
	r := testkit.StartRedis(t)
	le := &lossyEnv{direct: r.Client(t)}
	var rdb *redis.Client
	if resent {
		proxy := testkit.NewReplyDropper(t, r.Addr, marker)
		rdb = redis.NewClient(&redis.Options{Addr: proxy.Addr})
		le.arm, le.lost = proxy.Arm, func() bool { return proxy.Drops() == 1 }
	} else {
		loser := &replyLoser{marker: marker}
		rdb = redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
		rdb.AddHook(loser)
		le.arm, le.lost = func() { loser.armed.Store(true) }, loser.lost.Load
	}
	t.Cleanup(func() { rdb.Close() })
	audit, client := testaudit.Start(t)
	reg, err := New(rdb, slog.New(slog.NewTextHandler(io.Discard, nil)), client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	le.env = &env{reg: reg, audit: audit, rdb: rdb}
	return le
}

// errLostReply stands for the network error of a reply that never came.
var errLostReply = errors.New("connection reset before the reply")

// replyLoser, once armed, runs the next command that carries marker and
// answers errLostReply instead of its reply.
type replyLoser struct {
	marker      []byte
	armed, lost atomic.Bool
}

func (*replyLoser) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*replyLoser) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *replyLoser) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && bytes.Contains([]byte(fmt.Sprint(cmd.Args()...)), h.marker) && h.armed.CompareAndSwap(true, false) {
			h.lost.Store(true)
			return errLostReply
		}
		return err
	}
}

// wantRegistered fails unless id is stored, indexed and named name, once.
func (le *lossyEnv) wantRegistered(t *testing.T, id, name string) {
	t.Helper()
	ctx := context.Background()
	exists, _ := le.direct.Exists(ctx, rediskeys.Agent(id)).Result()
	indexed, _ := le.direct.SIsMember(ctx, rediskeys.AgentIndex, id).Result()
	holder, _ := le.direct.Get(ctx, rediskeys.AgentName(name)).Result()
	if exists != 1 || !indexed || holder != id {
		t.Fatalf("agent stored %v, indexed %v, name %q held by %q", exists == 1, indexed, name, holder)
	}
}

// A lost reply to the name claim's SETNX: the name is mapped to the
// Agent-ID, but the call does not know. A re-sent SETNX finds the name
// held by this very ID, and so does the caller's retry after an error;
// with no record of the agent, that is this Genesis's own claim, not a
// collision, or the Genesis could never be registered.
func TestRegisterAfterLostNameClaimReplyCanStillRegister(t *testing.T) {
	for _, lr := range lostReplies {
		t.Run(lr.name, func(t *testing.T) {
			const name = "orders-bot"
			e := newLossyEnv(t, []byte(rediskeys.AgentName(name)), lr.resent)
			ctx := context.Background()
			k := newGenesis(t, "Acme", 2)
			e.arm()
			_, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Name: name})
			if !e.lost() {
				t.Fatal("no reply was lost")
			}
			if lr.resent && err != nil {
				t.Fatalf("Register whose SETNX was re-sent: %v", err)
			}
			if err != nil {
				// The caller retries, as it would after any failure.
				if _, err2 := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Name: name}); err2 != nil {
					t.Fatalf("Register after a lost SETNX reply: %v; its retry: %v", err, err2)
				}
			}
			e.wantRegistered(t, k.g.AgentID, name)
		})
	}
}

// Two Registers of one Genesis under one name at once both hold the name
// (claimName takes a name held by the ID, without a record, as its own):
// the one whose create script runs first registers the agent, and the
// other, answered with a collision, leaves the name to it.
func TestConcurrentRegisterOfOneGenesisLeavesTheNameToTheRecord(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	k := newGenesis(t, "Acme", 2)
	const name = "orders-bot"
	req := RegisterRequest{GenesisJSON: k.g.Bytes(), Name: name}
	// The second Register runs in full just before the first one's create
	// script.
	var second error
	race := &beforeScript{hash: createScript.Hash(), run: func() { _, second = e.reg.Register(ctx, req) }}
	race.armed.Store(true)
	e.rdb.AddHook(race)
	_, first := e.reg.Register(ctx, req)
	if race.armed.Load() {
		t.Fatal("the create script never ran")
	}
	if second != nil {
		t.Fatalf("the Register whose create script ran first: %v", second)
	}
	wantReason(t, first, codes.Aborted, ReasonAgentIDCollision)
	if id, err := e.reg.LookupName(ctx, name); err != nil || id != k.g.AgentID {
		t.Fatalf("name %q resolves to %q, %v; want the registered agent", name, id, err)
	}
	if indexed, _ := e.rdb.SIsMember(ctx, rediskeys.AgentIndex, k.g.AgentID).Result(); !indexed {
		t.Fatal("the registered agent is not indexed")
	}
}

// beforeScript, once armed, calls run before the next call of the script
// with the given SHA1.
type beforeScript struct {
	hash  string
	run   func()
	armed atomic.Bool
}

func (*beforeScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*beforeScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *beforeScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == h.hash && h.armed.CompareAndSwap(true, false) {
			h.run()
		}
		return next(ctx, cmd)
	}
}

// A lost reply to the create script: the record is stored, but the call
// does not know. A re-sent script finds the record the first run stored,
// and an error leaves it in doubt; either way the call must recognise its
// own record (its registration token) and register the agent, not answer
// a collision, release the name and leave the agent stored but unindexed,
// which no retry could then register.
func TestRegisterAfterLostCreateReplyIsNotACollision(t *testing.T) {
	for _, lr := range lostReplies {
		t.Run(lr.name, func(t *testing.T) {
			const name = "orders-bot"
			e := newLossyEnv(t, []byte(createScript.Hash()), lr.resent)
			ctx := context.Background()
			// Loaded ahead, so the first send is the EVALSHA whose reply is lost.
			if err := createScript.Load(ctx, e.direct).Err(); err != nil {
				t.Fatal(err)
			}
			k := newGenesis(t, "Acme", 2)
			e.arm()
			a, err := e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Name: name})
			if !e.lost() {
				t.Fatal("no reply was lost")
			}
			if err != nil {
				t.Fatalf("Register after a lost create-script reply: %v", err)
			}
			if a.Record.GetAgentId() != k.g.AgentID || a.Record.GetName() != name {
				t.Fatalf("Register answered %v", a.Record)
			}
			e.wantRegistered(t, k.g.AgentID, name)
			// Registered once: a second Register of the Genesis collides.
			_, err = e.reg.Register(ctx, RegisterRequest{GenesisJSON: k.g.Bytes(), Name: name})
			wantReason(t, err, codes.Aborted, ReasonAgentIDCollision)
		})
	}
}
