package server

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// emit appends a contract event to the originating agent's lifecycle
// stream (core §6.5.7: rcns_propose_accepted, rcns_revoke, rcns_release;
// not sent to the transparency log).
func (s *Server) emit(ctx context.Context, r *record, event, reason, actor string) error {
	claims := map[string]any{
		"agent_id":           r.AgentID,
		"event_type":         event,
		"method":             r.Method,
		"path":               r.Path,
		"synthesis_id":       r.SynthesisID,
		"contract_hash":      r.ContractHash,
		"negotiation_origin": r.Origin,
		"recipe_name":        r.RecipeName,
		"recipe_version":     r.RecipeVersion,
		"persistent":         r.Persistent,
		"issued_at":          rfc3339(r.IssuedMs),
		"expires_at":         rfc3339(r.ExpiresMs),
	}
	if r.SessionID != "" {
		claims["session_id"] = r.SessionID
	}
	if reason != "" {
		claims["reason"] = reason
	}
	if actor != "" {
		claims["actor"] = actor
	}
	b, err := json.Marshal(claims)
	if err != nil {
		return grpcerr.Internal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, s.opts.PeerTimeout)
	defer cancel()
	if _, err := auditclient.AppendLifecycleEvent(pctx, s.audit, &auditv1.AppendLifecycleEventRequest{AgentId: r.AgentID, EventType: event, Claims: string(b)}); err != nil {
		s.log.ErrorContext(ctx, "contract event not audited", "event", event, "synthesis_id", r.SynthesisID, "error", err)
		return grpcerr.Unavailable("audit-unavailable", "the contract event could not be audited; retry")
	}
	return nil
}

func rfc3339(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// attempt is a failed synthesis attempt (core §7.2.4 INSPECT
// target=rcns-attempt): the pair, the requesting agent, its resolved trust
// tier, the result of each gate lock, and the reason.
type attempt struct {
	AttemptID   string            `json:"attempt_id"`
	Kind        string            `json:"kind"`
	Method      string            `json:"method"`
	Path        string            `json:"path"`
	AgentID     string            `json:"agent_id"`
	TrustTier   int32             `json:"trust_tier"`
	Locks       map[string]string `json:"locks,omitempty"`
	Status      int               `json:"status"`
	Reason      string            `json:"reason"`
	Explanation string            `json:"explanation"`
	SynthesisID string            `json:"synthesis_id,omitempty"`
	RecipeName  string            `json:"recipe_name,omitempty"`
	At          string            `json:"at"`
}

// Lock results.
const (
	lockOpen         = "open"
	lockClosed       = "closed"
	lockNotEvaluated = "not-evaluated"
)

// ringScript pushes an attempt ID on the ring and returns the IDs that
// fell off its end, for the caller to delete.
var ringScript = redis.NewScript(`
redis.call('LPUSH', KEYS[1], ARGV[1])
local n = redis.call('LLEN', KEYS[1]) - tonumber(ARGV[2])
if n > 0 then
  return redis.call('RPOP', KEYS[1], n)
end
return {}
`)

// record stores a failed attempt and returns its ID (the RCNS-Attempt-Id).
// The record is best effort: the ID is returned even when Redis refuses
// the write, because the 464 must carry one (core §5.5.4).
func (s *Server) record(ctx context.Context, a *attempt) string {
	a.AttemptID = newID(prefixAttempt)
	a.At = s.now().UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(a)
	if err == nil {
		err = s.rdb.Set(ctx, rediskeys.RCNSAttempt(a.AttemptID), b, s.opts.Attempts.TTL).Err()
	}
	if err == nil {
		var evicted []string
		evicted, err = ringScript.Run(ctx, s.rdb, []string{rediskeys.RCNSAttemptRing}, a.AttemptID, s.opts.Attempts.Max).StringSlice()
		for _, id := range evicted {
			if derr := s.rdb.Del(ctx, rediskeys.RCNSAttempt(id)).Err(); derr != nil {
				err = fmt.Errorf("evict attempt %s: %w", id, derr)
			}
		}
	}
	if err != nil {
		s.log.WarnContext(ctx, "rcns attempt not recorded", "attempt_id", a.AttemptID, "error", err)
	}
	return a.AttemptID
}
