package textcut

import (
	"testing"
	"unicode/utf8"
)

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		cut  string
		mark string
	}{
		{"short", 10, "short", "short"},
		{"exactly", 7, "exactly", "exactly"},
		{"abcdef", 3, "abc", "abc…"},
		{"aé", 2, "a", "a…"}, // é is two bytes: not split
		{"ééé", 5, "éé", "éé…"},
		{"x", 0, "", "…"},
	} {
		if got := Cut(tc.in, tc.n); got != tc.cut || !utf8.ValidString(got) {
			t.Errorf("Cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.cut)
		}
		if got := Mark(tc.in, tc.n); got != tc.mark {
			t.Errorf("Mark(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.mark)
		}
	}
}
