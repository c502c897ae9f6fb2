package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Promotion into the catalog (persistent: true) and its removal.
//
// A pair is promoted by one contract at a time: the contract claims it in
// Redis (promotionKey, SET NX with its synthesis ID) before PutEndpoint,
// and a PROPOSE finding the claim held by another contract is refused.
// The claim goes when the endpoint is removed from the catalog, and only
// the claim's holder removes the endpoint, so a contract never deletes the
// endpoint another live contract stands on.
//
// Removal is not left to one call: the pending-unpromote mark (the
// contract's "unpromote" field, and an entry of
// rediskeys.RCNSUnpromoteQueue, which also covers promotions whose
// contract was never stored) is recorded before DeleteEndpoint and kept
// until the endpoint is gone (DeleteEndpoint succeeded or answered
// NotFound). A repeated RevokeContract and the janitor try again until
// then.

// fieldUnpromote is the contract hash field of the pending-unpromote mark.
const fieldUnpromote = "unpromote"

// unpromoteEntry is a rediskeys.RCNSUnpromoteQueue member: all a removal
// needs, so it does not depend on the contract's record still being
// there.
type unpromoteEntry struct {
	SynthesisID string `json:"s"`
	Method      string `json:"m"`
	Path        string `json:"p"`
}

func (e unpromoteEntry) member() string {
	b, _ := json.Marshal(e) // strings only
	return string(b)
}

func entryOf(r *record) unpromoteEntry {
	return unpromoteEntry{SynthesisID: r.SynthesisID, Method: r.Method, Path: r.Path}
}

// promotionGuard is how long an unpromote (or a promotion) in flight keeps
// its queue entry from the janitor: its catalog call is bounded by
// PeerTimeout, the rest is Redis.
func (s *Server) promotionGuard() time.Duration { return 2*s.opts.PeerTimeout + time.Minute }

// releaseClaimScript deletes a claim when it is the caller's.
var releaseClaimScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// markScript sets the pending-unpromote mark of a contract that still
// exists (a contract that was never stored, or was deleted, gets none).
var markScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0
`)

// dueScript claims a due queue entry for one janitor: it moves the entry's
// score to ARGV[3] when it is at most ARGV[2] (only one replica's move
// succeeds). Returns 1 when claimed.
var dueScript = redis.NewScript(`
local sc = redis.call('ZSCORE', KEYS[1], ARGV[1])
if sc and tonumber(sc) <= tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return 1
end
return 0
`)

// claimPromotion claims (method, path) for the contract id until untilMs.
// It reports false when another contract holds the pair.
func (s *Server) claimPromotion(ctx context.Context, method, path, id string, untilMs int64) (bool, error) {
	err := s.rdb.SetArgs(ctx, rediskeys.RCNSPromotion(method, path), id, redis.SetArgs{Mode: "NX", ExpireAt: time.UnixMilli(untilMs)}).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("promotion claim: %w", err)
	}
	return true, nil
}

// releasePromotion drops the contract's claim of the pair, if it holds it.
func (s *Server) releasePromotion(ctx context.Context, method, path, id string) {
	if err := releaseClaimScript.Run(ctx, s.rdb, []string{rediskeys.RCNSPromotion(method, path)}, id).Err(); err != nil {
		s.log.WarnContext(ctx, "promotion claim not released; it expires with the contract", "synthesis_id", id, "method", method, "path", path, "error", err)
	}
}

// removePromoted removes the endpoint the contract promoted from the
// catalog, when the pair's claim is the contract's, then releases the
// claim. A pair nobody claims (a contract promoted before claims existed,
// or whose claim expired) is claimed for the removal first; a pair another
// contract claims is that contract's endpoint now, and is left alone. It
// succeeds when the endpoint is gone.
func (s *Server) removePromoted(ctx context.Context, e unpromoteEntry) error {
	key := rediskeys.RCNSPromotion(e.Method, e.Path)
	for try := 0; ; try++ {
		holder, err := s.rdb.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			if try == 2 {
				return errors.New("promotion claim: the pair's claim keeps changing")
			}
			ok, err := s.rdb.SetNX(ctx, key, e.SynthesisID, s.promotionGuard()).Result()
			if err != nil {
				return fmt.Errorf("promotion claim: %w", err)
			}
			if !ok {
				continue // claimed meanwhile: read whose it is
			}
			break
		}
		if err != nil {
			return fmt.Errorf("promotion claim: %w", err)
		}
		if holder != e.SynthesisID {
			s.log.InfoContext(ctx, "promoted endpoint belongs to another contract now; not removed",
				"synthesis_id", e.SynthesisID, "holder", holder, "method", e.Method, "path", e.Path)
			return nil
		}
		break
	}
	pctx, cancel := context.WithTimeout(ctx, s.opts.PeerTimeout)
	_, err := s.catalog.DeleteEndpoint(pctx, &catalogv1.DeleteEndpointRequest{Method: e.Method, Path: e.Path})
	cancel()
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("catalog DeleteEndpoint: %w", err)
	}
	s.releasePromotion(ctx, e.Method, e.Path, e.SynthesisID)
	return nil
}

// unpromote removes the endpoint a persistent contract promoted: it
// records the pending-unpromote mark, tries the removal once, and clears
// the mark when the endpoint is gone. An error means the mark could not be
// recorded (nothing will retry); a removal that failed is only logged and
// reported by pending, the mark kept for the retries. It does not stop
// with the caller's context: a removal in flight is finished.
func (s *Server) unpromote(ctx context.Context, e unpromoteEntry) (pending bool, err error) {
	ctx = context.WithoutCancel(ctx)
	member := e.member()
	due := s.now().Add(s.promotionGuard()).UnixMilli()
	if err := s.rdb.ZAdd(ctx, rediskeys.RCNSUnpromoteQueue, redis.Z{Score: float64(due), Member: member}).Err(); err != nil {
		return true, fmt.Errorf("pending unpromote: %w", err)
	}
	if err := markScript.Run(ctx, s.rdb, []string{rediskeys.Contract(e.SynthesisID)}, fieldUnpromote, "1").Err(); err != nil {
		return true, fmt.Errorf("pending unpromote: %w", err)
	}
	if err := s.removePromoted(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "promoted endpoint not removed from the catalog yet; the removal is retried",
			"synthesis_id", e.SynthesisID, "method", e.Method, "path", e.Path, "error", err)
		s.dueNow(ctx, member)
		return true, nil
	}
	s.unpromoted(ctx, e)
	return false, nil
}

// dueNow makes a pending unpromote whose attempt failed due at the
// janitor's next pass (unless it was cleared meanwhile).
func (s *Server) dueNow(ctx context.Context, member string) {
	if err := s.rdb.ZAddXX(ctx, rediskeys.RCNSUnpromoteQueue, redis.Z{Score: float64(s.now().UnixMilli()), Member: member}).Err(); err != nil {
		s.log.WarnContext(ctx, "pending unpromote not rescheduled; it is due after the guard", "error", err)
	}
}

// unpromoted clears the pending-unpromote mark once the endpoint is gone.
// A mark left behind (Redis refused) costs one more DeleteEndpoint, which
// answers NotFound.
func (s *Server) unpromoted(ctx context.Context, e unpromoteEntry) {
	err := errors.Join(
		s.rdb.HDel(ctx, rediskeys.Contract(e.SynthesisID), fieldUnpromote).Err(),
		s.rdb.ZRem(ctx, rediskeys.RCNSUnpromoteQueue, e.member()).Err(),
	)
	if err != nil {
		s.log.WarnContext(ctx, "pending-unpromote mark not cleared", "synthesis_id", e.SynthesisID, "error", err)
	}
}

// retryUnpromotes is the janitor's pass over the pending unpromotes: each
// due entry is claimed (dueScript) and tried again, and due again at the
// next pass when the removal fails. An entry whose contract
// is live is a promotion whose contract was stored: its end removes the
// endpoint, so the entry is dropped.
func (s *Server) retryUnpromotes(ctx context.Context) {
	now := s.now().UnixMilli()
	members, err := s.rdb.ZRangeByScore(ctx, rediskeys.RCNSUnpromoteQueue, &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now, 10), Count: expireBatch}).Result()
	if err != nil {
		s.log.WarnContext(ctx, "pending unpromote sweep failed", "error", err)
		return
	}
	next := s.now().Add(s.promotionGuard()).UnixMilli()
	for _, m := range members {
		if ctx.Err() != nil {
			return
		}
		claimed, err := dueScript.Run(ctx, s.rdb, []string{rediskeys.RCNSUnpromoteQueue}, m, now, next).Int()
		if err != nil || claimed == 0 {
			continue
		}
		var e unpromoteEntry
		if json.Unmarshal([]byte(m), &e) != nil || !validID(prefixSynthesis, e.SynthesisID) || e.Method == "" || e.Path == "" {
			s.log.WarnContext(ctx, "unreadable pending unpromote dropped", "entry", m)
			_ = s.rdb.ZRem(ctx, rediskeys.RCNSUnpromoteQueue, m).Err()
			continue
		}
		ct, err := s.load(ctx, e.SynthesisID)
		if err != nil {
			continue
		}
		if ct != nil && (ct.state == statePending || ct.state == stateActive) {
			_ = s.rdb.ZRem(ctx, rediskeys.RCNSUnpromoteQueue, m).Err()
			continue
		}
		if err := s.removePromoted(ctx, e); err != nil {
			s.log.WarnContext(ctx, "promoted endpoint still not removed from the catalog", "synthesis_id", e.SynthesisID,
				"method", e.Method, "path", e.Path, "error", err)
			s.dueNow(ctx, m)
			continue
		}
		s.unpromoted(ctx, e)
	}
}
