package server

import (
	"sort"

	"github.com/agtpsuite/agtp/services/agtp"
)

func union(lists ...[]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range lists {
		for _, v := range l {
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	sort.Strings(out)
	return out
}

func uncovered(set agtp.ScopeSet, needed []string) []string {
	var missing []string
	for _, n := range needed {
		if !holds(set, n) {
			missing = append(missing, n)
		}
	}
	return missing
}

func validScopes(list []string) string {
	for _, sc := range list {
		if _, err := agtp.ParseScope(sc); err != nil {
			return sc
		}
	}
	return ""
}
