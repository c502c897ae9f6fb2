package testkit

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/services/paging"
)

// ListPage is one page of a List RPC under test: the keys of its items in
// the order returned, and its next_page_token.
type ListPage func(pageSize int32, pageToken string) (keys []string, next string, err error)

// CheckPaging walks a List RPC with pages of pageSize and checks the
// AIP-158 contract: the pages together are want, in order, each item once;
// every page but the last is full and carries a token, the last carries
// none; a garbled token is InvalidArgument. It returns a token of the
// walk for a caller to present with other filter fields.
func CheckPaging(tb testing.TB, pageSize int32, want []string, list ListPage) (midToken string) {
	tb.Helper()
	if len(want) <= int(pageSize) {
		tb.Fatalf("CheckPaging needs more than one page: %d items, page size %d", len(want), pageSize)
	}
	var got []string
	tok := ""
	for pages := 0; ; pages++ {
		if pages > len(want) {
			tb.Fatalf("more pages than items; got so far %v", got)
		}
		keys, next, err := list(pageSize, tok)
		if err != nil {
			tb.Fatalf("page %d: %v", pages, err)
		}
		got = append(got, keys...)
		if next == "" {
			break
		}
		if len(keys) != int(pageSize) {
			tb.Errorf("page %d has %d items and a next_page_token, want a full page of %d", pages, len(keys), pageSize)
		}
		if midToken == "" {
			midToken = next
		}
		tok = next
	}
	if !slices.Equal(got, want) {
		tb.Errorf("pages listed\n%v\nwant each item once, in order:\n%v", got, want)
	}
	for _, bad := range []string{"garbled!", "eyJyIjoieCJ9", midToken + "x"} {
		if _, _, err := list(pageSize, bad); status.Code(err) != codes.InvalidArgument {
			tb.Errorf("page_token %q: err %v, want InvalidArgument", bad, err)
		}
	}
	if _, _, err := list(-1, ""); status.Code(err) != codes.InvalidArgument {
		tb.Errorf("page_size -1: err %v, want InvalidArgument", err)
	}
	return midToken
}

// CheckTokenMismatch checks that a token presented with other filter
// fields is InvalidArgument.
func CheckTokenMismatch(tb testing.TB, token string, list ListPage) {
	tb.Helper()
	if _, _, err := list(1, token); status.Code(err) != codes.InvalidArgument {
		tb.Errorf("a token of another filter: err %v, want InvalidArgument", err)
	}
}

// ZMembers are the members of ps in the order a List RPC over a sorted
// set pages them (score, then member): the want of CheckPaging.
func ZMembers(ps []paging.ZPos) []string {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, paging.ZPos.Compare)
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Member
	}
	return out
}
