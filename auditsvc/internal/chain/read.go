package chain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// ErrNotFound: no such record or chain.
var ErrNotFound = errors.New("not found")

// Head returns the newest Audit-ID and the length of (stream, chain).
// ErrNotFound if the chain has no record.
func (s *Store) Head(ctx context.Context, stream, chain string) (string, uint64, error) {
	if !ValidStreamName(stream) || !ValidChainID(chain) {
		return "", 0, ErrNotFound
	}
	headKey, streamKey := keys(stream, chain)
	vals, err := s.rdb.HMGet(ctx, headKey, rediskeys.HeadAuditID, rediskeys.HeadLength).Result()
	if err != nil {
		return "", 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	head, _ := vals[0].(string)
	ln, _ := vals[1].(string)
	if head != "" && ln != "" {
		n, err := strconv.ParseUint(ln, 10, 64)
		if err != nil {
			return "", 0, fmt.Errorf("%w: head length %q", ErrUnavailable, ln)
		}
		return head, n, nil
	}
	// A lost head hash: the stream's tail is the head (as in appendLua).
	msgs, err := s.rdb.XRevRangeN(ctx, streamKey, "+", "-", 1).Result()
	if err != nil {
		return "", 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if len(msgs) == 0 {
		return "", 0, ErrNotFound
	}
	e, err := entryOf(stream, chain, msgs[0])
	if err != nil {
		return "", 0, err
	}
	return e.AuditID, e.Sequence, nil
}

// Get returns the stored record with the given Audit-ID. The index only
// says where to look: the record returned always hashes to auditID.
func (s *Store) Get(ctx context.Context, auditID string) (attribution.Entry, error) {
	if !attribution.IsAuditID(auditID) {
		return attribution.Entry{}, ErrNotFound
	}
	v, err := s.rdb.Get(ctx, rediskeys.AuditIndex(auditID)).Result()
	if errors.Is(err, redis.Nil) {
		return attribution.Entry{}, ErrNotFound
	}
	if err != nil {
		return attribution.Entry{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	stream, seq, chain, ok := parseIndexValue(v)
	if !ok || !ValidStreamName(stream) || !ValidChainID(chain) {
		return attribution.Entry{}, ErrNotFound
	}
	es, err := s.Range(ctx, stream, chain, seq, 1)
	if err != nil {
		return attribution.Entry{}, err
	}
	if len(es) != 1 || es[0].Sequence != seq || es[0].AuditID != auditID || attribution.AuditID(es[0].JWS) != auditID {
		// An index entry of a record that lost its compare-and-append.
		return attribution.Entry{}, ErrNotFound
	}
	return es[0], nil
}

// Range returns up to count records of (stream, chain) from sequence from
// (1-based) on, oldest first.
func (s *Store) Range(ctx context.Context, stream, chain string, from uint64, count int64) ([]attribution.Entry, error) {
	if !ValidStreamName(stream) || !ValidChainID(chain) {
		return nil, ErrNotFound
	}
	_, streamKey := keys(stream, chain)
	msgs, err := s.rdb.XRangeN(ctx, streamKey, streamID(max(from, 1)), "+", count).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return entriesOf(stream, chain, msgs)
}

// RangeNewest returns up to count records of (stream, chain) newest first,
// starting below sequence before (0: from the newest).
func (s *Store) RangeNewest(ctx context.Context, stream, chain string, before uint64, count int64) ([]attribution.Entry, error) {
	if !ValidStreamName(stream) || !ValidChainID(chain) {
		return nil, ErrNotFound
	}
	_, streamKey := keys(stream, chain)
	end := "+"
	if before > 0 {
		if before == 1 {
			return nil, nil
		}
		end = streamID(before - 1)
	}
	msgs, err := s.rdb.XRevRangeN(ctx, streamKey, end, "-", count).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return entriesOf(stream, chain, msgs)
}

func streamID(seq uint64) string { return strconv.FormatUint(seq, 10) + "-0" }

func entriesOf(stream, chain string, msgs []redis.XMessage) ([]attribution.Entry, error) {
	out := make([]attribution.Entry, 0, len(msgs))
	for _, m := range msgs {
		e, err := entryOf(stream, chain, m)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func entryOf(stream, chain string, m redis.XMessage) (attribution.Entry, error) {
	seqStr, _, _ := strings.Cut(m.ID, "-")
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if err != nil {
		return attribution.Entry{}, fmt.Errorf("%w: stream entry id %q", ErrUnavailable, m.ID)
	}
	id, _ := m.Values["audit_id"].(string)
	jws, _ := m.Values["jws"].(string)
	ms, _ := m.Values["stored_at"].(string)
	at, _ := strconv.ParseInt(ms, 10, 64)
	return attribution.Entry{Format: "jws", Stream: stream, Chain: chain, Sequence: seq, AuditID: id, JWS: jws,
		StoredAt: time.UnixMilli(at).UTC()}, nil
}

// Verification is the result of checking a stored chain.
type Verification struct {
	attribution.ChainResult
	// Length is the chain length the head named when the check began.
	Length uint64
}

// Verify checks a stored chain up to the head it finds when it starts:
// sequences 1..n without gaps, every stored Audit-ID equal to its JWS's
// hash, every link and signature, and the head naming the last record.
// A trimmed chain is checked from its checkpoint on (Trim), after the
// checkpoint's own signature. Records appended while it runs are not
// checked.
func (s *Store) Verify(ctx context.Context, stream, chain string, opts attribution.ChainOptions, pageSize int64) (Verification, error) {
	head, length, err := s.Head(ctx, stream, chain)
	if err != nil {
		return Verification{}, err
	}
	if pageSize <= 0 {
		pageSize = 1000
	}
	v := attribution.NewChainVerifier(opts)
	out := func() Verification { return Verification{ChainResult: v.Result(), Length: length} }
	fail := func(b *attribution.Break) Verification {
		r := v.Result()
		r.Valid, r.Break = false, b
		return Verification{ChainResult: r, Length: length}
	}
	next := uint64(1)
	// A trimmed chain continues from its checkpoint (Trim): the records
	// before it are in the archive.
	cp, err := s.Checkpoint(ctx, stream, chain, opts.VerifyOptions)
	if errors.Is(err, ErrCheckpoint) {
		return fail(&attribution.Break{Problem: attribution.ProblemCheckpoint, Err: err}), nil
	}
	if err != nil {
		return Verification{}, err
	}
	if cp != nil {
		if cp.Sequence >= length {
			return fail(&attribution.Break{AuditID: cp.AuditID, Expected: strconv.FormatUint(length, 10), Problem: attribution.ProblemCheckpoint,
				Err: fmt.Errorf("the checkpoint covers record %d, the head says %d records", cp.Sequence, length)}), nil
		}
		next = cp.Sequence + 1
		opts.Start = cp.AuditID
		v = attribution.NewChainVerifier(opts)
	}
	for next <= length {
		if err := ctx.Err(); err != nil {
			return Verification{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		es, err := s.Range(ctx, stream, chain, next, min(pageSize, int64(length-next+1)))
		if err != nil {
			return Verification{}, err
		}
		if len(es) == 0 {
			return fail(&attribution.Break{Index: next - 1, Expected: strconv.FormatUint(next, 10), Problem: attribution.ProblemSequenceGap,
				Err: fmt.Errorf("the head says %d records, the stream ends before record %d", length, next)}), nil
		}
		for _, e := range es {
			if e.Sequence != next {
				return fail(&attribution.Break{Index: next - 1, AuditID: e.AuditID, Expected: strconv.FormatUint(next, 10), Problem: attribution.ProblemSequenceGap,
					Err: fmt.Errorf("record %d is missing (next stored is %d)", next, e.Sequence)}), nil
			}
			if next > length {
				break
			}
			if _, err := v.Add(e.JWS, e.AuditID); err != nil {
				return out(), nil
			}
			next++
		}
	}
	if r := v.Result(); length > 0 && r.Head != head {
		return fail(&attribution.Break{Index: length - 1, AuditID: r.Head, Expected: head, Problem: attribution.ProblemHeadMismatch,
			Err: errors.New("the head does not name the newest record")}), nil
	}
	return out(), nil
}

// RebuildIndex rewrites the Audit-ID index entries of one chain from its
// stream (recovery after an index write was lost; see docs/audit.md).
func (s *Store) RebuildIndex(ctx context.Context, stream, chain string) (int, error) {
	n := 0
	for from := uint64(1); ; {
		es, err := s.Range(ctx, stream, chain, from, 1000)
		if err != nil {
			return n, err
		}
		if len(es) == 0 {
			return n, nil
		}
		_, err = s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, e := range es {
				if attribution.AuditID(e.JWS) == e.AuditID {
					pl.Set(ctx, rediskeys.AuditIndex(e.AuditID), indexValue(stream, e.Sequence, chain), 0)
				}
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		n += len(es)
		from = es[len(es)-1].Sequence + 1
	}
}

// ChainRef names one stored chain.
type ChainRef struct{ Stream, Chain string }

// ScanChains calls fn for every chain with a head hash in Redis (on every
// master of a cluster). It is for recovery tools, not request paths.
func (s *Store) ScanChains(ctx context.Context, fn func(ChainRef) error) error {
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		for _, pattern := range []string{rediskeys.ChainHead("*"), rediskeys.LifecycleHead("*"), rediskeys.SignedStreamHead("*", "*")} {
			iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				if ref, ok := chainOfHeadKey(iter.Val()); ok {
					if err := fn(ref); err != nil {
						return err
					}
				}
			}
			if err := iter.Err(); err != nil {
				return fmt.Errorf("%w: scan: %v", ErrUnavailable, err)
			}
		}
		return nil
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	}
	return scan(ctx, s.rdb)
}

// chainOfHeadKey inverts the rediskeys head key functions.
func chainOfHeadKey(key string) (ChainRef, bool) {
	rest, ok := strings.CutPrefix(key, rediskeys.Prefix+"{")
	if !ok {
		return ChainRef{}, false
	}
	chain, suffix, ok := strings.Cut(rest, "}")
	if !ok || !ValidChainID(chain) {
		return ChainRef{}, false
	}
	switch {
	case key == rediskeys.ChainHead(chain):
		return ChainRef{attribution.StreamAttribution, chain}, true
	case key == rediskeys.LifecycleHead(chain):
		return ChainRef{attribution.StreamLifecycle, chain}, true
	}
	name, ok := strings.CutPrefix(suffix, ":signed:")
	if !ok {
		return ChainRef{}, false
	}
	name, ok = strings.CutSuffix(name, ":head")
	if !ok || !ValidStreamName(name) {
		return ChainRef{}, false
	}
	return ChainRef{name, chain}, true
}

// RebuildAllIndexes rewrites the index entries of every stored chain
// (ScanChains + RebuildIndex): the recovery step after index writes were
// lost, e.g. a Cluster shard that lost its AOF tail.
func (s *Store) RebuildAllIndexes(ctx context.Context) (chains, records int, err error) {
	err = s.ScanChains(ctx, func(r ChainRef) error {
		n, err := s.RebuildIndex(ctx, r.Stream, r.Chain)
		chains++
		records += n
		return err
	})
	return chains, records, err
}

// DurabilityWarnings reports Redis settings under which an acknowledged
// record could be lost (best effort: managed Redis may refuse CONFIG).
func (s *Store) DurabilityWarnings(ctx context.Context) []string {
	get := func(name string) (string, bool) {
		m, err := s.rdb.ConfigGet(ctx, name).Result()
		if err != nil {
			return "", false
		}
		v, ok := m[name]
		return v, ok
	}
	var out []string
	if v, ok := get("appendonly"); ok && v != "yes" {
		out = append(out, "appendonly is "+v+": acknowledged audit records are lost when Redis restarts (set appendonly yes)")
	}
	if v, ok := get("appendfsync"); ok && v == "no" {
		out = append(out, "appendfsync is no: the kernel decides when audit records reach disk (use everysec or always)")
	}
	if v, ok := get("maxmemory-policy"); ok && v != "noeviction" {
		out = append(out, "maxmemory-policy is "+v+": Redis may evict audit chains under memory pressure (set noeviction)")
	}
	return append(out, s.replicationWarnings(ctx)...)
}

// replicationWarnings compares the replicas each primary has online (INFO
// replication, once) with Options.ReplicaAcks.
func (s *Store) replicationWarnings(ctx context.Context) []string {
	var mu sync.Mutex
	var out []string
	check := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil || infoField(info, "role") != "master" {
			return nil
		}
		online := 0
		for _, line := range strings.Split(info, "\r\n") {
			if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
				online++
			}
		}
		addr := c.Options().Addr
		var w string
		switch acks := s.opts.ReplicaAcks; {
		case acks == 0 && online > 0:
			w = fmt.Sprintf("primary %s has %d replica(s) online but audit appends do not wait for them (replica acks 0, AGTP_AUDIT_REPLICA_ACKS): "+
				"records acknowledged in the moments before a failover can be lost", addr, online)
		case acks > 0 && online < acks:
			w = fmt.Sprintf("primary %s has %d replica(s) online, fewer than the %d every audit append waits for: "+
				"appends to its chains fail (unavailable) until enough replicas are online", addr, online, acks)
		default:
			return nil
		}
		mu.Lock()
		out = append(out, w)
		mu.Unlock()
		return nil
	}
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, check)
	case *redis.Client:
		_ = check(ctx, c)
	}
	slices.Sort(out)
	return out
}

// infoField is one "name:value" line of an INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}
