package chain

import (
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// appendLua is the compare-and-append step. Everything a record changes
// happens here, in one script, on keys of one hash slot:
//
//	KEYS[1] head hash   KEYS[2] record stream
//	KEYS[3] idempotency slot, when ARGV[6] is set
//	KEYS[3] or KEYS[4] request entry, when ARGV[12] is set (after the slot)
//	ARGV[1] head the record was signed against  ARGV[2] chain length it assumed
//	ARGV[3] new Audit-ID  ARGV[4] JWS  ARGV[5] stored-at (Unix ms)
//	ARGV[6] slot token  ARGV[7] slot TTL (ms)  ARGV[8] stored response
//
// It returns {1, sequence, outcome_stored} after an append, or
// {0, current_head, current_length} when the head moved, so the caller can
// re-sign without another round trip.
//
//	ARGV[9] writer ID  ARGV[10] "1" to claim the lease on conflict
//	ARGV[11] lease length (ms)
//
// The lease keeps a replica from starving: a writer whose cached head is
// fresh (it just appended) wins every race against a writer that must
// re-sign after a conflict. A writer that lost twice in a row claims a
// short lease in the head hash; while it holds it, only it may append, and
// its next append (after one re-sign) releases it. The lease is a fairness
// device only: the compare step alone keeps the chain from forking, and an
// abandoned lease expires after ARGV[11] ms (Redis clock).
//
//	ARGV[12] request fingerprint  ARGV[13] request window (ms)
//
// A request entry makes a retried request append once. It is read before
// the compare step, so a retry gets its earlier record whatever the head
// is now: {2, sequence, outcome_stored, audit_id, jws, stored_at,
// current_head, current_length}, or {3, audit_id, sequence} when the entry
// was written for a request with another fingerprint. It is written with
// the record, in the same script, so a record and its request entry exist
// together or not at all; it expires after the window.
//
//	ARGV[14] "1" when the append is followed by WAIT (Options.ReplicaAcks)
//
// WAIT counts the replicas that have the calling connection's latest
// write. A replay writes nothing by itself, so with ARGV[14] it counts
// itself in the request entry ('replays'): that write comes after the
// record it answers with, and the WAIT that follows then proves the
// replicas have that record too.
//
// The stream is the source of truth and the head hash a cache of its tail:
// if the head hash is missing (never written, or deleted by an operator),
// the head is read from the stream's last entry, so a lost head can never
// restart a chain at ZeroAuditID (a fork). Stream entry IDs are
// "<sequence>-0", so XADD itself refuses any sequence that does not grow.
const appendLua = `
local cur = redis.call('HMGET', KEYS[1], '@HEAD@', '@LEN@', 'lease', 'lease_until')
local head, len = cur[1], cur[2]
if not head or not len then
  head, len = '@ZERO@', '0'
  local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
  if #last > 0 then
    local id, f = last[1][1], last[1][2]
    len = string.match(id, '^(%d+)-')
    for i = 1, #f, 2 do
      if f[i] == 'audit_id' then head = f[i + 1] end
    end
  end
end
local slot, req
local k = 3
if ARGV[6] ~= '' then
  slot = KEYS[k]
  k = k + 1
end
if ARGV[12] ~= '' then
  req = KEYS[k]
  local d = redis.call('HMGET', req, '@RFP@', '@RSEQ@', '@RID@', '@RSTORED@')
  if d[1] then
    if d[1] ~= ARGV[12] then
      return {3, d[3] or '', d[2] or ''}
    end
    if cur[3] == ARGV[9] then
      redis.call('HDEL', KEYS[1], 'lease', 'lease_until')
    end
    if ARGV[14] == '1' then
      redis.call('HINCRBY', req, 'replays', 1)
    end
    local jws, at = '', ''
    local e = redis.call('XRANGE', KEYS[2], d[2] .. '-0', d[2] .. '-0')
    if #e > 0 then
      local f = e[1][2]
      for i = 1, #f, 2 do
        if f[i] == 'jws' then jws = f[i + 1] elseif f[i] == 'stored_at' then at = f[i + 1] end
      end
    end
    return {2, d[2], d[4], d[3], jws, at, head, len}
  end
end
local now
local function millis()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local leased = cur[3] and cur[3] ~= ARGV[9] and tonumber(cur[4] or '0') > millis()
if leased or head ~= ARGV[1] or len ~= ARGV[2] then
  if ARGV[10] == '1' and not leased then
    redis.call('HSET', KEYS[1], 'lease', ARGV[9], 'lease_until', millis() + tonumber(ARGV[11]))
  end
  return {0, head, len}
end
local seq = string.format('%d', tonumber(len) + 1)
redis.call('XADD', KEYS[2], seq .. '-0', 'audit_id', ARGV[3], 'jws', ARGV[4], 'stored_at', ARGV[5])
redis.call('HSET', KEYS[1], '@HEAD@', ARGV[3], '@LEN@', seq)
if cur[3] then
  redis.call('HDEL', KEYS[1], 'lease', 'lease_until')
end
local stored = 0
if slot then
  local tok = redis.call('HGET', slot, '@TOKEN@')
  if tok and tok == ARGV[6] then
    redis.call('HSET', slot, '@STATE@', '@DONE@', '@RESPONSE@', ARGV[8])
    redis.call('PEXPIRE', slot, ARGV[7])
    stored = 1
  end
end
if req then
  redis.call('HSET', req, '@RFP@', ARGV[12], '@RSEQ@', seq, '@RID@', ARGV[3], '@RSTORED@', stored)
  redis.call('PEXPIRE', req, ARGV[13])
end
return {1, seq, stored}
`

var appendScript = redis.NewScript(strings.NewReplacer(
	"@HEAD@", rediskeys.HeadAuditID,
	"@LEN@", rediskeys.HeadLength,
	"@ZERO@", attribution.ZeroAuditID,
	"@TOKEN@", rediskeys.SlotToken,
	"@STATE@", rediskeys.SlotState,
	"@DONE@", rediskeys.SlotDone,
	"@RESPONSE@", rediskeys.SlotResponse,
	"@RFP@", requestFingerprint,
	"@RSEQ@", requestSequence,
	"@RID@", requestAuditID,
	"@RSTORED@", requestOutcomeStored,
).Replace(appendLua))
