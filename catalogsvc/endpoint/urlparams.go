package endpoint

import (
	"regexp"
	"strings"
)

// urlParamRe matches a {param} of an external_service URL template, and a
// ${VAR} environment placeholder with its '$' (which is not a parameter).
var urlParamRe = regexp.MustCompile(`\$?\{[A-Za-z_][A-Za-z0-9_]*\}`)

// URLPathSpan returns where the path of the absolute URL raw lies:
// from the '/' that ends the authority up to the first '?' or '#' (the
// places where net/url splits). start == end when there is no path.
func URLPathSpan(raw string) (start, end int) {
	end = len(raw)
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		end = i
	}
	start = 0
	if i := strings.Index(raw[:end], "//"); i >= 0 {
		start = i + 2
	}
	if i := strings.IndexByte(raw[start:end], '/'); i >= 0 {
		return start + i, end
	}
	return end, end
}

// URLParamOutsidePath returns the first {param} of an external_service URL
// template that lies outside the URL's path (in the host, port, query or
// fragment), or "" when every one is in the path. A caller's value fills
// path segments only: in the host it would choose the upstream, in the
// query it could add parameters of its own.
func URLParamOutsidePath(raw string) string {
	start, end := URLPathSpan(raw)
	for _, loc := range urlParamRe.FindAllStringIndex(raw, -1) {
		if raw[loc[0]] == '$' {
			continue
		}
		if loc[0] < start || loc[1] > end {
			return raw[loc[0]:loc[1]]
		}
	}
	return ""
}
