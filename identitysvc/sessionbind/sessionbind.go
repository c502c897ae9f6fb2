// Package sessionbind binds a Session-ID to the Agent-ID and TLS client
// identity it was first seen with, and refuses a later mismatch
// (core §10.4.5; docs/decisions.md#D-session-binding: client-chosen
// Session-IDs, bound on first sight, 401 on mismatch).
//
// It is public so the front door can call it in process with its own
// Redis client and skip the check for a connection it has already bound;
// identitysvc's ResolveAgent calls the same code when a request carries a
// session_id.
package sessionbind

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Reason tokens.
const (
	// ReasonMismatch is 401: the Session-ID is bound to another agent or
	// another TLS client key.
	ReasonMismatch = "session-binding-mismatch"
	// ReasonInvalid is 400: the Session-ID cannot carry 128 random bits or
	// holds characters outside visible ASCII.
	ReasonInvalid = "session-id-invalid"
	// ReasonSuspended is 409: the session is suspended (core §7.2.12).
	ReasonSuspended = "session-suspended"
	// ReasonExpired is 409: resume_by passed without a RESUME.
	ReasonExpired = "session-expired"
	// ReasonNotFound is 404: SUSPEND or RESUME of a session that is not
	// bound to the caller.
	ReasonNotFound = "session-not-found"
	// ReasonNotSuspended is 409: RESUME of a session that is not suspended.
	ReasonNotSuspended = "session-not-suspended"
	// ReasonNonceInvalid is 403: the resumption nonce does not match (or
	// was used already; it is single use).
	ReasonNonceInvalid = "resumption-nonce-invalid"
)

// Length bounds of a Session-ID. 22 is the length of 128 bits in
// base64url (core §10.4.5 asks for at least 128 bits of randomness; the
// length is the part a server can check).
const (
	MinLength = 22
	MaxLength = 256
)

// DefaultTTL is how long a binding outlives its last use.
const DefaultTTL = 24 * time.Hour

// bindScript binds on first sight and refreshes the TTL on every match,
// so a binding lives as long as the session is in use.
// A suspended session (fields suspension_id, resume_by in unix ms) answers
// 3, or 4 once resume_by has passed (expired).
var bindScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'agent_id', 'client_key', 'suspension_id', 'resume_by')
if not cur[1] then
  redis.call('HSET', KEYS[1], 'agent_id', ARGV[1], 'client_key', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  if cur[3] then
    if tonumber(ARGV[4]) > tonumber(cur[4]) then return 4 end
    return 3
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 2
end
return 0
`)

// Binder checks Session-ID bindings in Redis.
type Binder struct {
	rdb redis.UniversalClient
	ttl time.Duration
}

// New returns a Binder; ttl <= 0 means DefaultTTL.
func New(rdb redis.UniversalClient, ttl time.Duration) *Binder {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Binder{rdb: rdb, ttl: ttl}
}

// Valid reports whether a Session-ID has an acceptable form.
func Valid(sessionID string) bool {
	if len(sessionID) < MinLength || len(sessionID) > MaxLength {
		return false
	}
	for i := 0; i < len(sessionID); i++ {
		if c := sessionID[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// Bind binds sessionID to agentID and clientKeyFingerprint (empty when
// the connection presented no client certificate) the first time it is
// seen, and afterwards checks that both still match. It returns nil on a
// match, and grpcerr errors: InvalidArgument session-id-invalid,
// Unauthenticated session-binding-mismatch, or Internal on a Redis
// failure.
func (b *Binder) Bind(ctx context.Context, sessionID, agentID, clientKeyFingerprint string) error {
	if !Valid(sessionID) {
		return grpcerr.InvalidArgument(ReasonInvalid,
			fmt.Sprintf("a Session-ID is %d to %d visible ASCII characters carrying at least 128 random bits", MinLength, MaxLength))
	}
	res, err := bindScript.Run(ctx, b.rdb, []string{rediskeys.SessionBinding(sessionID)},
		agentID, clientKeyFingerprint, b.ttl.Milliseconds(), time.Now().UnixMilli()).Int()
	if err != nil {
		if cerr := grpcerr.FromContext(ctx.Err()); cerr != nil {
			return cerr
		}
		return grpcerr.Internal(fmt.Errorf("session binding: %w", err))
	}
	switch res {
	case 0:
		return grpcerr.Unauthenticated(ReasonMismatch,
			"the Session-ID is bound to a different Agent-ID or TLS client identity")
	case 3:
		return grpcerr.Conflict(ReasonSuspended, "the session is suspended; RESUME it with its resumption nonce first")
	case 4:
		return grpcerr.Conflict(ReasonExpired, "the session was suspended and not resumed before resume_by; start a new session")
	}
	return nil
}
