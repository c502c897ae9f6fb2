package paging

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Slice pages a list held in memory, sorted ascending by a unique key:
// the page starts after the key of the token (found by binary search, so
// an item added or removed meanwhile neither repeats nor hides another).
func Slice[T any](r Request, items []T, key func(T) string) (page []T, next string) {
	i := 0
	if r.After != "" {
		i = sort.Search(len(items), func(i int) bool { return key(items[i]) > r.After })
	}
	end := min(i+r.Size, len(items))
	page = items[i:end]
	if end < len(items) {
		next = r.Next(key(items[end-1]))
	}
	return page, next
}

// ZPos is a position in a sorted set: Redis orders members by score, then
// bytewise by member.
type ZPos struct {
	Score  float64
	Member string
}

// String encodes the position for Request.Next.
func (p ZPos) String() string {
	return strconv.FormatFloat(p.Score, 'g', -1, 64) + " " + p.Member
}

// ParseZPos decodes a position String made; the token was validated, so
// a failure means a token of another listing of the same RPC shape.
func ParseZPos(s string) (ZPos, error) {
	sc, m, ok := strings.Cut(s, " ")
	f, err := strconv.ParseFloat(sc, 64)
	if !ok || err != nil || m == "" {
		return ZPos{}, fmt.Errorf("position %q is not a sorted-set position", s)
	}
	return ZPos{Score: f, Member: m}, nil
}

// ZAfter reads up to n members of the sorted set key with score in
// [min, max] (Redis score bounds, "-inf"/"+inf" or "(x" allowed) that
// come after pos (nil: from the start), in set order. It reads from pos's
// score, so a page costs O(log N + n) plus the members that share pos's
// score and precede it.
func ZAfter(ctx context.Context, rdb redis.Cmdable, key, minScore, maxScore string, pos *ZPos, n int) ([]redis.Z, error) {
	if n <= 0 {
		return nil, nil
	}
	if pos != nil {
		minScore = strconv.FormatFloat(pos.Score, 'g', -1, 64)
	}
	var out []redis.Z
	var offset int64
	for len(out) < n {
		batch := int64(n - len(out))
		zs, err := rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: key, Start: minScore, Stop: maxScore, ByScore: true, Offset: offset, Count: batch}).Result()
		if err != nil {
			return nil, fmt.Errorf("zrange %s: %w", key, err)
		}
		for _, z := range zs {
			m, _ := z.Member.(string)
			if pos != nil && z.Score == pos.Score && m <= pos.Member {
				continue
			}
			out = append(out, z)
		}
		if int64(len(zs)) < batch {
			break
		}
		offset += int64(len(zs))
	}
	return out, nil
}

// Compare orders positions as Redis orders a sorted set.
func (p ZPos) Compare(q ZPos) int {
	switch {
	case p.Score < q.Score:
		return -1
	case p.Score > q.Score:
		return 1
	}
	return strings.Compare(p.Member, q.Member)
}
