package console

import (
	"slices"
	"strconv"
	"testing"
)

// pagedInts is a service listing 0..n-1 in pages of size, with offset
// tokens, counting its calls.
func pagedInts(n, size int, calls *int) func(string) ([]int, string, error) {
	return func(token string) ([]int, string, error) {
		*calls++
		off := 0
		if token != "" {
			off, _ = strconv.Atoi(token)
		}
		var out []int
		for i := off; i < min(off+size, n); i++ {
			out = append(out, i)
		}
		next := ""
		if off+size < n {
			next = strconv.Itoa(off + size)
		}
		return out, next, nil
	}
}

// TestFilteredPageFillsAcrossServicePages pins that a filter applies to
// the whole list: pages are full while enough records match, resume
// inside a service page without repeating or skipping one, and one
// console page reads at most scanPages service pages.
func TestFilteredPageFillsAcrossServicePages(t *testing.T) {
	for _, tc := range []struct {
		name             string
		n, upstream, per int
		keep             func(int) bool
	}{
		{"sparse matches across service pages", 200, 7, 3, func(i int) bool { return i%10 == 0 }},
		{"every record matches, page ends mid service page", 20, 7, 3, func(int) bool { return true }},
		{"page ends on a service page's last record", 24, 6, 3, func(i int) bool { return i%2 == 1 }},
		{"no match within the bound", 5000, 10, 3, func(i int) bool { return i == 4999 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []int
			for i := range tc.n {
				if tc.keep(i) {
					want = append(want, i)
				}
			}
			var got []int
			token := ""
			for pages := 0; ; pages++ {
				calls := 0
				p, err := filteredPage(pagedInts(tc.n, tc.upstream, &calls), tc.keep, token, tc.per)
				if err != nil {
					t.Fatal(err)
				}
				if calls > scanPages {
					t.Fatalf("one page read %d service pages, bound %d", calls, scanPages)
				}
				if len(p.Items) < tc.per && p.Next != "" && calls != scanPages {
					t.Fatalf("a short page %v with a next page before the bound", p.Items)
				}
				got = append(got, p.Items...)
				if p.Next == "" {
					break
				}
				if pages > tc.n {
					t.Fatal("the pages do not end")
				}
				token = p.Next
			}
			if !slices.Equal(got, want) {
				t.Fatalf("pages held %v, want %v", got, want)
			}
		})
	}
	calls := 0
	for _, bad := range []string{"!!", scanToken("", -1), "bm90YXRva2Vu"} {
		if _, err := filteredPage(pagedInts(10, 5, &calls), func(int) bool { return true }, bad, 3); err == nil {
			t.Errorf("token %q accepted", bad)
		}
	}
}
