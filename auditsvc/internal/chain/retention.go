package chain

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// A chain whose oldest records were moved out of Redis (Store.Trim) starts
// at a checkpoint (attribution.Checkpoint) signed with the store's signing
// key. Verification checks the checkpoint's signature and continues the
// chain from it, so a trimmed chain verifies like a whole one. A
// checkpoint an earlier release stored without its typ is signed again
// by the next Trim of its chain (resignCheckpoint); until then it does
// not verify (docs/audit.md, "Retention").

// CheckpointVersion is the checkpoint_version of a checkpoint record.
const CheckpointVersion = attribution.CheckpointVersion

// Checkpoint is the signed statement that the records of (Stream, Chain)
// up to Sequence, the last of them AuditID, were moved to the archive.
type Checkpoint = attribution.Checkpoint

// ErrCheckpoint: a chain's checkpoint is malformed, does not verify or
// does not name its chain.
var ErrCheckpoint = attribution.ErrCheckpoint

// checkpointKey is the checkpoint key of (stream, chain).
func checkpointKey(stream, chain string) string {
	switch stream {
	case attribution.StreamAttribution:
		return rediskeys.ChainCheckpoint(chain)
	case attribution.StreamLifecycle:
		return rediskeys.LifecycleCheckpoint(chain)
	}
	return rediskeys.SignedStreamCheckpoint(chain, stream)
}

// Checkpoint returns the verified checkpoint of (stream, chain), or nil
// when the chain was never trimmed. A checkpoint that does not verify
// against opts is an error wrapping ErrCheckpoint.
func (s *Store) Checkpoint(ctx context.Context, stream, chain string, opts attribution.VerifyOptions) (*Checkpoint, error) {
	if !ValidStreamName(stream) || !ValidChainID(chain) {
		return nil, ErrNotFound
	}
	jws, err := s.rdb.HGet(ctx, checkpointKey(stream, chain), rediskeys.CheckpointJWS).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read checkpoint: %v", ErrUnavailable, err)
	}
	return attribution.VerifyCheckpoint(jws, stream, chain, opts)
}

// TrimResult says what one Trim call did.
type TrimResult struct {
	// Moved counts records written to the archive and removed from Redis.
	Moved int
	// Checkpoint is the chain's checkpoint after the call (nil: none).
	Checkpoint *Checkpoint
}

// trimPage bounds the records moved per step, so a long backlog costs
// bounded memory.
const trimPage = 1000

// Trim moves the records of (stream, chain) stored before cutoff out of
// Redis, oldest first and a page at a time: it reads them, verifies them
// as a continuation of the chain's checkpoint (opts), hands them to
// archive, which must have made them durable when it returns, signs a
// checkpoint after the last of them, and only then removes them from the
// stream (one script stores the checkpoint and trims, and never moves a
// checkpoint backwards). The newest record always stays, so the stream
// keeps naming the chain's head. A crash at any point is repaired by the
// next call: records the checkpoint already covers are removed without
// being archived again; records archived without a checkpoint are
// archived again (the archive then holds them twice, identically).
func (s *Store) Trim(ctx context.Context, stream, chain string, cutoff time.Time, opts attribution.ChainOptions,
	archive func([]attribution.Entry) error) (TrimResult, error) {
	var res TrimResult
	_, streamKey := keys(stream, chain)
	for first := true; ; first = false {
		// Read the checkpoint every page: another replica may have moved
		// records meanwhile.
		cp, err := s.Checkpoint(ctx, stream, chain, opts.VerifyOptions)
		if first && errors.Is(err, attribution.ErrUntypedCheckpoint) {
			cp, err = s.resignCheckpoint(ctx, stream, chain, opts.VerifyOptions)
		}
		if err != nil {
			return res, err
		}
		res.Checkpoint = cp
		if cp != nil && first {
			// Finish an interrupted step: remove what the checkpoint covers.
			if err := s.storeCheckpoint(ctx, stream, chain, cp); err != nil {
				return res, err
			}
		}
		last, err := s.rdb.XRevRangeN(ctx, streamKey, "+", "-", 1).Result()
		if err != nil {
			return res, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if len(last) == 0 {
			return res, nil
		}
		tail, err := entryOf(stream, chain, last[0])
		if err != nil {
			return res, err
		}
		from, prev := uint64(1), attribution.ZeroAuditID
		if cp != nil {
			from, prev = cp.Sequence+1, cp.AuditID
		}
		es, err := s.rdb.XRangeN(ctx, streamKey, streamID(from), "+", trimPage).Result()
		if err != nil {
			return res, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		page, err := entriesOf(stream, chain, es)
		if err != nil {
			return res, err
		}
		n := 0
		for _, e := range page {
			if e.Sequence >= tail.Sequence || !e.StoredAt.Before(cutoff) {
				break
			}
			n++
		}
		page = page[:n]
		if len(page) == 0 {
			return res, nil
		}
		o := opts
		o.Start = prev
		v := attribution.NewChainVerifier(o)
		for i, e := range page {
			if want := from + uint64(i); e.Sequence != want {
				return res, fmt.Errorf("%w: %s/%s: record %d is missing (next stored is %d); nothing moved", ErrCheckpoint, stream, chain, want, e.Sequence)
			}
			if _, err := v.Add(e.JWS, e.AuditID); err != nil {
				return res, fmt.Errorf("%w: %s/%s: record %d does not verify, nothing moved: %v", ErrCheckpoint, stream, chain, e.Sequence, err)
			}
		}
		if err := archive(page); err != nil {
			return res, fmt.Errorf("archive moved records: %w", err)
		}
		lastMoved := page[len(page)-1]
		next, err := s.signCheckpoint(stream, chain, lastMoved)
		if err != nil {
			return res, err
		}
		if err := s.storeCheckpoint(ctx, stream, chain, next); err != nil {
			return res, err
		}
		res.Checkpoint = next
		res.Moved += len(page)
		s.dropIndex(ctx, page)
		if len(page) < trimPage {
			return res, nil
		}
	}
}

func (s *Store) signCheckpoint(stream, chain string, last attribution.Entry) (*Checkpoint, error) {
	cp := Checkpoint{Version: CheckpointVersion, Stream: stream, Chain: chain, Sequence: last.Sequence, AuditID: last.AuditID,
		TrimmedAt: s.opts.Now().UTC().Format(time.RFC3339Nano)}
	jws, err := s.signer.Load().SignCheckpoint(cp)
	if err != nil {
		return nil, err
	}
	cp.JWS = jws
	return &cp, nil
}

// resignCheckpoint signs again, with its typ, the checkpoint of (stream,
// chain) that an earlier release stored without one, and returns the
// chain's checkpoint after that. Only a JWS that
// attribution.VerifyUntypedCheckpoint accepts is signed again, so a
// record put in the checkpoint's place never becomes one. The records it
// covers are gone from Redis, so the old checkpoint's signature is all
// there is to go on; the new one states the same sequence, Audit-ID and
// trimmed_at.
func (s *Store) resignCheckpoint(ctx context.Context, stream, chain string, opts attribution.VerifyOptions) (*Checkpoint, error) {
	key := checkpointKey(stream, chain)
	old, err := s.rdb.HGet(ctx, key, rediskeys.CheckpointJWS).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: read checkpoint: %v", ErrUnavailable, err)
	}
	cp, err := attribution.VerifyUntypedCheckpoint(old, stream, chain, opts)
	if err != nil {
		return nil, err
	}
	jws, err := s.signer.Load().SignCheckpoint(*cp)
	if err != nil {
		return nil, err
	}
	// Only in place of the checkpoint just read: another replica may have
	// stored a later one meanwhile.
	if err := resignScript.Run(ctx, s.rdb, []string{key}, old, jws).Err(); err != nil {
		return nil, fmt.Errorf("%w: store checkpoint: %v", ErrUnavailable, err)
	}
	s.log.InfoContext(ctx, "audit retention: checkpoint of an earlier release signed again with its typ",
		"stream", stream, "chain", chain, "last_sequence", cp.Sequence)
	return s.Checkpoint(ctx, stream, chain, opts)
}

// resignScript replaces a checkpoint's JWS if it is still ARGV[1].
var resignScript = redis.NewScript(strings.ReplaceAll(`
if redis.call('HGET', KEYS[1], '@JWS@') == ARGV[1] then
  redis.call('HSET', KEYS[1], '@JWS@', ARGV[2])
end
return 0
`, "@JWS@", rediskeys.CheckpointJWS))

// trimLua stores a checkpoint unless a later one is stored already, then
// removes the records the stored checkpoint covers.
//
//	KEYS[1] checkpoint hash  KEYS[2] record stream
//	ARGV[1] checkpoint JWS   ARGV[2] its last sequence
const trimLua = `
local cur = tonumber(redis.call('HGET', KEYS[1], '@SEQ@') or '0')
local seq = tonumber(ARGV[2])
if seq > cur then
  redis.call('HSET', KEYS[1], '@JWS@', ARGV[1], '@SEQ@', ARGV[2])
  cur = seq
end
return redis.call('XTRIM', KEYS[2], 'MINID', string.format('%d', cur + 1) .. '-0')
`

var trimScript = redis.NewScript(strings.NewReplacer(
	"@SEQ@", rediskeys.CheckpointSequence,
	"@JWS@", rediskeys.CheckpointJWS,
).Replace(trimLua))

func (s *Store) storeCheckpoint(ctx context.Context, stream, chain string, cp *Checkpoint) error {
	_, streamKey := keys(stream, chain)
	err := trimScript.Run(ctx, s.rdb, []string{checkpointKey(stream, chain), streamKey}, cp.JWS,
		strconv.FormatUint(cp.Sequence, 10)).Err()
	if err != nil {
		return fmt.Errorf("%w: store checkpoint: %v", ErrUnavailable, err)
	}
	return nil
}

// dropIndex removes the Audit-ID index entries of moved records (best
// effort: a leftover entry only makes Get answer not found).
func (s *Store) dropIndex(ctx context.Context, es []attribution.Entry) {
	_, err := s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for _, e := range es {
			pl.Del(ctx, rediskeys.AuditIndex(e.AuditID))
		}
		return nil
	})
	if err != nil {
		s.log.Warn("audit retention: index entries of moved records not removed", "err", err)
	}
}
