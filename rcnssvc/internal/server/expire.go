package server

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/rediskeys"
)

// expireBatch bounds one janitor pass.
const expireBatch = 256

// janitor is one pass of the contract janitor: expiry, then the removals
// of promoted endpoints that are still pending.
func (s *Server) janitor(ctx context.Context) {
	s.expireContracts(ctx)
	s.retryUnpromotes(ctx)
}

// expireContracts ends the contracts whose expiry passed: each replica
// claims an ID by removing it from the index (only one removal succeeds),
// records the end, audits rcns_release (reason expired) for an accepted
// contract, and removes a promoted endpoint from the catalog. Readers do
// not wait for it: a contract past its expiry never resolves.
func (s *Server) expireContracts(ctx context.Context) {
	now := s.now().UnixMilli()
	ids, err := s.rdb.ZRangeByScore(ctx, rediskeys.ContractIndex, &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now, 10), Count: expireBatch}).Result()
	if err != nil {
		s.log.WarnContext(ctx, "contract expiry sweep failed", "error", err)
		return
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		n, err := s.rdb.ZRem(ctx, rediskeys.ContractIndex, id).Result()
		if err != nil || n == 0 {
			continue
		}
		ct, err := s.load(ctx, id)
		if err != nil || ct == nil {
			continue
		}
		switch ct.state {
		case stateActive:
			event := eventRelease
			if ct.unaudited() {
				event = "" // its acceptance was never audited: it was never in force
			}
			changed, _, err := s.transition(ctx, id, []string{stateActive}, stateExpired, "expired", "rcnssvc", event)
			if err != nil {
				s.requeue(ctx, ct, err)
				continue
			}
			if !changed {
				continue // revoked or released meanwhile; that path finishes it
			}
			ct.state, ct.event, ct.reason, ct.actor = stateExpired, event, "expired", "rcnssvc"
		case statePending:
			// A preview nobody accepted: no event (it was never a contract
			// in force).
			if _, _, err := s.transition(ctx, id, []string{statePending}, stateExpired, "expired", "rcnssvc", ""); err != nil {
				s.requeue(ctx, ct, err)
				continue
			}
			ct.event = ""
		}
		if err := s.finish(ctx, ct, ct.state == stateEvicted); err != nil {
			s.requeue(ctx, ct, err)
		}
	}
}

// requeue puts a contract back in the index so the next pass retries.
func (s *Server) requeue(ctx context.Context, ct *contract, cause error) {
	s.log.WarnContext(ctx, "contract expiry deferred", "synthesis_id", ct.rec.SynthesisID, "error", cause)
	_ = s.rdb.ZAdd(ctx, rediskeys.ContractIndex, redis.Z{Score: float64(ct.rec.ExpiresMs), Member: ct.rec.SynthesisID}).Err()
}
