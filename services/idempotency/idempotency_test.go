package idempotency_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/idempotency"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

func startRedis(t *testing.T) *redis.Client { return testkit.StartRedis(t).Client(t) }

const (
	fpA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	fpB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func TestValidKeyIsOneTo255PrintableASCII(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"order-abc-123", true},
		{"with space", true},
		{strings.Repeat("k", 255), true},
		{"", false},
		{strings.Repeat("k", 256), false},
		{"tab\there", false},
		{"nul\x00", false},
		{"del\x7f", false},
		{"caf\xc3\xa9", false},
	} {
		if got := idempotency.ValidKey(tc.key); got != tc.want {
			t.Errorf("ValidKey(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

func TestValidFingerprintIs64LowercaseHex(t *testing.T) {
	for _, tc := range []struct {
		fp   string
		want bool
	}{
		{fpA, true},
		{strings.ToUpper(fpA), false},
		{fpA[:63], false},
		{fpA + "a", false},
		{strings.Repeat("g", 64), false},
	} {
		if got := idempotency.ValidFingerprint(tc.fp); got != tc.want {
			t.Errorf("ValidFingerprint(%q) = %v, want %v", tc.fp, got, tc.want)
		}
	}
}

func TestSlotLifecycle(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t)
	slot := rediskeys.IdempotencySlot("agent-1", "key-1")

	r, err := idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute)
	if err != nil || r.Outcome != idempotency.Claimed {
		t.Fatalf("first claim = %v, %v; want claimed", r.Outcome, err)
	}
	if pttl := rdb.PTTL(ctx, slot).Val(); pttl <= 0 || pttl > time.Minute {
		t.Fatalf("pending slot PTTL = %v, want the lease", pttl)
	}
	if r, _ := idempotency.Claim(ctx, rdb, slot, fpA, "tok2", time.Minute); r.Outcome != idempotency.InFlight {
		t.Fatalf("duplicate while pending = %v, want in-flight", r.Outcome)
	}
	if r, _ := idempotency.Claim(ctx, rdb, slot, fpB, "tok2", time.Minute); r.Outcome != idempotency.Reused {
		t.Fatalf("other fingerprint while pending = %v, want reused", r.Outcome)
	}
	if ok, _ := idempotency.Complete(ctx, rdb, slot, "not-the-token", []byte("x"), time.Hour); ok {
		t.Fatal("complete with a foreign token succeeded")
	}
	if ok, _ := idempotency.Release(ctx, rdb, slot, "not-the-token"); ok {
		t.Fatal("release with a foreign token succeeded")
	}
	resp := []byte("AGTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}\x00\xff")
	if ok, err := idempotency.Complete(ctx, rdb, slot, "tok1", resp, time.Hour); !ok || err != nil {
		t.Fatalf("complete = %v, %v", ok, err)
	}
	if pttl := rdb.PTTL(ctx, slot).Val(); pttl <= time.Minute || pttl > time.Hour {
		t.Fatalf("done slot PTTL = %v, want the result TTL", pttl)
	}
	r, err = idempotency.Claim(ctx, rdb, slot, fpA, "tok3", time.Minute)
	if err != nil || r.Outcome != idempotency.Replay || string(r.Response) != string(resp) {
		t.Fatalf("claim after completion = %v %q, %v; want replay of the stored bytes", r.Outcome, r.Response, err)
	}
	if r, _ := idempotency.Claim(ctx, rdb, slot, fpB, "tok3", time.Minute); r.Outcome != idempotency.Reused {
		t.Fatalf("other fingerprint after completion = %v, want reused", r.Outcome)
	}
	if ok, _ := idempotency.Release(ctx, rdb, slot, "tok1"); ok {
		t.Fatal("release of a completed slot succeeded")
	}
}

// A claim run again with the token that holds it (the script's reply was
// lost and the Redis client sent it once more) is claimed again, not in
// flight; another token, or the same token with another body, still is not.
func TestClaimRunAgainByItsHolder(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t)
	slot := rediskeys.IdempotencySlot("agent-1", "key-again")
	for i, tc := range []struct {
		fp, token string
		want      idempotency.Outcome
	}{
		{fpA, "tok1", idempotency.Claimed},
		{fpA, "tok1", idempotency.Claimed},
		{fpA, "tok2", idempotency.InFlight},
		{fpB, "tok1", idempotency.Reused},
	} {
		if r, err := idempotency.Claim(ctx, rdb, slot, tc.fp, tc.token, time.Minute); err != nil || r.Outcome != tc.want {
			t.Fatalf("claim %d (%s) = %v, %v; want %v", i, tc.token, r.Outcome, err, tc.want)
		}
	}
	if ok, err := idempotency.Complete(ctx, rdb, slot, "tok1", []byte("r"), time.Hour); !ok || err != nil {
		t.Fatalf("the holder's complete after its claim ran twice = %v, %v", ok, err)
	}
}

// TestCompletedSlotExpires: once the result TTL has passed, the same key
// and body run anew (companions 39) instead of replaying.
func TestCompletedSlotExpires(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t)
	slot := rediskeys.IdempotencySlot("agent-1", "key-1")
	if r, _ := idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute); r.Outcome != idempotency.Claimed {
		t.Fatal("first claim failed")
	}
	if ok, err := idempotency.Complete(ctx, rdb, slot, "tok1", []byte("done"), time.Second); !ok || err != nil {
		t.Fatalf("complete = %v, %v", ok, err)
	}
	if r, _ := idempotency.Claim(ctx, rdb, slot, fpA, "tok2", time.Minute); r.Outcome != idempotency.Replay {
		t.Fatalf("claim within the TTL = %v, want replay", r.Outcome)
	}
	testkit.WaitFor(t, 5*time.Second, "the same key and body to run anew after the TTL", func() bool {
		r, err := idempotency.Claim(ctx, rdb, slot, fpA, "tok3", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if r.Outcome != idempotency.Replay && r.Outcome != idempotency.Claimed {
			t.Fatalf("claim = %v, want replay until the TTL and claimed after", r.Outcome)
		}
		return r.Outcome == idempotency.Claimed
	})
}

func TestReleaseLetsARetryRunAgain(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t)
	slot := rediskeys.IdempotencySlot("agent-1", "key-1")
	if r, _ := idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute); r.Outcome != idempotency.Claimed {
		t.Fatal("first claim failed")
	}
	if ok, err := idempotency.Release(ctx, rdb, slot, "tok1"); !ok || err != nil {
		t.Fatalf("release = %v, %v", ok, err)
	}
	if r, _ := idempotency.Claim(ctx, rdb, slot, fpB, "tok2", time.Minute); r.Outcome != idempotency.Claimed {
		t.Fatalf("claim after release = %v, want claimed", r.Outcome)
	}
}

func TestLapsedClaimerCannotOverwriteTheNextRun(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t)
	slot := rediskeys.IdempotencySlot("agent-1", "key-1")
	if r, _ := idempotency.Claim(ctx, rdb, slot, fpA, "tok1", 30*time.Millisecond); r.Outcome != idempotency.Claimed {
		t.Fatal("first claim failed")
	}
	time.Sleep(60 * time.Millisecond)
	if r, _ := idempotency.Claim(ctx, rdb, slot, fpA, "tok2", time.Minute); r.Outcome != idempotency.Claimed {
		t.Fatalf("claim after the lease lapsed = %v, want claimed", r.Outcome)
	}
	if ok, _ := idempotency.Complete(ctx, rdb, slot, "tok1", []byte("stale"), time.Hour); ok {
		t.Fatal("the lapsed claimer completed the slot")
	}
	if ok, _ := idempotency.Complete(ctx, rdb, slot, "tok2", []byte("fresh"), time.Hour); !ok {
		t.Fatal("the current claimer could not complete")
	}
}

func TestSlotsAreScopedByAgent(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t)
	a := rediskeys.IdempotencySlot("agent-a", "same-key")
	b := rediskeys.IdempotencySlot("agent-b", "same-key")
	if r, _ := idempotency.Claim(ctx, rdb, a, fpA, "t1", time.Minute); r.Outcome != idempotency.Claimed {
		t.Fatal("agent a claim failed")
	}
	if r, _ := idempotency.Claim(ctx, rdb, b, fpB, "t2", time.Minute); r.Outcome != idempotency.Claimed {
		t.Fatalf("agent b with the same key = %v, want an independent claim", r.Outcome)
	}
}

func TestWait(t *testing.T) {
	ctx := context.Background()
	opts := idempotency.WaitOptions{MaxWait: time.Second, FirstPoll: time.Millisecond, MaxPoll: 10 * time.Millisecond, Lease: time.Minute}

	t.Run("replays once the first request completes", func(t *testing.T) {
		rdb := startRedis(t)
		slot := rediskeys.IdempotencySlot("agent", "k")
		_, _ = idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute)
		go func() {
			time.Sleep(30 * time.Millisecond)
			_, _ = idempotency.Complete(ctx, rdb, slot, "tok1", []byte("done"), time.Hour)
		}()
		r, err := idempotency.Wait(ctx, rdb, slot, fpA, "tok2", opts)
		if err != nil || r.Outcome != idempotency.Replay || string(r.Response) != "done" {
			t.Fatalf("Wait = %v %q, %v; want replay", r.Outcome, r.Response, err)
		}
	})
	t.Run("claims when the first request releases", func(t *testing.T) {
		rdb := startRedis(t)
		slot := rediskeys.IdempotencySlot("agent", "k")
		_, _ = idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute)
		go func() {
			time.Sleep(30 * time.Millisecond)
			_, _ = idempotency.Release(ctx, rdb, slot, "tok1")
		}()
		r, err := idempotency.Wait(ctx, rdb, slot, fpA, "tok2", opts)
		if err != nil || r.Outcome != idempotency.Claimed {
			t.Fatalf("Wait = %v, %v; want claimed", r.Outcome, err)
		}
		if tok := rdb.HGet(ctx, slot, rediskeys.SlotToken).Val(); tok != "tok2" {
			t.Fatalf("slot token = %q, want the waiter's", tok)
		}
	})
	t.Run("gives up as in-flight after MaxWait", func(t *testing.T) {
		rdb := startRedis(t)
		slot := rediskeys.IdempotencySlot("agent", "k")
		_, _ = idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute)
		short := opts
		short.MaxWait = 40 * time.Millisecond
		start := time.Now()
		r, err := idempotency.Wait(ctx, rdb, slot, fpA, "tok2", short)
		if err != nil || r.Outcome != idempotency.InFlight {
			t.Fatalf("Wait = %v, %v; want in-flight", r.Outcome, err)
		}
		if d := time.Since(start); d < 40*time.Millisecond || d > 500*time.Millisecond {
			t.Fatalf("Wait took %v, want about MaxWait", d)
		}
	})
	t.Run("does not wait when MaxWait is zero", func(t *testing.T) {
		rdb := startRedis(t)
		r, err := idempotency.Wait(ctx, rdb, rediskeys.IdempotencySlot("agent", "k"), fpA, "tok2", idempotency.WaitOptions{})
		if err != nil || r.Outcome != idempotency.InFlight {
			t.Fatalf("Wait = %v, %v; want in-flight", r.Outcome, err)
		}
	})
}

// TestCompleteFunctionEmbedsInAnotherScript pins the contract auditsvc relies
// on: CompleteLuaFunction can be prepended to a script that does other work
// on the agent's keys and completes the slot in the same call.
func TestCompleteFunctionEmbedsInAnotherScript(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t)
	slot := rediskeys.IdempotencySlot("agent", "k")
	_, _ = idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute)
	script := redis.NewScript(idempotency.CompleteLuaFunction + `
redis.call('HSET', KEYS[1], 'head', ARGV[1])
return agtp_idem_complete(KEYS[2], ARGV[2], ARGV[3], tonumber(ARGV[4]))`)
	n, err := script.Run(ctx, rdb, []string{rediskeys.ChainHead("agent"), slot}, "audit-1", "tok1", "resp", int64(3600000)).Int()
	if err != nil || n != 1 {
		t.Fatalf("embedded complete = %v, %v", n, err)
	}
	if r, _ := idempotency.Claim(ctx, rdb, slot, fpA, "tok2", time.Minute); r.Outcome != idempotency.Replay || string(r.Response) != "resp" {
		t.Fatalf("after embedded complete: %v %q", r.Outcome, r.Response)
	}
	// An empty slot is a no-op, so append scripts may call it unconditionally.
	noClaim := redis.NewScript(idempotency.CompleteLuaFunction + `return agtp_idem_complete(ARGV[1], ARGV[2], 'x', 1)`)
	n, err = noClaim.Run(ctx, rdb, []string{rediskeys.ChainHead("agent")}, "", "").Int()
	if err != nil || n != 0 {
		t.Fatalf("complete with no claim = %v, %v; want 0", n, err)
	}
}

// TestUnknownOutcomeRefusesRetries: a claim marked unknown refuses the
// same request (and says another fingerprint reused the key) until it is
// resolved or its hold lapses; an idempotent endpoint's request claims it;
// a late completion by the holder still stores the outcome.
func TestUnknownOutcomeRefusesRetries(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// then acts on the unknown slot and checks what a retry gets.
		then func(t *testing.T, rdb *redis.Client, slot string)
	}{
		{"a retry of the same request is refused", func(t *testing.T, rdb *redis.Client, slot string) {
			if r, err := idempotency.Claim(ctx, rdb, slot, fpA, "tok2", time.Minute); err != nil || r.Outcome != idempotency.Unknown {
				t.Fatalf("retry = %v, %v; want outcome-unknown", r.Outcome, err)
			}
			if r, _ := idempotency.Claim(ctx, rdb, slot, fpB, "tok2", time.Minute); r.Outcome != idempotency.Reused {
				t.Fatalf("another request under the key = %v, want reused", r.Outcome)
			}
			if ok, _ := idempotency.Release(ctx, rdb, slot, "tok1"); ok {
				t.Fatal("the holder released an unknown outcome")
			}
		}},
		{"an idempotent request runs again", func(t *testing.T, rdb *redis.Client, slot string) {
			if r, err := idempotency.ClaimRerun(ctx, rdb, slot, fpA, "tok2", time.Minute); err != nil || r.Outcome != idempotency.Claimed {
				t.Fatalf("rerun claim = %v, %v; want claimed", r.Outcome, err)
			}
			if tok := rdb.HGet(ctx, slot, rediskeys.SlotToken).Val(); tok != "tok2" {
				t.Fatalf("token = %q, want the new claimer's", tok)
			}
			if r, _ := idempotency.ClaimRerun(ctx, rdb, slot, fpA, "tok3", time.Minute); r.Outcome != idempotency.InFlight {
				t.Fatalf("second rerun claim = %v, want in-flight", r.Outcome)
			}
		}},
		{"a late completion by the holder stores the outcome", func(t *testing.T, rdb *redis.Client, slot string) {
			if ok, err := idempotency.Complete(ctx, rdb, slot, "tok1", []byte("late"), time.Hour); !ok || err != nil {
				t.Fatalf("complete = %v, %v", ok, err)
			}
			if r, _ := idempotency.Claim(ctx, rdb, slot, fpA, "tok2", time.Minute); r.Outcome != idempotency.Replay || string(r.Response) != "late" {
				t.Fatalf("retry = %v %q, want the replay", r.Outcome, r.Response)
			}
		}},
		{"the hold lapses", func(t *testing.T, rdb *redis.Client, slot string) {
			if pttl := rdb.PTTL(ctx, slot).Val(); pttl <= time.Minute || pttl > time.Hour {
				t.Fatalf("unknown slot PTTL = %v, want the hold", pttl)
			}
			rdb.PExpire(ctx, slot, 20*time.Millisecond)
			testkit.WaitFor(t, 5*time.Second, "the slot to lapse", func() bool {
				r, err := idempotency.Claim(ctx, rdb, slot, fpA, "tok2", time.Minute)
				return err == nil && r.Outcome == idempotency.Claimed
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := startRedis(t)
			slot := rediskeys.IdempotencySlot("agent-1", "key-1")
			if r, _ := idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute); r.Outcome != idempotency.Claimed {
				t.Fatal("first claim failed")
			}
			if ok, _ := idempotency.MarkUnknown(ctx, rdb, slot, "not-the-token", fpA, time.Hour); ok {
				t.Fatal("a foreign token marked the slot")
			}
			if ok, err := idempotency.MarkUnknown(ctx, rdb, slot, "tok1", fpA, time.Hour); !ok || err != nil {
				t.Fatalf("mark unknown = %v, %v", ok, err)
			}
			tc.then(t, rdb, slot)
		})
	}
}

// TestMarkUnknownLeavesSettledSlots: only a pending or vanished claim can
// become unknown; a stored outcome stays replayable.
func TestMarkUnknownLeavesSettledSlots(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t)
	slot := rediskeys.IdempotencySlot("agent-1", "key-1")
	_, _ = idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute)
	_, _ = idempotency.Complete(ctx, rdb, slot, "tok1", []byte("done"), time.Hour)
	if ok, err := idempotency.MarkUnknown(ctx, rdb, slot, "tok1", fpA, time.Hour); ok || err != nil {
		t.Fatalf("mark unknown of a done slot = %v, %v; want false", ok, err)
	}
	// A claim that vanished (lost with a primary that failed over, or
	// expired while its request ran) guarded a request that ran: the key
	// is held as unknown, so a retry is refused rather than run again.
	absent := rediskeys.IdempotencySlot("agent-1", "absent")
	if ok, err := idempotency.MarkUnknown(ctx, rdb, absent, "tok1", fpA, time.Hour); !ok || err != nil {
		t.Fatalf("mark unknown of a vanished claim = %v, %v; want true", ok, err)
	}
	// The slot is created with the request's fingerprint: the retry of
	// that request learns its outcome is unknown, another request that
	// the key was used for another request.
	if r, _ := idempotency.Claim(ctx, rdb, absent, fpA, "tok2", time.Minute); r.Outcome != idempotency.Unknown {
		t.Fatalf("retry after a vanished claim = %v, want %v", r.Outcome, idempotency.Unknown)
	}
	if r, _ := idempotency.Claim(ctx, rdb, absent, fpB, "tok2", time.Minute); r.Outcome != idempotency.Reused {
		t.Fatalf("another request after a vanished claim = %v, want %v", r.Outcome, idempotency.Reused)
	}
	if r, _ := idempotency.ClaimRerun(ctx, rdb, absent, fpB, "tok2", time.Minute); r.Outcome != idempotency.Reused {
		t.Fatalf("another idempotent request after a vanished claim = %v, want %v", r.Outcome, idempotency.Reused)
	}
	// Without the fingerprint the slot still refuses every retry.
	blind := rediskeys.IdempotencySlot("agent-1", "blind")
	if ok, err := idempotency.MarkUnknown(ctx, rdb, blind, "tok1", "", time.Hour); !ok || err != nil {
		t.Fatalf("mark unknown of a vanished claim without its fingerprint = %v, %v; want true", ok, err)
	}
	if r, _ := idempotency.Claim(ctx, rdb, blind, fpA, "tok2", time.Minute); r.Outcome == idempotency.Claimed {
		t.Fatalf("retry after a vanished claim marked without its fingerprint = %v, want it refused", r.Outcome)
	}
	if r, _ := idempotency.Claim(ctx, rdb, slot, fpA, "tok2", time.Minute); r.Outcome != idempotency.Replay {
		t.Fatalf("retry = %v, want replay", r.Outcome)
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	unknown := func(t *testing.T, rdb *redis.Client, slot string) {
		_, _ = idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute)
		_, _ = idempotency.MarkUnknown(ctx, rdb, slot, "tok1", fpA, time.Hour)
	}
	for _, tc := range []struct {
		name        string
		setup       func(t *testing.T, rdb *redis.Client, slot string)
		resolve     []idempotency.Resolution
		wantPrev    string
		wantChanged bool
		wantRetry   idempotency.Outcome
	}{
		{"release lets a retry run", unknown, []idempotency.Resolution{idempotency.ResolveRelease}, idempotency.StateUnknown, true, idempotency.Claimed},
		{"applied keeps refusing", unknown, []idempotency.Resolution{idempotency.ResolveApplied}, idempotency.StateUnknown, true, idempotency.Applied},
		{"release undoes applied", unknown, []idempotency.Resolution{idempotency.ResolveApplied, idempotency.ResolveRelease}, idempotency.StateApplied, true, idempotency.Claimed},
		{"applied twice changes nothing", unknown, []idempotency.Resolution{idempotency.ResolveApplied, idempotency.ResolveApplied}, idempotency.StateApplied, false, idempotency.Applied},
		{"an absent slot", func(*testing.T, *redis.Client, string) {}, []idempotency.Resolution{idempotency.ResolveRelease}, "", false, idempotency.Claimed},
		{"a pending claim is left to its holder", func(t *testing.T, rdb *redis.Client, slot string) {
			_, _ = idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute)
		}, []idempotency.Resolution{idempotency.ResolveRelease}, rediskeys.SlotPending, false, idempotency.InFlight},
		{"a stored outcome is left alone", func(t *testing.T, rdb *redis.Client, slot string) {
			_, _ = idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute)
			_, _ = idempotency.Complete(ctx, rdb, slot, "tok1", []byte("done"), time.Hour)
		}, []idempotency.Resolution{idempotency.ResolveRelease}, rediskeys.SlotDone, false, idempotency.Replay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := startRedis(t)
			slot := rediskeys.IdempotencySlot("agent-1", "key-1")
			tc.setup(t, rdb, slot)
			var prev string
			var changed bool
			for _, r := range tc.resolve {
				var err error
				if prev, changed, err = idempotency.Resolve(ctx, rdb, slot, r, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			if prev != tc.wantPrev || changed != tc.wantChanged {
				t.Fatalf("last resolve = %q, %v; want %q, %v", prev, changed, tc.wantPrev, tc.wantChanged)
			}
			if r, _ := idempotency.Claim(ctx, rdb, slot, fpA, "tok9", time.Minute); r.Outcome != tc.wantRetry {
				t.Fatalf("retry = %v, want %v", r.Outcome, tc.wantRetry)
			}
		})
	}
	t.Run("an unknown resolution is an error", func(t *testing.T) {
		if _, _, err := idempotency.Resolve(ctx, startRedis(t), "slot", "maybe", time.Hour); err == nil {
			t.Fatal("no error")
		}
	})
}

func TestWaitSeesAnUnknownOutcome(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		rerun bool
		want  idempotency.Outcome
	}{
		{"refused", false, idempotency.Unknown},
		{"idempotent runs again", true, idempotency.Claimed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := startRedis(t)
			slot := rediskeys.IdempotencySlot("agent", "k")
			_, _ = idempotency.Claim(ctx, rdb, slot, fpA, "tok1", time.Minute)
			go func() {
				time.Sleep(30 * time.Millisecond)
				_, _ = idempotency.MarkUnknown(ctx, rdb, slot, "tok1", fpA, time.Hour)
			}()
			r, err := idempotency.Wait(ctx, rdb, slot, fpA, "tok2", idempotency.WaitOptions{
				MaxWait: time.Second, FirstPoll: time.Millisecond, MaxPoll: 10 * time.Millisecond, Lease: time.Minute, Rerun: tc.rerun})
			if err != nil || r.Outcome != tc.want {
				t.Fatalf("Wait = %v, %v; want %v", r.Outcome, err, tc.want)
			}
		})
	}
}
