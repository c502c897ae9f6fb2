package attribution

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Stream names of the signed streams auditsvc keeps per agent.
const (
	StreamAttribution = "attribution"
	StreamLifecycle   = "lifecycle"
)

// ServerChainName names the server's own chain in exports and archives;
// anonymous traffic's records are on its shards, server-<n>.
const ServerChainName = rediskeys.ServerChain

// Entry is one line of an archive or export file (JSON Lines): a stored
// record with where it sits in its chain. The JWS is the authority; the
// other members are an index a verifier re-checks.
type Entry struct {
	// Format is "jws" (the only envelope this suite writes).
	Format string `json:"format"`
	// Stream is StreamAttribution, StreamLifecycle or another signed
	// stream's name.
	Stream string `json:"stream"`
	// Chain is the chain's Agent-ID, ServerChainName or one of its shards.
	Chain    string    `json:"chain"`
	Sequence uint64    `json:"sequence"`
	AuditID  string    `json:"audit_id"`
	JWS      string    `json:"jws"`
	StoredAt time.Time `json:"stored_at"`
}

// MaxEntryLine bounds one line of an archive file when reading it back.
const MaxEntryLine = 1 << 20

// ReadEntries calls fn for every entry of a JSON Lines stream, in order.
func ReadEntries(r io.Reader, fn func(Entry) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxEntryLine)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("attribution: line %d: %w", line, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("attribution: line %d: %w", line+1, err)
	}
	return nil
}

// ChainKey names one chain in a set of entries.
type ChainKey struct {
	Stream string
	Chain  string
}

// VerifyEntries checks every chain found in entries (which may come from
// several archive files, interleaved and unordered): per chain, sequences
// must run 1, 2, 3, ... without a gap or a duplicate (an entry written
// twice with identical content counts once), each Audit-ID must
// match its JWS, and the records must form a verified chain. Set
// opts.AgentID-style checks per chain through agentCheck (true: require
// agent_id == chain for every chain other than the server chain).
func VerifyEntries(entries []Entry, opts ChainOptions, agentCheck bool) map[ChainKey]ChainResult {
	byChain := map[ChainKey][]Entry{}
	for _, e := range entries {
		k := ChainKey{Stream: e.Stream, Chain: e.Chain}
		byChain[k] = append(byChain[k], e)
	}
	out := make(map[ChainKey]ChainResult, len(byChain))
	for k, es := range byChain {
		slices.SortStableFunc(es, func(a, b Entry) int { return cmp.Compare(a.Sequence, b.Sequence) })
		o := opts
		if agentCheck && !rediskeys.IsServerChain(k.Chain) {
			o.AgentID = k.Chain
		}
		v := NewChainVerifier(o)
		want := uint64(1)
		for i, e := range es {
			if i > 0 && e.Sequence == es[i-1].Sequence && e.AuditID == es[i-1].AuditID && e.JWS == es[i-1].JWS {
				// The same record twice (the archive sink's copy and the
				// retention task's): one record.
				continue
			}
			if e.Sequence != want {
				v.fail(&Break{Index: want - 1, AuditID: e.AuditID, Expected: fmt.Sprint(want), Problem: ProblemSequenceGap,
					Err: fmt.Errorf("sequence %d where %d was expected (gap or duplicate)", e.Sequence, want)})
				break
			}
			want++
			if _, err := v.Add(e.JWS, e.AuditID); err != nil {
				break
			}
		}
		out[k] = v.Result()
	}
	return out
}
