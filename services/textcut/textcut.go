// Package textcut bounds text a peer wrote before it is stored, logged or
// echoed.
package textcut

import "unicode/utf8"

// Cut bounds s to at most n bytes, cut at a rune boundary so that text
// that was valid UTF-8 stays so (a protobuf string must be).
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Mark is Cut, ending a cut value with "…" so a reader sees it was cut.
func Mark(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Cut(s, n) + "…"
}
