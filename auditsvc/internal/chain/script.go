package chain

import (
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// appendLua is the compare-and-append step of one or more consecutive
// records of one chain. Everything a record changes happens here, in one
// script, on keys of one hash slot:
//
//	KEYS[1] head hash   KEYS[2] record stream
//	then per record, in order: its idempotency slot when it has a slot
//	token, then its request entry and the first release's when it has a
//	request fingerprint
//	ARGV[1] head the first record was signed against
//	ARGV[2] chain length it assumed
//	ARGV[3] writer ID  ARGV[4] "1" to claim the lease on conflict
//	ARGV[5] lease length (ms)  ARGV[6] request window (ms)
//	ARGV[7] "1" when the append is followed by WAIT (Options.ReplicaAcks)
//	ARGV[8] number of records N
//	per record i (from b = 8 + 7 * (i - 1)): ARGV[b+1] Audit-ID
//	ARGV[b+2] JWS  ARGV[b+3] stored-at (Unix ms)  ARGV[b+4] slot token
//	ARGV[b+5] slot TTL (ms)  ARGV[b+6] stored response
//	ARGV[b+7] request fingerprint
//
// Record i > 1 was signed against record i-1's Audit-ID, so once the
// first record passes the compare step the rest link to it by
// construction; a batch costs one script call and one head write instead
// of one each per record. The reply is a list with one entry per record
// the script got to, in order:
//
//	{1, sequence, outcome_stored}  appended
//	{0, current_head, current_length}  (first record only) the head
//	moved: nothing was appended; the caller re-signs against it without
//	another round trip
//	{2, sequence, outcome_stored, audit_id, jws, stored_at, current_head,
//	current_length}  the record's request was appended before (replay)
//	{3, audit_id, sequence}  its request ID was used by other content
//
// A replay or reuse ends the list: the records after it were signed
// against a record that was not appended, so the caller re-signs them
// against the head the reply names and sends them again. The records
// before it are appended, with the head written, before the script
// returns.
//
// The lease keeps a replica from starving: a writer whose cached head is
// fresh (it just appended) wins every race against a writer that must
// re-sign after a conflict. A writer that lost twice in a row claims a
// short lease in the head hash; while it holds it, only it may append, and
// its next append (after one re-sign) releases it. The lease is a fairness
// device only: the compare step alone keeps the chain from forking, and an
// abandoned lease expires after ARGV[5] ms (Redis clock).
//
// A request entry makes a retried request append once. It is a string
// "<sequence> <outcome_stored> <audit_id> <fingerprint>" written with its
// record by one SET with the window as its expiry, so a record and its
// request entry exist together or not at all. The entries of all the
// batch's records are read before the records, with one MGET, so a retry
// gets its earlier record whatever the head is now; a request twice in
// one batch finds the entry the script wrote for the first. The first
// release kept each entry as a hash under another key: one EXISTS over
// those keys, and only if some exist a read of those, keeps them honoured
// until they expire. So a batch's request IDs cost two commands to read
// and one per record to write, instead of three per record.
//
// WAIT counts the replicas that have the calling connection's latest
// write. A replay writes nothing by itself, so with ARGV[7] it writes its
// entry again (a first-release entry counts itself in 'replays'): that
// write comes after the record it answers with, and the WAIT that follows
// then proves the replicas have that record too.
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
local lease = cur[3]
local now
local function millis()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local n = tonumber(ARGV[8])
local slots, reqs, olds, reqkeys, oldkeys, at = {}, {}, {}, {}, {}, {}
local k = 3
for i = 1, n do
  local b = 8 + 7 * (i - 1)
  if ARGV[b + 4] ~= '' then
    slots[i] = KEYS[k]
    k = k + 1
  end
  if ARGV[b + 7] ~= '' then
    reqs[i], olds[i] = KEYS[k], KEYS[k + 1]
    reqkeys[#reqkeys + 1], oldkeys[#reqkeys + 1] = KEYS[k], KEYS[k + 1]
    at[#reqkeys] = i
    k = k + 2
  end
end
local found, written = {}, {}
if #reqkeys > 0 then
  local v = redis.call('MGET', unpack(reqkeys))
  for j = 1, #reqkeys do
    if v[j] then
      local seq, st, aid, fp = string.match(v[j], '^(%d+) (%d) (%S+) (.*)$')
      found[at[j]] = {fp, seq, aid, st, v[j]}
    end
  end
  if redis.call('EXISTS', unpack(oldkeys)) > 0 then
    for j = 1, #oldkeys do
      if not v[j] then
        local d = redis.call('HMGET', oldkeys[j], '@RFP@', '@RSEQ@', '@RID@', '@RSTORED@')
        if d[1] then found[at[j]] = {d[1], d[2], d[3], d[4]} end
      end
    end
  end
end
local out = {}
local moved = false
local function finish()
  if moved then
    redis.call('HSET', KEYS[1], '@HEAD@', head, '@LEN@', len)
  end
  return out
end
for i = 1, n do
  local b = 8 + 7 * (i - 1)
  local slot, req = slots[i], reqs[i]
  if req then
    local d = written[req] or found[i]
    if d then
      if d[1] ~= ARGV[b + 7] then
        out[i] = {3, d[3] or '', d[2] or ''}
        return finish()
      end
      if lease and lease == ARGV[3] then
        redis.call('HDEL', KEYS[1], 'lease', 'lease_until')
        lease = nil
      end
      if ARGV[7] == '1' and not written[req] then
        if d[5] then
          redis.call('SET', req, d[5], 'KEEPTTL')
        else
          redis.call('HINCRBY', olds[i], 'replays', 1)
        end
      end
      local jws, sat = '', ''
      local e = redis.call('XRANGE', KEYS[2], d[2] .. '-0', d[2] .. '-0')
      if #e > 0 then
        local f = e[1][2]
        for j = 1, #f, 2 do
          if f[j] == 'jws' then jws = f[j + 1] elseif f[j] == 'stored_at' then sat = f[j + 1] end
        end
      end
      out[i] = {2, d[2], d[4], d[3], jws, sat, head, len}
      return finish()
    end
  end
  if i == 1 then
    local leased = lease and lease ~= ARGV[3] and tonumber(cur[4] or '0') > millis()
    if leased or head ~= ARGV[1] or len ~= ARGV[2] then
      if ARGV[4] == '1' and not leased then
        redis.call('HSET', KEYS[1], 'lease', ARGV[3], 'lease_until', millis() + tonumber(ARGV[5]))
      end
      return {{0, head, len}}
    end
  end
  local seq = string.format('%d', tonumber(len) + 1)
  redis.call('XADD', KEYS[2], seq .. '-0', 'audit_id', ARGV[b + 1], 'jws', ARGV[b + 2], 'stored_at', ARGV[b + 3])
  head, len, moved = ARGV[b + 1], seq, true
  if lease then
    redis.call('HDEL', KEYS[1], 'lease', 'lease_until')
    lease = nil
  end
  local stored = '0'
  if slot then
    local tok = redis.call('HGET', slot, '@TOKEN@')
    if tok and tok == ARGV[b + 4] then
      redis.call('HSET', slot, '@STATE@', '@DONE@', '@RESPONSE@', ARGV[b + 6])
      redis.call('PEXPIRE', slot, ARGV[b + 5])
      stored = '1'
    end
  end
  if req then
    local v = seq .. ' ' .. stored .. ' ' .. ARGV[b + 1] .. ' ' .. ARGV[b + 7]
    redis.call('SET', req, v, 'PX', ARGV[6])
    written[req] = {ARGV[b + 7], seq, ARGV[b + 1], stored, v}
  end
  out[i] = {1, seq, stored}
end
return finish()
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
