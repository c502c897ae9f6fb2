package sessionbind

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// DefaultSuspension is how long a suspension lasts when SUSPEND names no
// resume_by.
const DefaultSuspension = 24 * time.Hour

// MaxCheckpoint bounds the checkpoint kept with a suspension.
const MaxCheckpoint = 64 << 10

// MaxReason bounds the reason kept with a suspension, in bytes: the bound
// the suite puts on every reason a caller gives (lifecycle transitions,
// contract revocations, escalations).
const MaxReason = 1024

// MaxSuspension is the furthest ahead resume_by may lie. The binding is
// kept until resume_by, so without a bound a caller could pin a session
// key in Redis for centuries; a workflow paused longer than this starts
// a new session.
const MaxSuspension = 30 * 24 * time.Hour

// Suspension is the result of Suspend (core §7.2.12).
type Suspension struct {
	ID       string
	Nonce    string
	ResumeBy time.Time
}

// suspendScript suspends a session bound to ARGV[1] and, when ARGV[8] is
// "1", to the client key ARGV[9]; the binding then lives until resume_by
// (plus its idle TTL), so an expired suspension is still reported as
// expired rather than forgotten.
var suspendScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'agent_id', 'suspension_id', 'client_key')
if not cur[1] or cur[1] ~= ARGV[1] then return 0 end
if ARGV[8] == '1' and (cur[3] or '') ~= ARGV[9] then return 0 end
if cur[2] then return 2 end
redis.call('HSET', KEYS[1], 'suspension_id', ARGV[2], 'nonce', ARGV[3], 'resume_by', ARGV[4], 'checkpoint', ARGV[5], 'reason', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[7])
return 1
`)

// resumeScript checks and consumes the nonce (single use).
var resumeScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'agent_id', 'suspension_id', 'nonce', 'resume_by', 'checkpoint')
if not cur[1] or cur[1] ~= ARGV[1] then return {0} end
if not cur[2] then return {2} end
if tonumber(ARGV[3]) > tonumber(cur[4]) then return {4} end
if cur[3] ~= ARGV[2] then return {3} end
redis.call('HDEL', KEYS[1], 'suspension_id', 'nonce', 'resume_by', 'checkpoint', 'reason')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, cur[2], cur[5] or ''}
`)

func nonceHash(nonce string) string {
	sum := sha256.Sum256([]byte(nonce))
	return hex.EncodeToString(sum[:])
}

// Suspend suspends a session bound to agentID and, when clientKey is not
// nil, to that client key fingerprint (core §10.4.5: another key of the
// agent could otherwise suspend the session and take its nonce).
func (b *Binder) Suspend(ctx context.Context, sessionID, agentID string, clientKey *string, reason string, resumeBy time.Time, checkpoint []byte) (*Suspension, error) {
	if !Valid(sessionID) {
		return nil, grpcerr.InvalidArgument(ReasonInvalid, "the Session-ID is not valid")
	}
	if len(checkpoint) > MaxCheckpoint {
		return nil, grpcerr.InvalidArgument("checkpoint-too-large", fmt.Sprintf("a checkpoint is at most %d bytes", MaxCheckpoint))
	}
	if len(reason) > MaxReason {
		return nil, grpcerr.InvalidArgument("reason-too-long", fmt.Sprintf("a reason is at most %d bytes", MaxReason))
	}
	now := time.Now()
	if resumeBy.IsZero() {
		resumeBy = now.Add(DefaultSuspension)
	}
	if !resumeBy.After(now) {
		return nil, grpcerr.InvalidArgument("resume-by-past", "resume_by must be in the future")
	}
	if latest := now.Add(MaxSuspension); resumeBy.After(latest) {
		return nil, grpcerr.InvalidArgument("resume-by-too-far", fmt.Sprintf("resume_by is at most %d days ahead", MaxSuspension/(24*time.Hour)),
			"latest_resume_by", latest.UTC().Format(time.RFC3339))
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, grpcerr.Internal(err)
	}
	s := &Suspension{Nonce: base64.RawURLEncoding.EncodeToString(raw[:]), ResumeBy: resumeBy}
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, grpcerr.Internal(err)
	}
	s.ID = "susp-" + hex.EncodeToString(raw[:])
	checkKey, key := "0", ""
	if clientKey != nil {
		checkKey, key = "1", *clientKey
	}
	res, err := suspendScript.Run(ctx, b.rdb, []string{rediskeys.SessionBinding(sessionID)},
		agentID, s.ID, nonceHash(s.Nonce), resumeBy.UnixMilli(), string(checkpoint), reason, keepSuspended(resumeBy, now, b.ttl).Milliseconds(),
		checkKey, key).Int()
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("suspend session: %w", err))
	}
	switch res {
	case 0:
		return nil, grpcerr.NotFound(ReasonNotFound, "no session with that Session-ID is bound to the calling agent and its client key")
	case 2:
		return nil, grpcerr.Conflict(ReasonSuspended, "the session is already suspended")
	}
	return s, nil
}

// keepSuspended is how long a suspended binding is kept: until
// resume_by, then the idle TTL, so an expired suspension is still
// reported as expired. It is never zero, since PEXPIRE would then delete
// the binding, which would bind again unsuspended while SUSPEND answered
// "suspended".
func keepSuspended(resumeBy, now time.Time, ttl time.Duration) time.Duration {
	return rediskeys.KeepUntil(resumeBy, now, MaxSuspension, ttl)
}

// Resume consumes a suspension's nonce and returns its ID and checkpoint.
func (b *Binder) Resume(ctx context.Context, sessionID, agentID, nonce string) (suspensionID string, checkpoint []byte, err error) {
	vals, err := resumeScript.Run(ctx, b.rdb, []string{rediskeys.SessionBinding(sessionID)},
		agentID, nonceHash(nonce), time.Now().UnixMilli(), b.ttl.Milliseconds()).Slice()
	if err != nil {
		return "", nil, grpcerr.Internal(fmt.Errorf("resume session: %w", err))
	}
	code, _ := vals[0].(int64)
	switch code {
	case 0:
		return "", nil, grpcerr.NotFound(ReasonNotFound, "no session with that Session-ID is bound to the calling agent")
	case 2:
		return "", nil, grpcerr.Conflict(ReasonNotSuspended, "the session is not suspended")
	case 3:
		return "", nil, grpcerr.PermissionDenied(ReasonNonceInvalid, "the resumption nonce does not match this suspension (nonces are single use)")
	case 4:
		return "", nil, grpcerr.Conflict(ReasonExpired, "the suspension's resume_by has passed; the session expired")
	}
	id, _ := vals[1].(string)
	cp, _ := vals[2].(string)
	if cp != "" {
		checkpoint = []byte(cp)
	}
	return id, checkpoint, nil
}
